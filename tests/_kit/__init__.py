"""Helpers shared by tests (never import one test file from another)."""
