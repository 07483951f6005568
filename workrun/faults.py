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

__all__ = ["hit"]

_armed: tuple[str, int] | None = None  # (point, N), read from the environment at the first hit
_count = 0


def _read() -> tuple[str, int]:
    point, _, nth = os.environ.get("WORKRUN_FAULT", "").partition("@")
    return point, int(nth) if nth.isdigit() else 1


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
