"""Fakes for engine-level tests: an App runner and node executors that start no process.

``FakeRunner`` implements :class:`workrun.runner.base.AppRunner`: "running" an App
means calling a Python function chosen by the entry file's name, which returns
what the App would have done (exit code, result); the fake writes the result into
the real call directory, so the real :mod:`workrun.runner.calldir` reads it.
``FakeExecutor`` is a node executor whose behaviour per node key is a function.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from workrun.core.models import NodeSpec, OutputField, WorkflowSpec
from workrun.core.outcomes import NodeOutcome
from workrun.journal import SqliteJournal
from workrun.nodes.base import NodeJob, Where
from workrun.runner import calldir
from workrun.runner.base import Collected, Outcome, Started
from workrun.runner.services import Services


@dataclass
class Call:
    """What an App function gets: the call's input envelope and how many times this entry ran before."""

    envelope: dict[str, Any]
    number: int


@dataclass
class Exit:
    """What an App function returns: exit code (or an Outcome flag) and result."""

    code: int = 0
    result: Any = None
    stopped: bool = False
    timed_out: bool = False
    stderr: str = ""


AppFunction = Callable[[Call], Exit]


class FakeRunner:
    """An AppRunner whose Apps are Python functions by entry file name (``apps["main.py"]``)."""

    decides_by_claim = False

    def __init__(self, apps: dict[str, AppFunction] | None = None) -> None:
        self.apps = apps or {}
        self.started: list[tuple[str, dict[str, Any]]] = []  # (entry name, envelope) in order
        self.fenced: list[Path] = []
        self.recovered: dict[str, Outcome] = {}  # call dir name -> what recover() finds
        self.environment_error: str | None = None
        self.stopped_all = False
        self.quick = False  # True: every call ends before RUNNING_AFTER (its ``running`` is never written)
        self._pending: dict[int, Exit] = {}
        self._lock = threading.Lock()
        self._pid = 100000

    def prepare(self, project: Path, *, offline: bool = False) -> str:
        if self.environment_error is not None:
            from workrun.core.errors import EnvironmentUnavailableError

            raise EnvironmentUnavailableError(self.environment_error, file=str(project))
        return "/fake/python"

    def start(self, python: str, project: Path, entry: Path, call_dir: Path, envelope: dict[str, Any], *,
              warm: str | None = None) -> Started:
        calldir.write_input(call_dir, envelope)
        with self._lock:
            number = sum(1 for name, _ in self.started if name == entry.name)
            self.started.append((entry.name, envelope))
            self._pid += 1
            pid = self._pid
        outcome = self.apps[entry.name](Call(envelope, number))
        (call_dir / "stdout").write_text("")
        (call_dir / "stderr").write_text(outcome.stderr)
        if outcome.result is not None:
            (call_dir / "result.json").write_text(json.dumps({"v": 1, "result": outcome.result}))
        with self._lock:
            self._pending[pid] = outcome
        return Started(pid=pid, proc_start="0", handle=pid)

    def wait(self, started: Started, deadline: float, *, running=None) -> Outcome:
        if running is not None and not self.quick:  # a quick call ends before RUNNING_AFTER: never ``running``
            running()
        with self._lock:
            got = self._pending.pop(started.pid)
        if self.stopped_all or got.stopped:
            return Outcome(exit_code=None, signal=15, stopped=True)
        if got.timed_out:
            return Outcome(exit_code=None, signal=15, timed_out=True)
        return Outcome(exit_code=got.code)

    def recover(self, pid: int | None, proc_start: str | None, call_dir: Path, deadline: float | None, *,
                claim_wait: float = 2.0) -> Outcome:
        return self.recovered.get(call_dir.name, Outcome(unknown=True))

    def end(self, pid: int | None, proc_start: str | None, call_dir: Path, deadline: float | None) -> Outcome:
        return Outcome(stopped=True)

    def fence(self, call_dir: Path) -> None:
        self.fenced.append(call_dir)

    def collect(self, call_dir: Path) -> Collected:
        return calldir.collect(call_dir)

    def stop_all(self) -> None:
        self.stopped_all = True

    def hang_up(self) -> None:
        pass

    def close(self) -> None:
        pass


def write_app_project(root: Path, name: str, *, compensation: bool = True, idempotent: bool = False,
                      output: str = "") -> Path:
    """An App project directory with ``main.py`` (and ``compensate.py``): files only, no uv (the fake runs it)."""
    project = root / name
    project.mkdir(parents=True)
    comp = '\ncompensation = { entry = "compensate.py", max_retries = 1, backoff = 0 }' if compensation else ""
    (project / "pyproject.toml").write_text(
        f'[project]\nname = "{name}"\nversion = "0.1.0"\n\n[tool.workrun.apps.{name}]\nentry = "main.py"\n'
        f'idempotent = {"true" if idempotent else "false"}{comp}\n{output}')
    (project / "uv.lock").write_text("version = 1\n")
    (project / "main.py").write_text("# run by FakeRunner\n")
    (project / "compensate.py").write_text("# run by FakeRunner\n")
    return project


@dataclass
class FakeExecutor:
    """A node executor for ``kind = "process"`` nodes whose behaviour per node key is a function of the job.

    Records the order nodes started in, the most that ran at once, and ``after_run`` calls.
    """

    kind: ClassVar[str] = "process"
    behaviours: dict[str, Callable[[NodeJob], NodeOutcome]] = field(default_factory=dict)
    started: list[str] = field(default_factory=list)
    jobs: dict[str, NodeJob] = field(default_factory=dict)
    after: list[str] = field(default_factory=list)
    most_at_once: int = 0
    _running: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def check(self, node: NodeSpec, where: Where) -> dict[str, OutputField]:
        return {}

    def run(self, job: NodeJob) -> NodeOutcome:
        with self._lock:
            self.started.append(job.node.key)
            self.jobs[job.node.key] = job
            self._running += 1
            self.most_at_once = max(self.most_at_once, self._running)
        try:
            behave = self.behaviours.get(job.node.key)
            return behave(job) if behave else NodeOutcome("succeeded", {"node": job.node.key})
        finally:
            with self._lock:
                self._running -= 1

    def after_run(self, svc: Services, run_id: str) -> None:
        self.after.append(run_id)


def hold(seconds: float) -> Callable[[NodeJob], NodeOutcome]:
    """A behaviour that takes ``seconds`` (so overlapping nodes are visible), then succeeds."""

    def behave(job: NodeJob) -> NodeOutcome:
        time.sleep(seconds)
        return NodeOutcome("succeeded", {"node": job.node.key})

    return behave


def failing(error: str = "boom") -> Callable[[NodeJob], NodeOutcome]:
    """A behaviour that fails with ``error``."""
    return lambda job: NodeOutcome("failed", error=error)


def workflow(nodes: dict[str, dict[str, Any]], inputs: dict[str, Any] | None = None) -> WorkflowSpec:
    """A WorkflowSpec of process nodes (``project``/``app`` default to dummies) without loading a file."""
    full = {k: {"key": k, "project": "/nowhere", "app": "x", **v} for k, v in nodes.items()}
    return WorkflowSpec.model_validate({"name": "test", "path": "/test.toml", "inputs": inputs or {}, "nodes": full})


def services(tmp_path: Path, runner: FakeRunner | None = None, concurrency: int = 4) -> Services:
    """Services over a real SQLite journal in ``tmp_path`` and a fake runner, with the ticket policy handed in
    as every surface hands it in."""
    from workrun.repair.policy import open_ticket

    svc = Services(tmp_path / "data", journal=SqliteJournal(tmp_path / "journal.sqlite3"),
                   runner=runner or FakeRunner(), open_ticket=open_ticket)
    svc.concurrency = concurrency
    return svc
