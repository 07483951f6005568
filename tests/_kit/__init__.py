"""Helpers shared by tests (import as ``from _kit.NAME import ...``)."""
