"""One reading of a workflow file's TOML for two readers in one process (issue 33).

``workrun run`` looks at the workflow first thing, before it loads the rest of itself, for the project whose
fork server it starts ahead (:func:`workrun.cli.entry._first_project`); the loader then reads the same file.
The look keeps its parse here (:func:`keep`) and the loader takes it (:func:`take`) when it reads the very same
text, instead of parsing ~2 ms of a 50-node workflow again. This module imports nothing but ``tomllib``, so the
look does not delay that fork server's start by loading the loader's modules.
"""

from __future__ import annotations

import tomllib
from typing import Any

__all__ = ["keep", "loads", "take"]

_KEPT: dict[str, dict[str, Any]] = {}


def loads(text: str) -> dict[str, Any]:
    """``tomllib.loads(text)``, its result kept for one :func:`take` of the same text.

    Raises:
        tomllib.TOMLDecodeError: not TOML; RecursionError: nested too deep.
    """
    data = tomllib.loads(text)
    keep(text, data)
    return data


def keep(text: str, data: dict[str, Any]) -> None:
    """Keep ``data``, the parse of ``text``, for the next :func:`take` of that text (only the last one is kept)."""
    _KEPT.clear()
    _KEPT[text] = data


def take(text: str) -> dict[str, Any] | None:
    """The parse kept for exactly this ``text``, once (None when there is none): its first reader must not have
    changed it."""
    return _KEPT.pop(text, None)
