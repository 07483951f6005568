"""Running App processes through uv (R-A7, R-A8)."""
