"""Workers sharing a PostgreSQL journal (R-S2, R-S3): claims, leases, heartbeats, takeover.

A worker (``workrun worker``) loops: claim a run that needs work — nodes to
run, compensations to attempt, a remote cancel owed — with the journal's
``claim_run`` (``SELECT … FOR UPDATE SKIP LOCKED``), drive it with the same
code as a local ``workrun run``/``resume`` (:func:`workrun.recovery.drive`:
the engine, then compensation in reverse dependency order with hold-back),
and give it back. A claim is one run, so one scheduler decides each run's
order and hold-back (R-C3, R-C4) while many runs progress on many workers.

Leases: each claim carries the worker's id and ``lease_until``; a heartbeat
thread renews every held claim every ``lease / 3`` seconds. A worker killed
(or frozen) stops renewing; once its lease has passed, another worker's claim
takes the run over. Taking over begins with recovery (R-R3), exactly as after
a restart: an in-flight call or attempt whose App process is still alive on
this machine is waited for; its exit record decides the outcome; with no exit
record reachable (the call ran on another machine, or left none) it is
``unknown`` — never re-sent blindly. A compensation whose success was saved
is never run again (R-R2): only ``pending`` ones start, and a start is a
conditional write on the status it saw.

A worker whose heartbeat finds that it lost a claim (it was frozen past its
lease and another worker took the run) ends itself at once (fail-stop), so two
schedulers never keep driving one run.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

from workrun import settings
from workrun.errors import ConfigError, SchedulerBusyError
from workrun.journal import open_journal
from workrun.journal.base import SharedJournal
from workrun.recovery import drive
from workrun.runner import calldir
from workrun.runner.base import Outcome
from workrun.services import Reporter, Services, new_id

__all__ = ["DEFAULT_LEASE", "Heartbeat", "OtherMachineCalls", "Worker", "drive_claimed", "holding", "lease_seconds",
           "needs_workers", "resume_shared", "shared"]

DEFAULT_LEASE = settings.Settings.lease  # seconds
IDLE_POLL = 0.5  # seconds between claim attempts when nothing is claimable
RECLAIM_DELAY = 15.0  # a run given back unfinished (e.g. environment unavailable) is not re-claimed sooner


def lease_seconds() -> float:
    """The claim lease in seconds: ``WORKRUN_LEASE`` (a number >= 1), default 30; checked by :mod:`workrun.settings`.

    Raises:
        ConfigError: the variable is not a number >= 1 (exit 2).
    """
    return settings.current().lease


def shared(svc: Services) -> SharedJournal:
    """The command's journal as a shared one (call :func:`needs_workers` first)."""
    return cast(SharedJournal, svc.journal)


def needs_workers(svc: Services) -> None:
    """Refuse (exit 2) unless the journal is one that workers can share.

    Raises:
        ConfigError: the journal is the embedded SQLite one.
    """
    if not getattr(svc.journal, "supports_workers", False):
        raise ConfigError("workers and --submit need a shared journal: set WORKRUN_JOURNAL=postgresql://… "
                          "(the embedded SQLite journal has one scheduler per data directory)",
                          field="WORKRUN_JOURNAL")


class Heartbeat:
    """A worker's identity and the thread that renews its claims' leases.

    Args:
        data_dir: for the heartbeat's own journal connection.
        lease: seconds a claim stays valid without renewal.
        on_lost: called with the run ids this worker lost (default: end the process, fail-stop).
    """

    def __init__(self, data_dir: Path, lease: float, on_lost: Callable[[set[str]], None] | None = None) -> None:
        self.worker_id = new_id("wkr")
        self.host = socket.gethostname()
        self.lease = lease
        self.data_dir = data_dir
        self.held: set[str] = set()
        self._mutex = threading.Lock()
        self._stop = threading.Event()
        self._journal: Any = None
        self._thread: threading.Thread | None = None
        self.on_lost = on_lost or _fail_stop

    def start(self) -> Heartbeat:
        """Register the worker and start renewing."""
        self._journal = open_journal(self.data_dir, check=False)
        self._journal.register_worker(self.worker_id, self.host, os.getpid(), self.lease, time.time())
        self._thread = threading.Thread(target=self._loop, name="workrun-heartbeat", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.lease / 3):
            with self._mutex:
                held = set(self.held)
            try:
                renewed = self._journal.heartbeat(self.worker_id, time.time(), self.lease, held)
            except Exception as exc:  # a database hiccup: try again next beat; the lease has slack
                print(f"workrun worker {self.worker_id}: heartbeat failed: {exc}", file=sys.stderr)
                continue
            with self._mutex:
                lost = (held & self.held) - renewed
            if lost:
                self.on_lost(lost)

    def claim(self, journal: Any, run_id: str | None = None) -> dict[str, Any] | None:
        """Claim a run (any that needs work, or ``run_id``) for this worker; remember it for renewal."""
        with self._mutex:  # renewals of a claim being taken wait, so a fresh claim is never reported lost
            got = journal.claim_run(self.worker_id, time.time(), self.lease, run_id)
            if got:
                self.held.add(got["run_id"])
        return got

    def release(self, journal: Any, run_id: str, not_before: float | None = None) -> None:
        """Give a run back (see :meth:`PostgresJournal.release_run`)."""
        with self._mutex:
            self.held.discard(run_id)
            journal.release_run(run_id, self.worker_id, not_before if not_before is not None else time.time())

    def stop(self) -> None:
        """Stop renewing, mark the worker stopped (its remaining claims freed) and close."""
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=5)
        if self._journal is not None:
            try:
                self._journal.worker_stopped(self.worker_id, time.time())
            finally:
                self._journal.close()


def _fail_stop(lost: set[str]) -> None:
    print(f"error: WORKRUN_LEASE: this worker lost its claim on {', '.join(sorted(lost))} (its lease passed and "
          "another worker took over); ending at once so two schedulers never drive one run", file=sys.stderr)
    sys.stderr.flush()
    os._exit(75)


class OtherMachineCalls:
    """The App runner while taking over from a worker on another machine (R-S2, R-R3).

    That worker's process ids mean nothing here, so a call or attempt it left in flight is
    decided only by an exit record reachable from this machine (a shared file system), and
    is ``unknown`` otherwise — never re-sent blindly. Everything else is the wrapped runner's.
    """

    def __init__(self, runner: Any) -> None:
        self._runner = runner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._runner, name)

    def recover(self, pid: int | None, proc_start: str | None, call_dir: Path, deadline: float | None, *,
                claim_wait: float = 2.0) -> Outcome:
        """The exit record if reachable, else ``unknown`` (see class doc)."""
        return (calldir.read_exit(call_dir) if call_dir.is_dir() else None) or Outcome(unknown=True)

    def end(self, pid: int | None, proc_start: str | None, call_dir: Path, deadline: float | None) -> Outcome:
        """As :meth:`recover`: a process on another machine cannot be ended from here."""
        return self.recover(pid, proc_start, call_dir, deadline)


@contextmanager
def _settling_for(svc: Services, claim: dict[str, Any]) -> Iterator[None]:
    """While driving a run taken over from another machine's worker, settle its calls by :class:`OtherMachineCalls`."""
    if not claim["takeover"] or claim["previous_host"] == socket.gethostname():
        yield
        return
    runner = svc.runner
    svc.runner = OtherMachineCalls(runner)
    try:
        yield
    finally:
        svc.runner = runner


def drive_claimed(svc: Services, claim: dict[str, Any]) -> str:
    """Drive a claimed run with the local engine and compensation (after R-R3 recovery on takeover)."""
    run_id = claim["run_id"]
    if claim["takeover"]:
        same = claim["previous_host"] == socket.gethostname()
        svc.say(run_id, None, "warning",
                f"worker {claim['previous_worker']} (host {claim['previous_host']}) stopped renewing its lease; "
                "taking the run over: its in-flight calls are settled from their exit records"
                + ("" if same else " where reachable from this machine, else marked unknown"))
    with _settling_for(svc, claim):
        return drive(svc, run_id)


@contextmanager
def holding(svc: Services, run_id: str, *, wait: bool) -> Iterator[dict[str, Any]]:
    """Hold one run's claim (with a heartbeat) for a command that schedules it: ``run``, ``compensate``, ``retry``.

    Raises:
        SchedulerBusyError: a live worker holds the run and ``wait`` is False (exit 3).
    """
    beat = Heartbeat(svc.data_dir, lease_seconds()).start()
    asked_stop = False
    try:
        while True:
            claim = beat.claim(svc.journal, run_id)
            if claim:
                break
            if not wait:
                held = shared(svc).run_claim(run_id) or {}
                raise SchedulerBusyError(
                    f"worker {held.get('worker_id', '?')} (host {held.get('host', '?')}, pid {held.get('pid', '?')}) "
                    f"holds run {run_id}; wait for it or use --wait")
            if svc.stopping() and not asked_stop:  # Ctrl-C while another holder drives it: ask that one (R-C9)
                svc.journal.request_stop(run_id)
                asked_stop = True
            time.sleep(IDLE_POLL)
        with _settling_for(svc, claim):
            yield claim
        beat.release(svc.journal, run_id)
    finally:
        beat.stop()


class Worker:
    """``workrun worker``: claim and drive runs until told to stop (R-S2).

    Args:
        data_dir: this worker's data directory (call directories, App environments).
        concurrency: runs driven at once (each with its own journal connection).
        lease: claim lease in seconds.
        reporter: where progress goes.
        idle_exit: stop after this many seconds with nothing to claim (None: run until stopped).
    """

    def __init__(self, data_dir: Path, *, concurrency: int, lease: float, reporter: Reporter | None = None,
                 idle_exit: float | None = None) -> None:
        self.data_dir = data_dir
        self.concurrency = concurrency
        self.beat = Heartbeat(data_dir, lease)
        self.reporter = reporter
        self.idle_exit = idle_exit
        self.draining = threading.Event()
        self.driven = 0

    @property
    def worker_id(self) -> str:
        """This worker's id (``wkr_…``), recorded on each claim."""
        return self.beat.worker_id

    def _slot(self, claim: dict[str, Any]) -> str:
        svc = Services(self.data_dir, self.reporter, check=False)
        try:
            status = drive_claimed(svc, claim)
            again = shared(svc).run_needs_work(claim["run_id"])  # e.g. environment unavailable: back off a little
            self.beat.release(svc.journal, claim["run_id"], time.time() + (RECLAIM_DELAY if again else 0.0))
            return status
        finally:
            svc.close()

    def run(self) -> int:
        """Claim and drive runs until :attr:`draining` is set (or idle for ``idle_exit``); return an exit code."""
        self.beat.start()
        journal = open_journal(self.data_dir, check=False)
        running: dict[Future[str], str] = {}
        idle_since = time.monotonic()
        try:
            with ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="workrun-worker") as pool:
                while True:
                    claimed = False
                    while not self.draining.is_set() and len(running) < self.concurrency:
                        claim = self.beat.claim(journal)
                        if not claim:
                            break
                        claimed = True
                        running[pool.submit(self._slot, claim)] = claim["run_id"]
                    if running:
                        idle_since = time.monotonic()
                        done, _ = wait_futures(list(running), timeout=IDLE_POLL, return_when=FIRST_COMPLETED)
                        for fut in done:
                            running.pop(fut)
                            self.driven += 1
                            fut.result()  # a journal error ends the worker (its claims expire; others take over)
                        continue
                    if self.draining.is_set():
                        break
                    if self.idle_exit is not None and time.monotonic() - idle_since >= self.idle_exit:
                        break
                    if not claimed:
                        self.draining.wait(IDLE_POLL)
        finally:
            journal.close()
            self.beat.stop()
        return 0


def resume_shared(svc: Services) -> list[str]:
    """``workrun resume`` on a shared journal: claim and drive unclaimed (or expired) runs that need work,
    one at a time, until none is left; return the run ids handled (R-R1, R-S2)."""
    beat = Heartbeat(svc.data_dir, lease_seconds()).start()
    handled: list[str] = []
    try:
        while not svc.stopping():
            claim = beat.claim(svc.journal)
            if not claim:
                break
            svc.say(claim["run_id"], None, "info", f"resuming run {claim['run_id']}")
            try:
                drive_claimed(svc, claim)
            finally:
                again = shared(svc).run_needs_work(claim["run_id"])
                beat.release(svc.journal, claim["run_id"], time.time() + (RECLAIM_DELAY if again else 0.0))
            handled.append(claim["run_id"])
    finally:
        beat.stop()
    return handled
