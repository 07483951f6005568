"""Workers sharing a PostgreSQL journal (R-S2, R-S3): claims, leases, heartbeats, takeover.

Two kinds of claim, both ``SELECT … FOR UPDATE SKIP LOCKED`` with the worker's
id and a lease its heartbeat renews:

- **Run claims: the scheduler.** A worker (``workrun worker``) claims a run that
  needs work — nodes to run, compensations to attempt, a remote cancel owed —
  with the journal's ``claim_run`` and drives it with the same code as a local
  ``workrun run``/``resume`` (:func:`workrun.engine.recovery.drive`: the engine, then
  compensation in reverse dependency order with hold-back). One scheduler per run
  decides its order and hold-back (R-C3, R-C4).
- **Call claims: the executors.** The scheduler does not start App processes
  itself: each node call and compensation attempt it decides to start is queued
  in ``dispatched_calls`` (:class:`workrun.cluster.dispatch.DispatchRunner`), and the
  executor slots of any worker claim queued calls, run them and store their
  outcomes (:class:`workrun.cluster.dispatch.Executors`). So one run's calls spread over
  the fleet while its order is decided in one place. HTTP requests and reverse
  actions are sent by the run's scheduler itself.

``workrun worker --concurrency N`` runs up to N schedulers (runs driven at once;
they mostly wait on the journal) and N executor slots (App processes at once on
this machine); ``--executors M`` sets the slots apart (0: schedule only).
A command that schedules one run itself — ``run`` without ``--submit``,
``compensate``, ``compensations retry`` — holds that run's claim and runs
executor slots (``WORKRUN_CONCURRENCY``) for that run's calls, so it needs no
worker; ``resume`` does the same for each run it claims. Workers may execute
some of those calls too.

Leases: a heartbeat thread renews every held run claim and call claim every
``min(lease / 3, 1)`` seconds. A worker killed (or frozen) stops renewing; once
its lease has passed another worker's claim takes its runs over, and each call
it was executing is decided by the scheduler waiting for it (R-R3): on the same
host its process is waited for and its exit record read; from another host the
exit record decides if reachable, else the call is ``unknown`` — never re-sent
blindly, and never claimed and run again by another executor. A compensation
whose success was saved is never run again (R-R2): only ``pending`` ones start,
and a start is a conditional write on the status it saw.

Fencing (R-F2): each claim of a run has an epoch one above the last, and a
scheduler drives its run inside the journal's ``fenced`` (run, worker, epoch): every
write it makes for the run is conditional on the claim still being that one. A
worker frozen past its lease whose run another worker took writes nothing more to
it: its scheduler stops at its first refused write
(:class:`~workrun.core.errors.ClaimLostError`), says so on its own stderr (never in the
journal) and the worker goes on with other runs; its heartbeat, finding the claim
gone, says so too. An executor that lost a call claim stores nothing (its write is
conditional on the claim).
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

from workrun.cluster.dispatch import DispatchRunner, Executors
from workrun.core import logs, metrics, settings
from workrun.core.errors import ClaimLostError, ConfigError, DatabaseUnreachableError, SchedulerBusyError
from workrun.core.rows import RunClaimRow
from workrun.engine.recovery import drive
from workrun.journal import open_journal
from workrun.journal.base import RunClaims, SharedJournal
from workrun.runner.context import Reporter, TicketOpener, new_id
from workrun.runner.process import alive
from workrun.runner.services import Services

__all__ = ["DEFAULT_LEASE", "Heartbeat", "Worker", "dispatching", "drive_claimed", "holding", "lease_seconds",
           "claim_lost", "fenced", "needs_workers", "queue_depth_gauge", "resume_shared", "say_claim_lost", "shared"]

DEFAULT_LEASE = settings.Settings.lease  # seconds
IDLE_POLL = 0.5  # seconds between claim attempts when nothing is claimable
RECLAIM_DELAY = 15.0  # a run given back unfinished (e.g. environment unavailable) is not re-claimed sooner


def lease_seconds() -> float:
    """The claim lease in seconds: ``WORKRUN_LEASE`` (a number >= 1), default 30; checked by
    :mod:`workrun.core.settings`.

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
        on_lost: called with the run ids this worker lost (default: say so on stderr; the run's scheduler
            stops at its first write, refused by the claim's epoch, R-F2).
        on_unreachable: called (from the heartbeat's thread) when ``WORKRUN_DB_RETRY`` ran out (R-F1); None: the
            process's main thread finds out at its own next use of the database.
    """

    def __init__(self, data_dir: Path, lease: float, on_lost: Callable[[set[str]], None] | None = None,
                 on_unreachable: Callable[[DatabaseUnreachableError], None] | None = None) -> None:
        self.worker_id = new_id("wkr")
        self.host = socket.gethostname()
        self.lease = lease
        self.data_dir = data_dir
        self.held: set[str] = set()
        self.calls: set[str] = set()
        self.executors: Executors | None = None
        self._mutex = threading.Lock()
        self._stop = threading.Event()
        self._journal: SharedJournal | None = None  # the heartbeat's own connection (RunClaims, CallClaims)
        self._thread: threading.Thread | None = None
        self.on_lost = on_lost or self._say_lost
        self.on_unreachable = on_unreachable

    def start(self) -> Heartbeat:
        """Register the worker and start renewing."""
        self._journal = cast(SharedJournal, open_journal(self.data_dir, check=False))
        self._journal.register_worker(self.worker_id, self.host, os.getpid(), self.lease, time.time())
        self._thread = threading.Thread(target=self._loop, name="workrun-heartbeat", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(min(self.lease / 3, 1.0)):
            with self._mutex:
                held = set(self.held)
                calls = set(self.calls)
            now = time.time()
            try:
                assert self._journal is not None
                renewed = self._journal.heartbeat(self.worker_id, now, self.lease, held)
                kept = self._journal.renew_calls(self.worker_id, now, self.lease, calls) if calls else {}
            except DatabaseUnreachableError as exc:  # the process is ending (its main thread says so, once)
                if self.on_unreachable is not None:  # a command waiting for a call would find out only after it
                    self.on_unreachable(exc)
                continue
            except Exception as exc:  # a database hiccup: try again next beat; the lease has slack
                logs.say("heartbeat_failed", "warning", f"heartbeat failed: {exc}",
                         prefix=f"workrun worker {self.worker_id}")
                continue
            stop = {c for c, asked in kept.items() if asked}
            if stop and self.executors is not None:
                self.executors.stop_calls(stop)
            with self._mutex:
                lost = (held & self.held) - renewed
                self.held -= lost
            if lost:
                self.on_lost(lost)

    def _say_lost(self, lost: set[str]) -> None:
        for run_id in sorted(lost):
            say_claim_lost(run_id, self.worker_id)

    def held_runs(self) -> list[str]:
        """The runs this worker holds now."""
        with self._mutex:
            return sorted(self.held)

    def hold_call(self, call_id: str) -> None:
        """Renew the claim on a call this worker's executors run (until :meth:`drop_call`)."""
        with self._mutex:
            self.calls.add(call_id)

    def drop_call(self, call_id: str) -> None:
        """Stop renewing a call's claim (its outcome is stored, or the claim was lost)."""
        with self._mutex:
            self.calls.discard(call_id)

    def claim(self, journal: RunClaims, run_id: str | None = None) -> RunClaimRow | None:
        """Claim a run (any that needs work, or ``run_id``) for this worker; remember it for renewal."""
        with self._mutex:  # renewals of a claim being taken wait, so a fresh claim is never reported lost
            got = journal.claim_run(self.worker_id, time.time(), self.lease, run_id, exclude=self.held)
            if got:
                self.held.add(got["run_id"])
        return got

    def release(self, journal: RunClaims, run_id: str, not_before: float | None = None) -> None:
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


def say_claim_lost(run_id: str, worker_id: str) -> None:
    """Say on this process's stderr (or its JSON log) that it lost ``run_id``'s claim — never in the journal,
    which this worker may no longer write for that run (R-F2)."""
    text = (f"worker {worker_id} lost its claim on run {run_id} (its lease passed and the run was claimed again "
            "since); it makes no more writes for that run")
    logs.say("claim_lost", "warning", text, run_id=run_id)


@contextmanager
def dispatching(svc: Services, run_id: str) -> Iterator[None]:
    """While scheduling ``run_id`` on a shared journal, start its App processes through executors' claims
    (:class:`~workrun.cluster.dispatch.DispatchRunner`), and settle its in-flight ones from their claims (R-R3)."""
    runner = svc.runner
    svc.runner = DispatchRunner(shared(svc), runner, run_id)
    try:
        yield
    finally:
        svc.runner = runner


def drive_claimed(svc: Services, claim: RunClaimRow) -> str:
    """Drive a claimed run with the local engine and compensation (after R-R3 recovery on takeover)."""
    run_id = claim["run_id"]
    if claim["takeover"]:
        metrics.count_claim_expired()
        same = claim["previous_host"] == socket.gethostname()
        svc.say(run_id, None, "warning",
                f"worker {claim['previous_worker']} (host {claim['previous_host']}) stopped renewing its lease; "
                "taking the run over: its in-flight calls are settled from their exit records"
                + ("" if same else " where reachable from this machine, else marked unknown")
                + "; calls that other workers execute are waited for")
    with fenced(svc, claim), dispatching(svc, run_id):
        return drive(svc, run_id)


def claim_lost(journal: SharedJournal, claim: RunClaimRow) -> bool:
    """True when ``claim`` is no longer the run's claim (another claim, a higher epoch, was taken since)."""
    now = journal.run_claim(claim["run_id"]) or {}
    return (now.get("worker_id"), now.get("epoch")) != (claim["worker_id"], claim["epoch"])


@contextmanager
def fenced(svc: Services, claim: RunClaimRow) -> Iterator[None]:
    """While inside, every write of ``svc``'s journal is conditional on ``claim`` (its worker and epoch, R-F2)."""
    with shared(svc).fenced(claim["run_id"], claim["worker_id"], claim["epoch"]):
        yield


@contextmanager
def holding(svc: Services, run_id: str, *, wait: bool) -> Iterator[RunClaimRow]:
    """Hold one run's claim (with a heartbeat) for a command that schedules it: ``run``, ``compensate``, ``retry``.

    Raises:
        SchedulerBusyError: a live worker holds the run and ``wait`` is False (exit 3).
    """
    # R-F1: out of WORKRUN_DB_RETRY while the command waits for a call (it writes nothing meanwhile): the surface
    # says what then, e.g. the CLI exits 1 at once, as a worker does (conformance review: it waited for the App)
    beat = Heartbeat(svc.data_dir, lease_seconds(),
                     on_unreachable=getattr(svc.reporter, "database_unreachable", None)).start()
    asked_stop = False
    executors: Executors | None = None
    try:
        while True:
            claim = beat.claim(shared(svc), run_id)
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
        executors = _own_executors(svc, beat, lambda: [run_id])
        with fenced(svc, claim), dispatching(svc, run_id):
            yield claim
        beat.release(shared(svc), run_id)
    finally:
        if executors is not None:
            executors.drain()
        beat.stop()


def _own_executors(svc: Services, beat: Heartbeat, runs: Callable[[], list[str]]) -> Executors:
    """Executor slots (``WORKRUN_CONCURRENCY``) for the calls of the runs a command schedules itself."""
    executors = Executors(svc.data_dir, beat, svc.concurrency, runs).start()
    beat.executors = executors
    return executors


class Worker:
    """``workrun worker``: claim and drive runs until told to stop (R-S2).

    Args:
        data_dir: this worker's data directory (call directories, App environments).
        concurrency: runs driven at once (each with its own journal connection).
        executors: executor slots — App processes run at once for any run's scheduler (see the module
            doc); None: as many as ``concurrency``; 0: this worker only schedules.
        lease: claim lease in seconds.
        reporter: where progress goes.
        idle_exit: stop after this many seconds with nothing to claim (None: run until stopped).
    """

    def __init__(self, data_dir: Path, *, concurrency: int, lease: float, reporter: Reporter | None = None,
                 idle_exit: float | None = None, executors: int | None = None,
                 open_ticket: TicketOpener | None = None) -> None:
        self.data_dir = data_dir
        self.open_ticket = open_ticket
        self.concurrency = concurrency
        self.slots = concurrency if executors is None else executors
        self.beat = Heartbeat(data_dir, lease)
        self.reporter = reporter
        self.idle_exit = idle_exit
        self.draining = threading.Event()
        self.driven = 0
        self.executors: Executors | None = None

    @property
    def worker_id(self) -> str:
        """This worker's id (``wkr_…``), recorded on each claim."""
        return self.beat.worker_id

    def _slot(self, claim: RunClaimRow) -> str:
        svc = Services(self.data_dir, self.reporter, check=False, open_ticket=self.open_ticket)
        try:
            try:
                status = drive_claimed(svc, claim)
            except Exception as exc:
                # another worker drives it now (R-F2): a refused write, or anything a scheduler that woke up
                # behind the journal runs into; nothing more to do or write here
                if isinstance(exc, ClaimLostError) or claim_lost(shared(svc), claim):
                    say_claim_lost(claim["run_id"], self.worker_id)
                    return "lost"
                raise
            again = shared(svc).run_needs_work(claim["run_id"])  # e.g. environment unavailable: back off a little
            self.beat.release(shared(svc), claim["run_id"], time.time() + (RECLAIM_DELAY if again else 0.0))
            return status
        finally:
            svc.close()

    def run(self) -> int:
        """Claim and drive runs until :attr:`draining` is set (or idle for ``idle_exit``); return an exit code."""
        self.beat.start()
        journal = cast(SharedJournal, open_journal(self.data_dir, check=False))
        gauge = queue_depth_gauge(self.data_dir)
        executors = self.executors = Executors(self.data_dir, self.beat, self.slots).start()
        self.beat.executors = executors
        running: dict[Future[str], str] = {}
        idle_since = time.monotonic()
        unreachable = False
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
                    if executors.busy:
                        idle_since = time.monotonic()
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
        except DatabaseUnreachableError:  # WORKRUN_DB_RETRY ran out (R-F1): nothing could store what the calls in
            unreachable = True             # hand return; they are left as after a crash (their claims pass on)
            raise
        finally:
            if unreachable:
                executors.abandon()
            else:
                executors.drain()  # the calls in hand end and are stored; nothing more is claimed
            journal.close()
            gauge.close()
            self.beat.stop()
        return 0


class _QueueDepthGauge:
    """What :func:`queue_depth_gauge` returns: :meth:`close` ends its connection (nothing when it has none)."""

    def __init__(self, journal: Any = None) -> None:
        self._journal, self._lock = journal, threading.Lock()

    def read(self) -> float:
        with self._lock:
            try:
                return float(self._journal.queued_call_count())
            except Exception:  # a scrape never fails the process
                return float("nan")

    def close(self) -> None:
        with self._lock:
            if self._journal is not None:
                self._journal.close()
                self._journal = None


def queue_depth_gauge(data_dir: Path) -> _QueueDepthGauge:
    """Let ``workrun_dispatch_queue_depth`` read the shared journal's queued calls at each scrape, on a connection
    of its own (R-F4): for ``worker`` and for ``run``/``resume`` serving metrics on a shared journal. Does
    nothing (and opens nothing) when metrics are off or the journal is SQLite's. Call ``close()`` when done.

    Raises:
        DatabaseUnreachableError: the shared journal cannot be reached.
    """
    if not metrics.enabled() or not settings.current().journal_url:
        return _QueueDepthGauge()
    gauge = _QueueDepthGauge(open_journal(data_dir, check=False))
    metrics.queue_depth_from(gauge.read)
    return gauge


def resume_shared(svc: Services) -> list[str]:
    """``workrun resume`` on a shared journal: claim and drive unclaimed (or expired) runs that need work,
    one at a time, until none is left; return the run ids handled (R-R1, R-S2)."""
    beat = Heartbeat(svc.data_dir, lease_seconds()).start()
    handled: list[str] = []
    executors = _own_executors(svc, beat, beat.held_runs)
    try:
        told: set[str] = set()
        while not svc.stopping():
            before = time.time()  # a lease that passes between the claim and the look below is still seen
            claim = beat.claim(shared(svc))
            if not claim:
                if not _orphaned_claims(svc, beat.host, handled, told, before):
                    break
                time.sleep(IDLE_POLL)  # a dead runner's claim: taken over once its lease passes (R-R1)
                continue
            svc.say(claim["run_id"], None, "info", f"resuming run {claim['run_id']}")
            try:
                drive_claimed(svc, claim)
            finally:
                again = shared(svc).run_needs_work(claim["run_id"])
                beat.release(shared(svc), claim["run_id"], time.time() + (RECLAIM_DELAY if again else 0.0))
            handled.append(claim["run_id"])
    finally:
        executors.drain()
        beat.stop()
    return handled


def _orphaned_claims(svc: Services, host: str, handled: list[str], told: set[str], now: float) -> bool:
    """True when a run needing work is still held by a runner on this host that is gone (killed, so it
    never released its claim): ``resume`` waits its lease out and takes it over rather than leaving it
    (R-R1). Runs held by a live runner (or one on another host) are left to it, said once each.

    ``now``: epoch seconds from before the claim that found nothing, so a lease that passed since is still
    held here (the next claim takes the run): asked at a later time, the run was in neither answer and
    ``resume`` said "nothing to resume" (a CI run caught it)."""
    waiting = False
    for row in shared(svc).held_runs_needing_work(now):
        rid = row["run_id"]
        if rid in handled:
            continue
        gone = row["host"] == host and (row["pid"] is None or not alive(int(row["pid"]), None))
        waiting = waiting or gone
        if rid not in told:
            told.add(rid)
            left = max(0.0, float(row["lease_until"]) - time.time())
            svc.say(rid, None, "info", f"run {rid}: its runner (worker {row['worker_id']}, pid {row['pid']}) is gone; "
                    f"taking the run over when its lease passes (in {left:.0f} s)" if gone else
                    f"run {rid} is driven by worker {row['worker_id']} (host {row['host']}, pid {row['pid']}); "
                    "left to it")
    return waiting
