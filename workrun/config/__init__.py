"""Loading a workflow file (``workflow.py``): every error at once, named by file and field (R-K5)."""
