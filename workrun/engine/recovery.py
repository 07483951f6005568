"""Picking up after the runner died (R-R1..R-R4, SPEC §10).

States that can be found in flight, and how each is settled:

- operation / attempt ``starting`` (intent committed, pid maybe not): if the
  launcher never claimed the call directory, recovery claims it (``abandoned``)
  so it can never start late, and the call counts as *not started*; otherwise
  it is treated like ``running`` with the pid from the claim file.
- ``running``: a live process group (same pid and start time) is waited for,
  bounded by its deadline (then killed: a timeout). Once gone, its exit record
  (``exit.json``, written by the launcher) and result file decide the outcome;
  with no exit record the outcome is ``unknown`` (never re-sent, unless the
  entry is declared idempotent).

A compensation whose success is saved is never run again (R-R2): only
``pending`` compensations are started.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from workrun.compensation import compensate_run, plan_records
from workrun.core import logs
from workrun.core.errors import WorkrunError
from workrun.core.rows import OperationRow, RunRow
from workrun.effects import for_compensation, for_operation, settle_operations
from workrun.effects.ticket_actions import notify_dead_letters, run_actions, send_notifications
from workrun.engine.driver import Engine
from workrun.nodes import NodeExecutor, default_executors
from workrun.outbound.http import remember_declared
from workrun.runner.base import CLAIM_WAIT
from workrun.runner.context import Context

__all__ = ["compensate_now", "drive", "ensure_planned", "recover_attempts", "recover_operations", "resume_all",
           "stop_orphaned_run", "unfinished_runs"]


def recover_operations(svc: Context, run_id: str | None) -> list[OperationRow]:
    """Settle the in-flight operations of a run (or of standalone calls when ``run_id`` is None)."""
    return settle_operations(svc, run_id)


def recover_attempts(svc: Context, run_id: str) -> None:
    """Settle compensation attempts that were in flight when the runner died."""
    claim_by = time.monotonic() + CLAIM_WAIT  # one window for every attempt of this pass (see CLAIM_WAIT)
    for attempt in svc.journal.attempts_in_flight(run_id):
        comp = svc.journal.compensation(attempt["compensation_id"])
        after = for_compensation(comp).recover_attempt(svc, comp, attempt,
                                                       claim_wait=max(0.0, claim_by - time.monotonic()))
        with logs.about(comp):
            svc.say(run_id, comp["node_key"], "warning",
                    f"compensation {comp['compensation_id']} of {comp['node_key']}: attempt {attempt['number']} was "
                    f"in flight when the runner stopped; recovered: {after['status']}"
                    + (f" ({after['reason']})" if after["reason"] else ""))
    # a compensation marked running whose attempt row never got written (crash between the two writes
    # cannot happen: they share one transaction) or whose attempt is settled goes back to pending
    for comp in svc.journal.compensations(run_id):
        if comp["status"] == "running":
            svc.journal.set_compensation_status(comp["compensation_id"], "pending", reason=comp["reason"],
                                                at=svc.now(), held_back_by=comp["held_back_by"])


def ensure_planned(svc: Context, run: RunRow) -> None:
    """Write missing compensation records of a failed run, or of a stopped run an operator asked to compensate."""
    if run["eval"]:
        return
    if run["status"] == "failed" or (run["status"] in ("stopped", "terminated") and run["compensate_requested"]):
        have = {c["operation_id"] for c in svc.journal.compensations(run["run_id"])}
        ops = [o for o in svc.journal.operations(run["run_id"]) if o["operation_id"] not in have]
        records = plan_records(ops, svc.now())
        if records:
            svc.journal.plan_compensations(records)


def drive(svc: Context, run_id: str, executors: Mapping[str, NodeExecutor] | None = None) -> str:
    """Take one run as far as it can go now: nodes, then compensation; return the run's status.

    Args:
        executors: ``{kind: executor}`` (default: :func:`workrun.nodes.default_executors`).

    Raises:
        JournalError: when the journal cannot be written (everything stays resumable).
    """
    remember_declared(svc.journal.run(run_id)["spec"])  # its secrets are redacted in whatever answer (R-X2)
    engine = Engine(svc, executors if executors is not None else default_executors())
    status = engine.execute(run_id)
    if svc.stopping():
        return str(svc.journal.run(run_id)["status"])
    run = svc.journal.run(run_id)
    if status in ("failed", "stopped"):
        engine.after_run(run_id)  # a run that ended while the runner was down (R-C10): a cancel is sent at most once
    # ticket actions and notifications go on by themselves, whatever the run's state (R-M3, R-M4, R-M8)
    run_actions(svc, run_id)
    if status in ("failed", "stopped", "terminated") and not run["eval"]:
        compensate_now(svc, run_id)
    return str(svc.journal.run(run_id)["status"])


def compensate_now(svc: Context, run_id: str) -> None:
    """Settle in-flight attempts, plan what is owed, and run the run's pending compensations."""
    recover_attempts(svc, run_id)
    ensure_planned(svc, svc.journal.run(run_id))
    if svc.journal.compensations(run_id):
        compensate_run(svc, run_id)
        notify_dead_letters(svc, run_id)  # one notification per compensation that ended failed (R-M8)
        send_notifications(svc, run_id)


def unfinished_runs(svc: Context) -> list[str]:
    """Runs with nodes, compensations or remote-task cancels still to run, oldest first (R-R1, R-C10)."""
    ids = [r["run_id"] for r in svc.journal.runs_with_status("running")]
    ids += [r for r in svc.journal.runs_with_open_compensation() if r not in ids]
    ids += [r for r in _runs_with_attempts_in_flight(svc) if r not in ids]
    ids += [r for r in svc.journal.runs_with_open_remote_tasks() if r not in ids]  # owed one cancel (R-C10)
    ids += [r for r in svc.journal.runs_with_open_tickets_work() if r not in ids]  # actions, notifications (R-M7)
    return ids


def _runs_with_attempts_in_flight(svc: Context) -> list[str]:
    return [c["run_id"] for c in svc.journal.list_compensations("running")]


def resume_all(svc: Context, executors: Mapping[str, NodeExecutor] | None = None, *,
               past_internal_errors: bool = False) -> list[str]:
    """Continue every unfinished run and compensation in the data dir; return the run ids handled (R-R1).

    Standalone calls in flight are settled too (their record only; never compensated).

    Args:
        past_internal_errors: a run whose driving fails with an internal error (a bug, not a
            :class:`~workrun.core.errors.WorkrunError`) is reported and left as it is, and the next run is
            resumed: what a scheduling command does before its own work, so that one such run does not stop
            every later command. ``workrun resume`` itself raises it.
    """
    executors = executors if executors is not None else default_executors()
    settle_operations(svc, None)
    handled = []
    for run_id in unfinished_runs(svc):
        if svc.stopping():
            break
        svc.say(run_id, None, "info", f"resuming run {run_id}")
        try:
            drive(svc, run_id, executors)
        except WorkrunError:
            raise
        except Exception as exc:
            if not past_internal_errors:
                raise
            try:  # in the run's record, and on the terminal
                svc.say(run_id, None, "error",
                        f"run {run_id} could not be resumed: internal error: {type(exc).__name__}: {exc}; it is left "
                        f"as it is (`workrun resume` shows the error, `workrun stop {run_id}` ends the run)")
            except WorkrunError:  # the journal refuses even that: nothing else can go on
                raise exc from None
            continue
        handled.append(run_id)
    return handled


def stop_orphaned_run(svc: Context, run_id: str, executors: Mapping[str, NodeExecutor] | None = None) -> str:
    """Stop a ``running`` run whose scheduler is gone (``workrun stop`` holding the lock) (R-C9).

    Its live App process groups are ended (SIGTERM, grace, SIGKILL); a call that had
    already finished keeps its recorded outcome; the run becomes ``stopped``.
    """
    for op in svc.journal.operations_in_flight(run_id):
        for_operation(op).end_operation(svc, op)
    svc.request_stop()
    return Engine(svc, executors if executors is not None else default_executors()).finish(run_id, None)
