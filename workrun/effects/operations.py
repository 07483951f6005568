"""One App call or one compensation attempt, journaled around the process (R-J1, R-C7, R-R3).

Order of writes for a call (each committed before the next step):
``op.intent`` (status ``starting``, before the process exists) ->
``op.started`` (pid recorded, status ``running``) -> ``op.finished``.
Attempts follow the same shape: ``attempt.intent`` -> ``attempt.started`` ->
``attempt.finished`` (which also sets the compensation's status).
The outcome functions (:func:`finish_operation`, :func:`finish_attempt`) are
shared by live calls and by recovery after a restart (:func:`workrun.effects.settle_operations`),
so both decide alike. Processes are run through ``svc.runner`` (an
:class:`~workrun.runner.base.AppRunner`).
"""

from __future__ import annotations

import os
import signal as _signal
import time
from pathlib import Path
from typing import Any, cast

from workrun.core import metrics, tracing
from workrun.core.backoff import backoff_delay
from workrun.core.errors import EnvironmentUnavailableError, StaleStatusError, WorkrunError
from workrun.core.models import AppSpec
from workrun.core.outcomes import Failure
from workrun.core.paths import real_path, remove_tree
from workrun.core.rows import AttemptRow, CompensationRow, JsonObject, OperationRow
from workrun.core.structs import struct
from workrun.runner.apps import check_contract, diff_fingerprints, fingerprint
from workrun.runner.base import Outcome
from workrun.runner.context import Context, new_id
from workrun.runner.process import alive, proc_start_time
from workrun.runner.snapshots import materialize, publish, take

__all__ = [
    "Attempted",
    "call_app",
    "code_change",
    "current_owner",
    "finish_attempt",
    "finish_operation",
    "owner_gone",
    "process_call_dir",
    "run_attempt_again",
    "run_attempt",
]


def _describe_exit(outcome: Outcome, timeout: float) -> str:
    """What ended the call, in words: a stop or a timeout first, then the signal that ended the App, if one did,
    as SPEC §17 words it for every signal ("killed by signal 15 (SIGTERM)"; conformance review: a timeout or a
    stop left it out), else its exit code."""
    why = "stopped by the user" if outcome.stopped else (
        f"timed out after {timeout:g} s (process group ended)" if outcome.timed_out else "")
    if outcome.signal:
        try:
            killed = f"killed by signal {outcome.signal} ({_signal.Signals(outcome.signal).name})"
        except ValueError:
            killed = f"killed by signal {outcome.signal}"
        return f"{why}: {killed}" if why else killed
    return why or f"exited with code {outcome.exit_code}"


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in (text or "").strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


def call_app(svc: Context, *, project: Path, app: AppSpec, input: dict[str, Any], run_id: str | None,
             node_key: str | None, depends_on: list[str], tool_name: str | None = None,
             tool_call_index: int | None = None, standalone: bool = False,
             ends_node: bool = False) -> OperationRow:
    """Make one journaled App call and return its final operation row.

    Args:
        project: the App project directory.
        app: the App config; its snapshot is journaled with the call (R-A5).
        input: the call's actual input (a tool call's input is its arguments).
        depends_on: upstream operation ids (for compensation order, R-C3).
        tool_name / tool_call_index: for a Tool App call (R-C5).
        standalone: ``workrun app run`` (journaled, never compensated, R-A6).
        ends_node: the call's success is its node's (``succeeded``, this result): both are written at once.

    Returns:
        The operation row after ``op.finished`` (status ``succeeded``, ``failed`` or ``unknown``); with
        ``ends_node``, ``succeeded`` means the node's end is journaled too.

    Raises:
        JournalError: when the journal cannot be written (nothing unrecorded is marked done).
    """
    project = Path(real_path(project))
    fp = fingerprint(project)
    op_id = new_id("op")
    snapshot = None
    refused = None
    if app.compensation is not None and app.compensation.entry is not None and app.compensation.code == "snapshot" \
            and not standalone:  # a reverse action (compensation.http) runs no code: nothing to snapshot
        try:
            snapshot = take(svc.data_dir, project, fp)
        except ValueError as exc:
            refused = str(exc)
    python: str | None = None
    unavailable = None
    if not refused:  # before the intent, so the intent's deadline is the App's (no sync time in it)
        try:
            python = svc.runner.prepare(project)
        except EnvironmentUnavailableError as exc:
            unavailable = exc.detail
    # made only now, just before its intent is journaled: no directory waits unnamed by the journal while the
    # environment syncs (``workrun gc`` removes one a killed runner left that way, once stale)
    call_dir = svc.call_dir(op_id)
    created = svc.now()
    owner_pid, owner_start = current_owner()
    row: OperationRow = {
        "operation_id": op_id, "run_id": run_id, "node_key": node_key, "tool_call_index": tool_call_index,
        "app": app.name, "project": str(project), "kind": app.kind, "tool_name": tool_name,
        "config": config_snapshot(app), "input": input, "fingerprint": fp.digest,
        "fingerprint_files": fp.files, "snapshot": snapshot, "depends_on": depends_on, "status": "starting",
        "call_dir": str(call_dir), "created_at": created, "standalone": int(standalone),
        "deadline": created + app.timeout,  # recovery's, before the pid is (or if it never is) written
        "owner_pid": owner_pid, "owner_start": owner_start,
    }
    svc.journal.start_operation(row)
    if snapshot is not None:  # on a shared journal, stored in its database once the intent names it (R-S4, R-F3)
        publish(svc.data_dir, snapshot, svc.journal)
    if refused:
        return _failed_before_start(svc, op_id, call_dir, refused, Failure.REFUSED)
    if unavailable is not None:
        return _failed_before_start(svc, op_id, call_dir, unavailable, Failure.ENVIRONMENT)
    assert python is not None  # prepared above: not refused, not unavailable
    envelope = {"kind": app.kind, "input": input, "context": None, "tool": tool_name, "operation_id": op_id}
    parent = tracing.traceparent(run_id, op_id)
    if parent:
        envelope["traceparent"] = parent
    if app.kind == "tool" and tool_name is None:
        raise ValueError("a Tool App call needs a tool name")
    try:
        started_process = svc.runner.start(python, project, project / app.entry, call_dir, envelope,
                                           warm=fp.digest if app.warm else None)
    except OSError as exc:
        return _failed_before_start(svc, op_id, call_dir, f"cannot start the App process: {exc}",
                                    Failure.ENVIRONMENT)
    started = svc.now()
    deadline = started + app.timeout
    process: OperationRow = {"pid": started_process.pid, "proc_start": started_process.proc_start,
                               "started_at": started, "deadline": deadline}
    written: list[bool] = []

    def running() -> None:  # still going after RUNNING_AFTER s: journal its process now (``op.started``)
        svc.journal.operation_running(op_id, pid=started_process.pid, proc_start=started_process.proc_start,
                                      started_at=started, deadline=deadline)
        written.append(True)

    svc.tidy()  # earlier calls' directories, while this one's App runs
    outcome = svc.runner.wait(started_process, deadline, running=running)
    as_started = cast(OperationRow, {**row, **process, "status": "running" if written else "starting"})
    return finish_operation(svc, as_started, outcome,
                            config=app, whole_row=True, process=None if written else process,
                            ends_node=ends_node)


def process_call_dir(row: OperationRow | AttemptRow) -> Path:
    """The call directory of a process call or attempt.

    Raises:
        ValueError: the row has none (an HTTP request): ``Path("")`` is the working directory, which must
            never be collected, fenced or removed.
    """
    if not row.get("call_dir"):
        raise ValueError(f"{row.get('operation_id') or row.get('compensation_id')} is not a process call")
    return Path(row["call_dir"])


def _failed_before_start(svc: Context, op_id: str, call_dir: Path, error: str, failure: Failure) -> OperationRow:
    """Journal a call that failed before its process started (the directory is fenced first, so no
    late start is possible); return the operation row.

    Raises:
        WorkrunError: the directory cannot be fenced (a full disk): one line naming it; the call stays
            ``starting``, and ``workrun resume`` fences and decides it (nothing of it ran).
    """
    try:
        svc.runner.fence(call_dir)
    except OSError as exc:  # hostile review: an internal error naming no file
        raise WorkrunError(f"cannot write the call's directory: {exc.strerror or exc} (the call did not start; "
                           "`workrun resume` decides it once that is fixed)", file=str(call_dir)) from None
    svc.journal.finish_operation(op_id, status="failed", failure=failure, error=error, at=svc.now())
    remove_tree(call_dir)
    return svc.journal.operation(op_id)


def finish_operation(svc: Context, op: OperationRow, outcome: Outcome, *,
                     config: AppSpec | None = None, whole_row: bool = False, process: OperationRow | None = None,
                     ends_node: bool = False) -> OperationRow:
    """Decide and journal a call's outcome (``op.finished``), live or after a restart.

    Exit 0 with a valid result = ``succeeded``; a result that is not JSON, over
    1 MiB or against the contract = ``failed`` naming the field or limit (R-A3);
    non-zero exit, signal, timeout or stop = ``failed``; gone without an exit
    record = ``unknown`` (R-R3); never started = ``failed`` with ``not started``.

    Args:
        config: the App config the call was made with (its snapshot in ``op["config"]`` is read when None).
        whole_row: ``op`` holds every column the journal has for it (the live call): the row returned is
            ``op`` with what was written now, not read back (issue 14); else it is read from the journal.
        process: ``{pid, proc_start, started_at, deadline}`` to write with the outcome (a live call whose
            ``running`` was never written: it ended within :data:`~workrun.runner.base.RUNNING_AFTER`).
        ends_node: a success is also the node's (``op``'s ``run_id``/``node_key``): written in the same
            transaction.

    Returns:
        The operation row as journaled (status ``succeeded``, ``failed`` or ``unknown``).
    """
    call_dir = process_call_dir(op)
    config = config if config is not None else AppSpec.model_validate(op["config"])
    got = svc.runner.collect(call_dir) if call_dir.is_dir() else None
    fields: dict[str, Any] = {"exit_code": outcome.exit_code, "signal": outcome.signal}
    if got is not None:
        fields.update(stdout_tail=got.stdout_tail, stderr_tail=got.stderr_tail, resources=got.resources)
    failure = outcome.failure
    if failure is Failure.NOT_STARTED:
        fields.update(status="failed", error="not started: the runner stopped before the App process began")
    elif failure is Failure.UNKNOWN:
        fields.update(status="unknown", error="outcome unknown: the App process ended without an exit record "
                      "(the runner or the call's supervisor was killed); verify outside before re-running")
    elif failure is None:
        assert got is not None
        problem = got.error or check_contract(got.result if got.result is not None else {}, config.output)
        if problem and not got.error and got.result is None and config.kind == "process":  # say so first
            problem = f"no result: the App exited 0 without calling process.result() ({problem})"
        if problem:
            failure = Failure.CONTRACT
            fields.update(status="failed", error=f"{config.name}: {problem}")
        else:
            fields.update(status="succeeded", result=got.result if got.result is not None else {})
            extra = _recorded_dependencies(svc, op, got.depends_on)
            if extra:
                fields["depends_on"] = list(op["depends_on"] or []) + extra
    else:
        detail = _last_line(got.stderr_tail) if got else ""
        fields.update(status="failed",
                      error=_describe_exit(outcome, config.timeout) + (f": {detail}" if detail else ""))
    at = svc.now()
    node = (op["run_id"] or "", op["node_key"] or "") if ends_node and fields["status"] == "succeeded" else None
    svc.journal.finish_operation(op["operation_id"], failure=failure, at=at, process=process, node_succeeded=node,
                                 **fields)
    begun = (process or {}).get("started_at") or op.get("started_at") or op.get("created_at")
    metrics.count_call(str(op.get("kind") or "process"), "stopped" if failure is Failure.STOPPED else fields["status"],
                       at - begun if begun else None)
    if tracing.enabled():
        tracing.operation_span(cast(OperationRow, {**op, **fields, "started_at": begun, "ended_at": at}))
    # the outcome is journaled: the directory goes, off the call's path; its files are reused only when the
    # supervisor marked every process of the call ended (SPEC §17): none can write to them any more
    svc.discard(call_dir, recycle=got is not None and outcome.failure is None and outcome.ended)
    if not whole_row:
        return svc.journal.operation(op["operation_id"])
    return cast(OperationRow, {**op, "error": None, "result": None, "stdout_tail": None, "stderr_tail": None,
                               "resources": [], **fields, "failure": None if failure is None else str(failure),
                               "ended_at": at})


_SNAPSHOTS: dict[int, tuple[AppSpec, JsonObject]] = {}


def config_snapshot(app: AppSpec) -> JsonObject:
    """The App config as journaled with each call (R-A5): ``app.model_dump(mode="json")``, made once per App
    config object (one per version of its ``pyproject.toml`` while this process runs, issue 33), not per call.
    The dict is shared: never change it."""
    kept = _SNAPSHOTS.get(id(app))
    if kept is not None and kept[0] is app:
        return kept[1]
    if len(_SNAPSHOTS) >= 256:
        _SNAPSHOTS.pop(next(iter(_SNAPSHOTS)))
    dumped: JsonObject = app.model_dump(mode="json")
    _SNAPSHOTS[id(app)] = (app, dumped)  # the config is kept too: its id is never another's while it is here
    return dumped


def current_owner() -> tuple[int, str | None]:
    """This process as the owner of the calls it makes: ``(pid, start time)`` (the start time tells a reused
    pid apart; None off Linux). Recovery leaves a call alone while its owner lives (issue 10, item 8)."""
    pid = os.getpid()
    owner = _OWNER.get(pid)
    if owner is None:  # per pid: a forked child is another owner
        owner = _OWNER[pid] = (pid, proc_start_time(pid))
    return owner


_OWNER: dict[int, tuple[int, str | None]] = {}


def owner_gone(op: OperationRow) -> bool:
    """True when the process that made the in-flight call ``op`` is no longer alive (or was never recorded)."""
    pid = op.get("owner_pid")
    return pid is None or not alive(pid, op.get("owner_start"))


def _recorded_dependencies(svc: Context, op: OperationRow, wanted: list[str]) -> list[str]:
    """Dependencies an App recorded with ``process.depends_on``: kept only when they are earlier
    succeeded calls of the same run (so the call graph stays acyclic)."""
    run_id = op.get("run_id")
    if not wanted or not run_id:
        return []
    ok = {o["operation_id"] for o in svc.journal.operation_statuses(run_id) if o["status"] == "succeeded"}
    have = set(op["depends_on"] or [])
    return [d for d in dict.fromkeys(wanted) if d in ok and d not in have and d != op["operation_id"]]


def _compensation_source(svc: Context, op: OperationRow) -> tuple[Path, str | None]:
    """Where the compensation runs from: the live project, or its snapshot (R-C8) -> (dir, code-change reason)."""
    project = Path(op["project"])
    snapshot = op.get("snapshot")
    if snapshot:
        try:
            return materialize(svc.data_dir, snapshot, svc.journal), None
        except (OSError, ValueError, KeyError) as exc:  # removed by hand: block, never crash the scheduler
            return project, (f"code snapshot {snapshot[:12]} is missing from the data dir ({exc}); "
                             "`--accept-code-change` runs today's project instead")
    return project, code_change(op)


def code_change(op: OperationRow) -> str | None:
    """Why a compensation script of ``op`` that runs from the live project would be blocked now (R-C8): its
    project's code differs from the call's (``code changed since the call: compensate.py changed``), or its
    directory is gone; None when it is the same (or the call kept a snapshot, which runs instead). Reads file
    stamps only; runs nothing (``compensate --dry-run`` asks it too)."""
    if op.get("snapshot"):
        return None
    project = Path(op["project"])
    now = fingerprint(project) if project.is_dir() else None
    if now is None:
        return "code changed since the call: the project directory is gone (" + ", ".join(
            f"{p} removed" for p in sorted(op["fingerprint_files"])) + ")"
    if now.digest != op["fingerprint"]:
        return "code changed since the call: " + ", ".join(diff_fingerprints(op["fingerprint_files"], now.files))
    return None


@struct
class Attempted:
    """What :func:`run_attempt` did.

    Attributes:
        compensation: the compensation row afterwards.
        failure: why no attempt ran or the attempt failed (``Failure.ENVIRONMENT`` when the App's
            environment could not be prepared: the compensation waits for ``resume``), else None.
    """

    compensation: CompensationRow
    failure: Failure | None


def run_attempt(svc: Context, comp: CompensationRow, op: OperationRow, trigger: str) -> Attempted:
    """Run one attempt of a compensation (R-C7); return the compensation row afterwards and the failure kind.

    Before the attempt the code fingerprint is checked (R-C8): a change blocks
    the compensation unless an operator accepted it. An environment that cannot
    be prepared leaves it ``pending`` with reason ``environment unavailable``.
    """
    cid = comp["compensation_id"]
    source, changed = _compensation_source(svc, op)
    if changed and not comp["accept_code_change"]:
        svc.journal.set_compensation_status(cid, "blocked", reason=changed, at=svc.now())
        if comp["status"] != "blocked":
            metrics.count_compensation("blocked")
        return Attempted(svc.journal.compensation(cid), None)
    try:
        python = svc.runner.prepare(source, offline=bool(op.get("snapshot")))
    except EnvironmentUnavailableError as exc:
        svc.journal.set_compensation_status(cid, "pending", reason=exc.detail, at=svc.now())
        return Attempted(svc.journal.compensation(cid), Failure.ENVIRONMENT)
    config = AppSpec.model_validate(op["config"])
    assert config.compensation is not None and config.compensation.entry is not None  # a script (not http, R-H6)
    number = len(svc.journal.attempts(cid)) + 1
    call_dir = svc.call_dir(f"{cid}-{number}", replace=True)  # a runner killed before the intent leaves one
    started = svc.now()
    try:
        svc.journal.start_attempt(cid, number, trigger=trigger, call_dir=str(call_dir), seen=comp["status"],
                                  at=started)
    except StaleStatusError:  # an operator resolved or changed it meanwhile: nothing was written, run nothing
        remove_tree(call_dir)
        return Attempted(svc.journal.compensation(cid), None)
    context = {**(comp["context"] or {}), "attempt": number}
    envelope = {"kind": "compensation", "input": op["input"], "context": context, "tool": None}
    parent = tracing.traceparent(comp["run_id"], f"{cid}.{number}")
    if parent:
        envelope["traceparent"] = parent
    attempt: AttemptRow = {"compensation_id": cid, "number": number, "call_dir": str(call_dir), "trigger": trigger}
    try:
        started_process = svc.runner.start(python, source, source / config.compensation.entry, call_dir, envelope)
    except OSError as exc:
        svc.runner.fence(call_dir)
        after = finish_attempt(svc, comp, attempt, Outcome(exit_code=None, not_started=True),
                               error=f"cannot start the compensation process: {exc}")
        return Attempted(after, Failure.NOT_STARTED)
    deadline = started + float(comp["timeout"])
    svc.journal.attempt_running(cid, number, pid=started_process.pid, proc_start=started_process.proc_start,
                                deadline=deadline)
    outcome = svc.runner.wait(started_process, deadline)
    return Attempted(finish_attempt(svc, comp, attempt, outcome), outcome.failure)


def run_attempt_again(svc: Context, comp: CompensationRow, op: OperationRow) -> str | None:
    """Run a succeeded compensation's script once more with the same context, outside the journal: the
    idempotency check of ``workrun verify`` (R-V1). Returns None when it exited 0, else why not (one line).

    The context is the one the saved attempt got (``attempt`` is the next number); the call directory is a
    fresh one, removed afterwards. Nothing is journaled: the compensation stays ``succeeded``.
    """
    source, changed = _compensation_source(svc, op)
    if changed:
        return changed
    try:
        python = svc.runner.prepare(source, offline=bool(op.get("snapshot")))
    except EnvironmentUnavailableError as exc:
        return exc.detail
    config = AppSpec.model_validate(op["config"])
    if config.compensation is None or config.compensation.entry is None:
        return "no compensation script"
    cid = comp["compensation_id"]
    number = len(svc.journal.attempts(cid)) + 1
    call_dir = svc.call_dir(f"{cid}-again-{new_id('v')[2:]}", replace=True)
    context = {**(comp["context"] or {}), "attempt": number}
    envelope = {"kind": "compensation", "input": op["input"], "context": context, "tool": None}
    try:
        started = svc.runner.start(python, source, source / config.compensation.entry, call_dir, envelope)
    except OSError as exc:
        remove_tree(call_dir)
        return f"cannot start the compensation process: {exc}"
    outcome = svc.runner.wait(started, svc.now() + float(comp["timeout"]))
    collected = svc.runner.collect(call_dir)
    remove_tree(call_dir)
    if outcome.exit_code == 0 and not outcome.timed_out and collected.error is None:
        return None
    tail = _last_line(collected.stderr_tail)
    return (collected.error if outcome.exit_code == 0 and collected.error else
            _describe_exit(outcome, float(comp["timeout"]))) + (f": {tail}" if tail else "")


def finish_attempt(svc: Context, comp: CompensationRow, attempt: AttemptRow, outcome: Outcome,
                   error: str | None = None) -> CompensationRow:
    """Journal an attempt's outcome and the compensation's new status in one transaction (``attempt.finished``).

    - exit 0: ``succeeded`` (its result saved; never run again, R-R2)
    - failure with attempts left: ``pending`` with ``next_attempt_at`` after backoff
    - failure with none left, or an operator's retry failing: ``failed`` (dead letter)
    - stopped / never started: ``pending`` again (not counted as an attempt's failure)
    - unknown: ``unknown`` (verify outside), or ``pending`` when the entry is idempotent
    """
    cid = comp["compensation_id"]
    number = attempt["number"]
    call_dir = process_call_dir(attempt)
    got = svc.runner.collect(call_dir) if call_dir.is_dir() else None
    now = svc.now()
    previous = [x for x in svc.journal.attempts(cid) if x["number"] != number]
    failures = sum(1 for x in previous if x["status"] == "failed")
    timeout = float(comp["timeout"])
    failure = outcome.failure
    if failure is None and (got is None or got.error is not None):
        failure = Failure.CONTRACT
    result = None
    next_at = None
    if failure is Failure.NOT_STARTED:
        status, what = "not_started", error or "not started: the runner stopped before it began"
        comp_status, reason = "pending", f"attempt {number} never started; it will run on resume"
    elif failure is Failure.STOPPED:
        status, what = "stopped", "stopped by the user"
        comp_status, reason = "pending", f"attempt {number} was stopped by the user; `workrun resume` continues"
    elif failure is Failure.UNKNOWN:
        status, what = "unknown", "no exit record: in flight when the runner or its supervisor died"
        if comp["idempotent"]:
            comp_status = "pending"
            reason = f"attempt {number} outcome unknown; re-sent because the entry is idempotent"
        else:
            comp_status = "unknown"
            reason = (f"attempt {number} was in flight when the runner died and its outcome cannot be established: "
                      f"verify outside, then `workrun compensations confirm {cid} --done` or `--not-done`")
    elif failure is None:
        assert got is not None
        status, what, result = "succeeded", None, got.result
        comp_status, reason = "succeeded", None
    else:
        detail = (got.error if got and got.error and failure is Failure.CONTRACT else None) \
            or _last_line(got.stderr_tail if got else "")
        what = _describe_exit(outcome, timeout) + (f": {detail}" if detail else "")
        status = "failed"
        failures += 1
        if attempt["trigger"] == "operator":  # an operator's retry is one attempt, outside the automatic budget
            comp_status, reason = "failed", (f"attempt {number} (operator retry) failed ({what}): needs an operator "
                                             f"(`workrun compensations show {cid}`)")
        elif failures >= int(comp["max_attempts"]):
            comp_status, reason = "failed", (f"attempt {number} failed ({what}); all {comp['max_attempts']} "
                                             f"attempt(s) failed: needs an operator (`workrun compensations show "
                                             f"{cid}`)")
        else:
            delay = backoff_delay(float(comp["backoff"]), failures)
            comp_status, reason = "pending", f"attempt {number} failed ({what}); retrying in {delay:.2g} s"
            next_at = now + delay
    svc.journal.finish_attempt(
        cid, number, status=status, failure=failure, error=what, result=result, at=now,
        exit_code=outcome.exit_code, signal=outcome.signal,
        stdout_tail=got.stdout_tail if got else None, stderr_tail=got.stderr_tail if got else None,
        compensation_status=comp_status, reason=reason, next_attempt_at=next_at)
    remove_tree(call_dir)
    after = svc.journal.compensation(cid)
    # by the kind of the App whose compensation ran (``process`` or ``tool``), as calls are counted (R-F4: one word
    # per kind; conformance review: ``app`` here, ``process`` in workrun_calls_total)
    metrics.count_attempt(svc.journal.operation(comp["operation_id"])["kind"], str(status))
    metrics.count_compensation(after["status"])
    if tracing.enabled():
        tracing.attempt_span(after, svc.journal.attempts(cid)[-1])
    return after


STALE_AFTER = 600.0
"""Seconds a call directory no journaled call in flight names must stay unchanged before :func:`gc_call_dirs`
removes it (one being made right now, by a standalone ``app run``, is not its runner's leftover)."""


def _empty(directory: Path) -> bool:
    try:
        with os.scandir(directory) as entries:
            return next(entries, None) is None
    except OSError:
        return False


def gc_call_dirs(svc: Context, *, dry_run: bool = False,
                 named: list[Path] | None = None) -> tuple[int, int, list[Path]]:
    """Remove the call directories runners that were killed left behind (``workrun gc``); return
    ``(removed, kept, the paths that could not be removed)``. ``named``: when given, every path removed (with
    ``dry_run``: that would be) is appended to it, for ``gc --dry-run`` to name them.

    A runner killed after journaling a call's outcome, but before removing its directory, leaves it for good
    (and one killed while removing it, what is in ``calls/.trash``). Removed: every directory in
    ``<data>/calls`` that no operation or compensation attempt still in flight (``starting``/``running``: its
    outcome is decided from these files, R-R3) names, once unchanged for :data:`STALE_AFTER` seconds, and what
    ``.trash`` holds. Kept: those of calls in flight, a worker's (``exec-*``, which it removes itself) and the
    pool of emptied directories (``.pool``). Call it holding the scheduler lock (no call of this data directory
    starts meanwhile).
    """
    calls = svc.data_dir / "calls"
    try:
        names = sorted(os.listdir(calls))
    except OSError:
        return 0, 0, []
    journal = svc.journal
    needed = {str(op["call_dir"]) for op in journal.operations_in_flight(None) if op.get("call_dir")}
    for run in journal.runs():
        needed.update(str(op["call_dir"]) for op in journal.operations_in_flight(run["run_id"]) if op.get("call_dir"))
        needed.update(str(a["call_dir"]) for a in journal.attempts_in_flight(run["run_id"]) if a.get("call_dir"))
    removed = kept = 0
    failed: list[Path] = []
    now = time.time()
    for name in names:
        path = calls / name
        trash = name.startswith(".trash")
        if name.startswith("exec-") or (name.startswith(".") and not trash):  # a worker's, the pool
            continue
        if trash and path.is_dir() and not path.is_symlink() and _empty(path):
            continue  # the runner's own, emptied as it goes: nothing to remove
        if not trash:
            try:
                changed = path.lstat().st_mtime
            except OSError:
                continue
            if str(path) in needed or now - changed < STALE_AFTER:
                kept += 1
                continue
        if not dry_run:
            try:
                if path.is_dir() and not path.is_symlink():
                    remove_tree(path, ignore_errors=False)
                else:
                    path.unlink(missing_ok=True)
            except OSError:
                failed.append(path)
                continue
        removed += 1
        if named is not None:
            named.append(path)
    return removed, kept, failed
