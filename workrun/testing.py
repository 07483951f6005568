"""The pytest plugin for App authors (SPEC §22, R-V3): prove a compensation before it is needed.

Installed with Workrun (entry point ``pytest11``: ``workrun = workrun.testing``), so in any project
whose tests run in an environment with Workrun:

    from workrun.testing import crash_at, fail_after

    def test_create_is_undone(workrun_api, tmp_path):
        with fail_after("create"):                      # as if the node after `create` had failed
            view = workrun_api.run("workflows/tutorial.toml")
        create = next(o for o in view["operations"] if o["node_key"] == "create")
        assert create["compensation"]["status"] == "succeeded"

    def test_compensation_survives_a_crash(workrun_api):
        with fail_after("create"), crash_at("attempt.started"):   # killed once the attempt is journaled
            view = workrun_api.run("workflows/tutorial.toml")
        assert view["compensation"] == "in_progress"
        after = workrun_api.resume()["runs"][0]                  # picks up where it was killed
        assert after["compensation"] == "complete"

Fixtures (function-scoped): ``workrun_home`` (a fresh private data directory, also set as
``WORKRUN_HOME`` for the test) and ``workrun_api`` (:mod:`workrun.api` bound to it).
Helpers: :func:`fail_after` and :func:`crash_at` (context managers); :data:`FAULT_POINTS` lists the
journal writes :func:`crash_at` can kill at.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from workrun import api
from workrun.app.runs import INJECTION, CrashNotReached
from workrun.core.redact import forget_all
from workrun.journal.base import FAULT_POINTS as _POINTS

__all__ = ["FAULT_POINTS", "CrashNotReached", "crash_at", "fail_after", "workrun_api", "workrun_home"]

#: the journal writes a run can be killed at (``crash_at(point)``), in the order a run meets them
FAULT_POINTS: tuple[str, ...] = tuple(_POINTS)


@contextmanager
def _injected(**what: Any) -> Iterator[None]:
    token = INJECTION.set({**(INJECTION.get() or {}), **what})
    try:
        yield
    finally:
        INJECTION.reset(token)


def fail_after(node_key: str) -> Any:
    """A context manager: runs started inside it (through :mod:`workrun.api` or ``workrun_api``) fail right after
    ``node_key`` succeeds, as if its successor had failed: nothing new starts, running nodes finish, and the
    run's succeeded calls are compensated (R-W3, R-V1). They are ordinary runs, not verify runs.

    Raises (from the run): ``workrun.api.WorkrunError`` (exit 2) when the workflow has no such node.
    """
    return _injected(fail_after=node_key)


def crash_at(point: str, n: int = 1) -> Any:
    """A context manager: runs started inside it run in a child process that is killed (SIGKILL) at the
    ``n``-th commit of the journal write ``point`` (one of :data:`FAULT_POINTS`); ``run`` then returns the
    journal's view of the unfinished run instead of raising, so the test can ``resume`` (R-V3). A run that
    never reached that commit (nothing was killed) warns :class:`CrashNotReached`.

    Raises:
        ValueError: ``point`` is not a fault point, or ``n`` is below 1.
    """
    if point not in FAULT_POINTS:
        raise ValueError(f"unknown fault point {point!r} (one of: {', '.join(FAULT_POINTS)})")
    if n < 1:
        raise ValueError(f"n must be at least 1, not {n}")
    return _injected(crash=(point, n))


@pytest.fixture
def workrun_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh private data directory (0700) for this test, also its ``WORKRUN_HOME``; the secrets earlier tests'
    runs in this process remembered are forgotten (they would redact this test's output, R-X2)."""
    forget_all()
    home = tmp_path / "workrun-home"
    home.mkdir(mode=0o700)
    os.chmod(home, 0o700)
    monkeypatch.setenv("WORKRUN_HOME", str(home))
    return home


@pytest.fixture
def workrun_api(workrun_home: Path) -> SimpleNamespace:
    """:mod:`workrun.api` bound to ``workrun_home``: ``run``, ``rerun``, ``resume``, ``compensate``, ``stop``,
    ``runs``, ``show``, ``check``, with ``home=`` given; ``WorkrunError`` and ``home`` besides."""
    bound = {name: partial(getattr(api, name), home=workrun_home)
             for name in ("run", "rerun", "resume", "compensate", "stop", "runs", "show", "check")}
    return SimpleNamespace(**bound, WorkrunError=api.WorkrunError, home=workrun_home)
