"""Claims of single App processes on a shared journal (R-S2, R-R3): the dispatching runner and the executors.

A run's **scheduler** (the worker, ``run`` or ``resume`` holding the run's claim)
decides what starts when — node order, reverse dependency order, hold-back
(R-C3, R-C4). It hands each App process it decides to start — a node call or a
compensation attempt — to the journal instead of starting it: the
:class:`DispatchRunner` (an :class:`~workrun.runner.base.AppRunner`) writes a
``queued`` row of ``dispatched_calls`` where ``start`` would start a process,
and gives it its timeout in ``wait``. Any worker's :class:`Executors` claim
queued rows with ``SELECT … FOR UPDATE SKIP LOCKED`` (oldest first), each claim
carrying the worker's id, host and a lease its heartbeat renews; they run the
process with their own :class:`~workrun.runner.local.LocalRunner` in a call
directory of their own data directory and store the outcome (exit code or
signal, the collected result, resources, recorded dependencies, output tails)
with a conditional write that holds only while they still hold the claim. The
scheduler reads that outcome and journals it exactly as for a local call.

Takeover (R-R3, never a blind re-send): an executor's claim whose lease passed
is **not** claimed and run again by another executor. The scheduler waiting for
it (or recovering it after its own restart) decides it: on the executor's host
its process is waited for and its exit record read (the same rules as after a
restart, :meth:`LocalRunner.recover`, which also fences a call whose process
never started); from another host the exit record decides if its directory is
reachable (a shared path), else the outcome is ``unknown``. That decision is
stored with a conditional write on the expired claim, so of a late executor and
a scheduler only one outcome is ever stored. Only a call whose process provably
never started (its directory fenced, the launcher's claim file) is queued again
for another executor. A call that was queued but not yet claimed when its
scheduler died still runs once (as a locally started process would); ``stop``
fences a queued row (a conditional write) so it can never start late.

What is dispatched: App processes (``process`` and ``tool`` nodes, Agent tool
calls and discovery, compensation scripts) and HTTP requests (``http`` nodes,
HTTP reverse actions; rows whose ``call`` has ``kind = "http"``). Remote A2A
tasks are sent by the run's scheduler itself.

**HTTP requests** (:meth:`DispatchRunner.send_request`): the scheduler journals
the intent (``starting``) and queues the request as prepared, except that
``{{ env.NAME }}`` in header values stays a reference
(:meth:`~workrun.outbound.http.PreparedRequest.queued`): nothing secret is stored. The
executor that claims it reads ``env.NAME`` from **its own** environment at send
time (so every worker that may send must have those variables, and
``WORKRUN_HTTP_ALLOW`` if the request needs it; the run's ``http_allow`` travels
with the request), passes the same outbound guard, and commits "about to send"
(:meth:`~workrun.journal.postgres.PostgresJournal.http_sending`: the claim's mark
and the operation's or attempt's ``running``, in one transaction, only while it
holds the claim and the operation/attempt is still ``starting``) before a byte
leaves (R-H1, R-H2). It stores the :class:`~workrun.outbound.http.SendResult` with
the same conditional write as an App call's outcome; the scheduler journals it
exactly as a request it sent itself. Takeover of a request whose executor's
lease passed: no "about to send" mark -> it was never sent: queued again
(conditional on the mark still being absent); the mark set and no result ->
``unknown`` (re-sent only when ``idempotent``, by the node or action's own rules,
with the same Idempotency-Key).
The scheduler checks that the App's environment can be prepared on its machine
before dispatching (so ``environment unavailable`` keeps its meaning, R-A8); the
executor prepares its own (cached), and materialises a code snapshot from the
database when the scheduler ran from one (R-S4).
"""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from workrun.core import logs, settings
from workrun.core.errors import DatabaseUnreachableError, EnvironmentUnavailableError
from workrun.core.outcomes import Failure
from workrun.core.rows import DispatchedCallRow
from workrun.core.structs import asdict
from workrun.journal import open_journal
from workrun.journal.base import SharedJournal
from workrun.outbound.http import (
    EnvLater,
    PreparedRequest,
    RequestError,
    SendResult,
    allow_from_env,
    from_queued,
    parse_allow,
    send,
)
from workrun.runner import calldir
from workrun.runner.base import AppRunner, Collected, Outcome, Started
from workrun.runner.forkserver import launch_mode
from workrun.runner.local import LocalRunner
from workrun.runner.process import kill_group, proc_start_time
from workrun.runner.snapshots import materialize

__all__ = ["DispatchRunner", "Executors"]

POLL_MIN = 0.02  # seconds between looks at a dispatched call, growing to POLL_MAX while it runs
POLL_MAX = 0.25
LEASE_SLACK = 1.0  # seconds past an executor's lease before its call is decided by R-R3
UNCLAIMED_SAY = 10.0  # seconds a handed-out call waits unclaimed before the run says why it waits
_STORED = threading.Condition()  # an executor of this process stored an outcome: waiting schedulers look at once


class _NotMine(Exception):
    """"About to send" was refused: the claim or the intent was settled meanwhile; nothing is sent."""


def _outcome(data: dict[str, Any] | None) -> Outcome:
    return Outcome(**data) if data else Outcome(unknown=True)


def _collected(data: dict[str, Any] | None) -> Collected:
    return Collected(**data) if data else Collected()


class DispatchRunner:
    """The App runner of a run's scheduler on a shared journal: App processes run on any worker's executor.

    Args:
        journal: the scheduler's shared journal (a :class:`~workrun.journal.postgres.PostgresJournal`).
        local: this machine's runner: prepares environments (so an unusable one is reported as such) and
            settles, on this host, calls whose executor's lease passed.
        run_id: the run whose calls this runner dispatches (executors may claim by run).

    See the module doc for the protocol; every method keeps :class:`~workrun.runner.base.AppRunner`'s contract.
    """

    decides_by_claim = True  # the run's claim holder settles every call of the run (R-R3, R-F2)
    request_environ: Mapping[str, str] = EnvLater()  # the executor that sends a request reads env.NAME (R-H5)

    def __init__(self, journal: SharedJournal, local: AppRunner, run_id: str | None) -> None:
        self.journal = journal
        self.local = local
        self.run_id = run_id
        self.host = socket.gethostname()
        self._stopping = threading.Event()
        self._waiting: set[str] = set()
        self._mutex = threading.Lock()
        self._said_unclaimed = False

    def prepare(self, project: Path, *, offline: bool = False) -> str:
        """Check (and prepare) the environment on this machine; the executor prepares its own (R-A8)."""
        return self.local.prepare(project, offline=offline)

    def start(self, python: str, project: Path, entry: Path, call_dir: Path, envelope: dict[str, Any], *,
              warm: str | None = None) -> Started:
        """Queue the call (claimable once :meth:`wait` gives it its timeout).

        The returned ``pid`` is this scheduler's own (with its start time): the App's pid and host are
        recorded on the dispatched call by the executor that starts it.

        Raises:
            OSError: the call was fenced (it can never start).
        """
        snapshot = project.name if project.parent.name == "snapshot-trees" else None
        call = {"project": str(project), "entry": str(Path(entry).relative_to(project)), "envelope": envelope,
                "warm": warm, "snapshot": snapshot, "offline": bool(snapshot)}
        if not self.journal.dispatch_call(call_dir.name, self.run_id, call, time.time()):
            raise OSError(f"call {call_dir.name} was fenced: it can never start")
        me = os.getpid()
        return Started(pid=me, proc_start=proc_start_time(me), handle=call_dir.name)

    def wait(self, started: Started, deadline: float, *, running: Callable[[], None] | None = None) -> Outcome:
        """Let executors claim the call (its timeout counted from the process's start) and wait for its outcome;
        ``running`` is called at once (the call is queued for the workers: it may start any time)."""
        if running is not None:
            running()
        self.journal.set_call_timeout(started.handle, max(0.0, deadline - time.time()))
        return self._await(started.handle, deadline)

    def _await(self, call_id: str, deadline: float | None, *, ending: bool = False) -> Outcome:
        pause = POLL_MIN
        asked_stop = False
        with self._mutex:
            self._waiting.add(call_id)
        try:
            while True:
                row = self.journal.dispatched_call(call_id)
                if row is None:  # never queued: it can never be now
                    if self.journal.fence_call(call_id, self.run_id, time.time()):
                        return Outcome(not_started=True)
                    continue
                status = row["status"]
                if status == "done":
                    return _outcome(row["outcome"])
                if status == "fenced":
                    return Outcome(stopped=True) if self._stopping.is_set() or ending else Outcome(not_started=True)
                if status == "queued" and (self._stopping.is_set() or ending):
                    if self.journal.fence_call(call_id, self.run_id, time.time()):
                        return Outcome(stopped=True)  # stopped before it started: it never will (R-C9)
                    continue
                if status == "queued" and row["timeout"] is None:  # its scheduler died before handing it out
                    if deadline is None:  # ... even before journaling it as running: it never started
                        if self.journal.fence_call(call_id, self.run_id, time.time()):
                            return Outcome(not_started=True)
                        continue
                    self.journal.set_call_timeout(call_id, max(0.0, deadline - time.time()))
                if status == "queued" and deadline is not None:
                    self._say_unclaimed(row)
                if status == "claimed":
                    if row["lease_until"] + LEASE_SLACK < time.time():
                        got = self._settle(row, ending=ending)
                        if got is not None:
                            return got
                        continue
                    if (self._stopping.is_set() or ending) and not asked_stop:
                        self.journal.request_call_stop([call_id])
                        asked_stop = True
                with _STORED:  # woken at once by this process's executors; others' outcomes are polled
                    _STORED.wait(pause)
                pause = min(POLL_MAX, pause * 1.5)
        finally:
            with self._mutex:
                self._waiting.discard(call_id)

    def _say_unclaimed(self, row: DispatchedCallRow) -> None:
        """Once per scheduler: say on the run why it waits when a call stays queued (no executor claims it)."""
        waited = time.time() - float(row["queued_at"])
        if self._said_unclaimed or waited < UNCLAIMED_SAY or self.run_id is None:
            return
        self._said_unclaimed = True
        self.journal.add_message(self.run_id, None, "warning",
                                 f"call {row['call_id']} has waited {waited:.0f} s for an executor: every executor "
                                 "slot is busy, or no worker with executor slots is running on this journal "
                                 "(start `workrun worker`; `--executors 0` only schedules)")

    def send_request(self, call_id: str, request: PreparedRequest, allow: list[str],
                     mark: dict[str, Any], *, before_send: Callable[[], None] | None = None) -> SendResult:
        """Have any worker's executor send an HTTP request and return what happened (see the module doc).

        Args:
            call_id: the request's id (the operation id, or ``<compensation id>.<attempt number>``).
            request: from :func:`~workrun.outbound.http.prepare` (only its :meth:`queued` form is stored).
            allow: the run's ``http_allow`` entries (the sender adds its own ``WORKRUN_HTTP_ALLOW``).
            mark: what "about to send" sets ``running``: ``{"operation_id"}`` or ``{"compensation_id",
                "number"}`` (its intent is already journaled ``starting``).

        Returns:
            The stored :class:`~workrun.outbound.http.SendResult`; ``unknown`` when its executor's lease passed
            after "about to send"; not sent when it was stopped before any executor claimed it.
        """
        call = {"kind": "http", "request": request.queued(), "allow": list(allow), "mark": mark}
        if not self.journal.dispatch_call(call_id, self.run_id, call, time.time()):
            return SendResult(False, failure=Failure.NOT_SENT, error=f"request {call_id} was fenced: never sent")
        self.journal.set_call_timeout(call_id, request.timeout)
        return self._await_request(call_id, recovering=False)

    def settle_request(self, call_id: str, status: str = "running") -> SendResult:
        """What became of a request a dead scheduler left in flight (R-R3, R-H2): its stored result; a live
        executor's is waited for; one no executor holds (queued, or never queued) is fenced and was never
        sent (``sent`` False, failure ``not_started``); an expired claim is decided as in :meth:`send_request`.
        The journal ``status`` is not needed: the claim decides.
        """
        del status
        return self._await_request(call_id, recovering=True)

    def _await_request(self, call_id: str, *, recovering: bool) -> SendResult:
        pause = POLL_MIN
        while True:
            row = self.journal.dispatched_call(call_id)
            now = time.time()
            if row is None or row["status"] == "queued" and (recovering or self._stopping.is_set()):
                self.journal.fence_call(call_id, self.run_id, now)  # conditional: a claimed row is left alone
                continue
            if row["status"] == "done":
                return SendResult.from_data(row["outcome"])
            if row["status"] == "fenced":
                return SendResult(False, failure=Failure.NOT_STARTED if recovering else Failure.NOT_SENT,
                                  error="not sent: stopped before any worker claimed it")
            if row["status"] == "claimed" and row["lease_until"] + LEASE_SLACK < now:
                if row["pid"] is None:  # no "about to send" mark: never sent, any executor may send it
                    self.journal.requeue_call(call_id, row["worker_id"], now, unsent=True)
                    continue
                lost = SendResult(True, failure=Failure.UNKNOWN,
                                  error=f"outcome unknown: worker {row['worker_id']} stopped renewing its claim "
                                  "while the request was in flight")
                if self.journal.settle_call(call_id, row["worker_id"], lost.data(), {}, now):
                    return lost
                continue
            with _STORED:
                _STORED.wait(pause)
            pause = min(POLL_MAX, pause * 1.5)

    def _settle(self, row: DispatchedCallRow, *, ending: bool) -> Outcome | None:
        """Decide a call whose executor's lease passed (R-R3) and store it on the expired claim; None when
        it was queued again (its process provably never started) or someone stored an outcome first."""
        exec_dir = Path(row["exec_dir"])
        if row["host"] == self.host:  # its process and directory are on this machine
            how = self.local.end if ending else self.local.recover
            outcome = how(row["pid"], row["proc_start"], exec_dir, row["deadline"])
        elif exec_dir.is_dir():  # another machine's directory, reachable here (a shared path)
            never = row["pid"] is None and calldir.read_claim(exec_dir) is None and calldir.fence(exec_dir)
            outcome = Outcome(not_started=True) if never else calldir.read_exit(exec_dir) or Outcome(unknown=True)
        else:  # another machine's call: nothing to look at from here, never re-sent (R-R3)
            outcome = Outcome(unknown=True)
        now = time.time()
        if outcome.not_started:  # fenced in the dead executor's directory: it never ran, any executor may
            if ending:
                outcome = Outcome(stopped=True)
            elif self.journal.requeue_call(row["call_id"], row["worker_id"], now):
                return None
        got = calldir.collect(exec_dir) if exec_dir.is_dir() else Collected()
        if not self.journal.settle_call(row["call_id"], row["worker_id"], asdict(outcome), asdict(got), now):
            return None
        if row["host"] == self.host and not outcome.not_started:
            shutil.rmtree(exec_dir, ignore_errors=True)
        return outcome

    def recover(self, pid: int | None, proc_start: str | None, call_dir: Path, deadline: float | None, *,
                claim_wait: float = 2.0) -> Outcome:
        """Settle a call a dead scheduler left: its stored outcome; a queued or live executor's call is
        waited for (it was handed out once, it runs once); an expired executor's is decided by R-R3; one
        never queued is fenced: ``not_started``."""
        try:  # the outcome is collected from the row; the journaling code looks for the directory
            call_dir.mkdir(parents=True, exist_ok=True)
        except OSError:
            pass
        return self._await(call_dir.name, deadline)

    def end(self, pid: int | None, proc_start: str | None, call_dir: Path, deadline: float | None) -> Outcome:
        """End a call now (``workrun stop`` of a run without its scheduler): a queued one is fenced
        (``stopped``), a running one is ended by its executor (or here, when its lease passed on this host)."""
        try:
            call_dir.mkdir(parents=True, exist_ok=True)
        except OSError:
            pass
        return self._await(call_dir.name, deadline, ending=True)

    def fence(self, call_dir: Path) -> None:
        """Make the call unable to ever start (a ``fenced`` row)."""
        self.journal.fence_call(call_dir.name, self.run_id, time.time())

    def collect(self, call_dir: Path) -> Collected:
        """What the executor collected from the call's directory (empty when nothing was stored)."""
        row = self.journal.dispatched_call(call_dir.name)
        return _collected(row.get("collected") if row else None)

    def stop_all(self) -> None:
        """Ask the executors of this scheduler's calls to end them; queue nothing more (R-C9)."""
        self._stopping.set()
        with self._mutex:
            waiting = list(self._waiting)
        if waiting:
            self.journal.request_call_stop(waiting)

    def hang_up(self) -> None:
        """No call will start any more: the local runner's fork servers end now (:meth:`close` reaps them)."""
        self.local.hang_up()

    def close(self) -> None:
        """Close the local runner (its fork servers)."""
        self.local.close()


class Executors:
    """A worker's executor slots: claim queued calls and run them (see the module doc).

    Args:
        data_dir: the worker's data directory (call directories ``calls/exec-<call id>``, environments).
        beat: the worker's :class:`~workrun.cluster.workers.Heartbeat` (its id, host and lease; it renews the
            claims listed in ``beat.calls``).
        slots: App processes run at once.
        runs: None to claim any run's calls, or a function returning the run ids to claim calls of.
    """

    def __init__(self, data_dir: Path, beat: Any, slots: int, runs: Any = None) -> None:
        self.data_dir = data_dir
        self.beat = beat
        self.slots = slots
        self.runs = runs
        tunables = settings.current()
        self.runner = LocalRunner(data_dir, grace=tunables.grace, launch=launch_mode())
        self.executed = 0
        self._journal: Any = None  # a SharedJournal once started: claims calls and stores their outcomes
        self._listen: Any = None  # a SharedJournal once started: LISTENs for queued calls, nothing else
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._running: dict[str, Future[None]] = {}
        self._pids: dict[str, int] = {}
        self._stopping: set[str] = set()
        self._mutex = threading.Lock()

    def start(self) -> Executors:
        """Open the journal connections and start claiming (nothing at all with no slots)."""
        if self.slots == 0:  # a worker that only schedules
            return self
        self._journal = open_journal(self.data_dir, check=False)
        self._listen = open_journal(self.data_dir, check=False)
        self._pool = ThreadPoolExecutor(max_workers=self.slots, thread_name_prefix="workrun-executor")
        self._thread = threading.Thread(target=self._loop, name="workrun-executors", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        root = str(self.data_dir / "calls" / "exec-")
        while not self._stop.is_set():
            with self._mutex:
                for cid in [c for c, f in self._running.items() if f.done()]:
                    failed = self._running.pop(cid).exception()
                    if failed is not None and not isinstance(failed, DatabaseUnreachableError):
                        # its claim is no longer renewed: its scheduler decides it (R-R3)
                        logs.say("call_failed", "error", f"call {cid} failed in the executor: {failed}",
                                 prefix=f"workrun worker {self.beat.worker_id}", **logs.ids_in(cid))
                free = self.slots - len(self._running)
            try:
                rows = []
                if free > 0:
                    runs = self.runs() if self.runs is not None else None
                    if runs is None or runs:
                        rows = self._journal.claim_calls(self.beat.worker_id, self.beat.host, time.time(),
                                                         self.beat.lease, free, root, runs)
                for row in rows:
                    self.beat.hold_call(row["call_id"])
                    assert self._pool is not None
                    with self._mutex:
                        self._running[row["call_id"]] = self._pool.submit(self._execute, row)
                if not rows:
                    self._listen.wait_for_calls(0.05 if free <= 0 else 0.2)
            except DatabaseUnreachableError:  # the process is ending (its main thread says so, once)
                self._stop.wait(1.0)
            except Exception as exc:  # a database hiccup: try again shortly; held leases have slack
                logs.say("claim_failed", "warning", f"claiming calls failed: {exc}",
                         prefix=f"workrun worker {self.beat.worker_id}")
                self._stop.wait(1.0)

    def stop_calls(self, call_ids: set[str]) -> None:
        """End the processes of these calls (their scheduler asked, R-C9); called by the heartbeat."""
        for cid in call_ids:
            with self._mutex:
                pid = self._pids.get(cid)
                if pid is None or cid in self._stopping:
                    continue
                self._stopping.add(cid)
            threading.Thread(target=kill_group, args=(pid, self.runner.grace), daemon=True).start()

    def _execute(self, row: dict[str, Any]) -> None:
        cid = row["call_id"]
        me = self.beat.worker_id
        exec_dir = Path(row["exec_dir"])
        call = row["call"]
        try:
            if call.get("kind") == "http":
                self._send(row)
                return
            shutil.rmtree(exec_dir, ignore_errors=True)  # a claim is fresh: nothing ever ran in this directory
            exec_dir.mkdir(parents=True)
            outcome, got = self._run(row, exec_dir, call)
            if not self._journal.finish_call(cid, me, asdict(outcome), asdict(got), time.time()):
                logs.say("claim_lost", "warning", f"lost the claim on call {cid} (its lease passed and its scheduler "
                         "decides it from this directory); its outcome is not stored", prefix=f"workrun worker {me}",
                         **logs.ids_in(cid))
            else:
                self.executed += 1
                with _STORED:
                    _STORED.notify_all()
                shutil.rmtree(exec_dir, ignore_errors=True)
        finally:
            self.beat.drop_call(cid)
            with self._mutex:
                self._pids.pop(cid, None)
                self._stopping.discard(cid)

    def _send(self, row: dict[str, Any]) -> None:
        """Send a claimed HTTP request (see the module doc): env read here, "about to send" committed first."""
        cid, me, call = row["call_id"], self.beat.worker_id, row["call"]
        try:
            request = from_queued(call["request"])  # env.NAME from this worker's environment, now (R-H5)
            allow = parse_allow(call.get("allow") or []) + allow_from_env()
        except (RequestError, ValueError) as exc:
            got = SendResult(False, failure=Failure.NOT_SENT, error=f"not sent by worker {me}: {exc}")
        else:
            def about_to_send() -> None:
                now = time.time()
                if not self._journal.http_sending(cid, me, call["mark"], now, now + request.timeout):
                    raise _NotMine

            try:
                got = send(request, allow, before_send=about_to_send)
            except _NotMine:
                got = SendResult(False, failure=Failure.NOT_SENT, error=f"not sent by worker {me}: its claim "
                                 "or the request's intent was settled meanwhile")
        if self._journal.finish_call(cid, me, got.data(), {}, time.time()):
            self.executed += 1
            with _STORED:
                _STORED.notify_all()

    def _run(self, row: dict[str, Any], exec_dir: Path, call: dict[str, Any]) -> tuple[Outcome, Collected]:
        project = Path(call["project"])
        try:
            if call.get("snapshot"):
                project = materialize(self.data_dir, call["snapshot"], self._journal)
            python = self.runner.prepare(project, offline=bool(call.get("offline")))
        except (EnvironmentUnavailableError, OSError, ValueError, KeyError) as exc:
            text = exc.detail if isinstance(exc, EnvironmentUnavailableError) else str(exc)
            return self._not_run(exec_dir, f"environment unavailable on worker {self.beat.worker_id}: {text}")
        deadline = time.time() + float(row["timeout"])
        try:
            started = self.runner.start(python, project, project / call["entry"], exec_dir, call["envelope"],
                                        warm=call.get("warm"))
        except OSError as exc:
            return self._not_run(exec_dir, f"worker {self.beat.worker_id} cannot start the App process: {exc}")
        with self._mutex:
            self._pids[row["call_id"]] = started.pid
        self._journal.call_started(row["call_id"], self.beat.worker_id, started.pid, started.proc_start, deadline)
        outcome = self.runner.wait(started, deadline)
        with self._mutex:
            if row["call_id"] in self._stopping and not outcome.timed_out:
                outcome.stopped = True
        return outcome, self.runner.collect(exec_dir)

    def _not_run(self, exec_dir: Path, why: str) -> tuple[Outcome, Collected]:
        """The outcome of a call this executor could not start: a failed call (no exit code) saying why.

        Not ``not_started``: its scheduler has journaled the call as running, and an attempt that was
        running may only end succeeded, failed, stopped or unknown; a failed attempt is retried after
        its backoff, on whichever executor claims it then.
        """
        self.runner.fence(exec_dir)
        return Outcome(exit_code=None), Collected(stderr_tail=why)

    def drain(self) -> None:
        """Claim nothing more, wait for the calls in hand to end, close the connections."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        with self._mutex:
            running = list(self._running.values())
            self._running.clear()
        for fut in running:
            fut.result()
        self.runner.close()
        for journal in (self._journal, self._listen):
            if journal is not None:
                journal.close()

    def abandon(self) -> None:
        """Claim nothing more and wait for nothing: the journal is out of reach for good (``WORKRUN_DB_RETRY`` ran
        out, R-F1), so no call in hand could store its outcome. Their App processes go on in their own sessions,
        as after a crash; their claims pass on after their lease, and whoever takes a call over decides it
        (R-R3). The threads that wait for them end with them, or with the process."""
        self._stop.set()
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    @property
    def busy(self) -> int:
        """Calls in hand now."""
        with self._mutex:
            return sum(1 for f in self._running.values() if not f.done())
