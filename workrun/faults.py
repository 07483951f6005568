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

__all__ = ["hit"]

_spec = os.environ.get("WORKRUN_FAULT", "")
_point, _, _nth = _spec.partition("@")
_target = int(_nth) if _nth.isdigit() else 1
_count = 0


def hit(point: str) -> None:
    """Called after the journal write named ``point`` is committed; may SIGKILL this process."""
    global _count
    if not _point or point != _point:
        return
    _count += 1
    if _count == _target:
        os.kill(os.getpid(), signal.SIGKILL)
