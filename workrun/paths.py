"""Where Workrun keeps its data (R-J4): platformdirs' user data dir, or ``WORKRUN_HOME``."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

__all__ = ["data_dir"]


def data_dir() -> Path:
    """Return the data directory, created if missing.

    ``WORKRUN_HOME`` overrides the platform default
    (``~/.local/share/workrun`` on Linux).
    """
    override = os.environ.get("WORKRUN_HOME")
    path = Path(override).expanduser() if override else Path(platformdirs.user_data_dir("workrun", appauthor=False))
    path.mkdir(parents=True, exist_ok=True)
    return path.resolve()
