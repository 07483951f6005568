"""Test-only crash hook (issue 3): ``WORKRUN_FAULT=<point>[@N]`` SIGKILLs the runner.

The journal calls :func:`hit` right after committing each write, with the
write's point name (``run.created``, ``op.intent``, ``attempt.finished``, ...;
``workrun/journal/base.py`` lists them in ``FAULT_POINTS``). When the
variable names that point, the process kills itself with SIGKILL at the N-th
hit (default 1), exactly as ``kill -9`` would. The variable is read at the first
hit, not at import; unset, a hit costs a comparison.
"""

from __future__ import annotations

import os
import signal

from workrun.core import settings

__all__ = ["hit", "hit_all"]

_armed: tuple[str, int] | None = None  # (point, N), read from the settings at the first hit
_count = 0


def _read() -> tuple[str, int]:
    return settings.current().fault or ("", 0)


def hit_all(points: str | tuple[str, ...] | None) -> None:
    """:func:`hit` for each point of one transaction that committed several writes, in their order."""
    if points is None:
        return
    for point in (points,) if isinstance(points, str) else points:
        hit(point)


def hit(point: str) -> None:
    """Called after the journal write named ``point`` is committed; may SIGKILL this process."""
    global _armed, _count
    if _armed is None:
        _armed = _read()
    name, nth = _armed
    if not name or point != name:
        return
    _count += 1
    if _count == nth:
        os.kill(os.getpid(), signal.SIGKILL)
