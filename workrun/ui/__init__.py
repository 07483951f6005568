"""The local dashboard (SPEC §13): ``workrun ui``. Imported only by that command (start-up speed, R-P3)."""
