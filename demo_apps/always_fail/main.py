"""A Process App that always fails (no compensation entry: nothing to undo)."""

raise RuntimeError("Intentional cleanup test")
