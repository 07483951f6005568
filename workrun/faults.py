"""Test-only crash hook (issue 3): ``WORKRUN_FAULT=<point>[@N]`` SIGKILLs the runner.

The journal calls :func:`hit` right after committing each write, with the
write's point name (``run.created``, ``op.intent``, ``attempt.finished``, ...;
``workrun/journal/sqlite.py`` lists them in ``FAULT_POINTS``). When the
variable names that point, the process kills itself with SIGKILL at the N-th
hit (default 1), exactly as ``kill -9`` would. Unset, it costs one dict lookup.
"""

from __future__ import annotations

import os
import signal

from workrun import settings

__all__ = ["hit"]

_UNREAD = ("", 0)
_target: tuple[str, int] | None = _UNREAD
_count = 0


def hit(point: str) -> None:
    """Called after the journal write named ``point`` is committed; may SIGKILL this process."""
    global _count, _target
    if _target is _UNREAD:  # read once, at the first write (not at import)
        _target = settings.current().fault
    if _target is None or point != _target[0]:
        return
    _count += 1
    if _count == _target[1]:
        os.kill(os.getpid(), signal.SIGKILL)
