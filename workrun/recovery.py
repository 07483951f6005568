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

from pathlib import Path
from typing import Any

from workrun.calls import finish_attempt, finish_operation
from workrun.compensation import compensate_run, plan_records
from workrun.engine import Engine
from workrun.runner.uv import recover
from workrun.services import Services

__all__ = ["compensate_now", "drive", "ensure_planned", "recover_attempts", "recover_operations", "resume_all",
           "stop_orphaned_run", "unfinished_runs"]


def _settle(svc: Services, pid: int | None, start: str | None, call_dir: Path, deadline: float | None) -> Any:
    """R-R3 for one in-flight call. A call another machine's worker started (``svc.foreign_calls``, R-S2)
    is decided only by an exit record reachable from here; its pid means nothing on this machine."""
    if svc.foreign_calls:
        from workrun.runner.uv import Outcome, _read_exit

        return (_read_exit(call_dir) if call_dir.is_dir() else None) or Outcome(unknown=True)
    return recover(pid, start, call_dir, deadline, svc.grace)


def recover_operations(svc: Services, run_id: str | None) -> list[dict[str, Any]]:
    """Settle the in-flight operations of a run (or of standalone calls when ``run_id`` is None)."""
    settled = []
    for op in svc.journal.operations_in_flight(run_id):
        outcome = _settle(svc, op["pid"], op["proc_start"], Path(op["call_dir"]), op["deadline"])
        row = finish_operation(svc, op, outcome)
        if run_id:
            svc.say(run_id, op["node_key"], "warning",
                    f"operation {op['operation_id']} was in flight when the runner stopped; recovered: "
                    f"{row['status']}" + (f" ({row['error']})" if row["error"] else ""))
        settled.append(row)
    return settled


def recover_attempts(svc: Services, run_id: str) -> None:
    """Settle compensation attempts that were in flight when the runner died."""
    for attempt in svc.journal.attempts_in_flight(run_id):
        comp = svc.journal.compensation(attempt["compensation_id"])
        outcome = _settle(svc, attempt["pid"], attempt["proc_start"], Path(attempt["call_dir"]), attempt["deadline"])
        after = finish_attempt(svc, comp, attempt, outcome)
        svc.say(run_id, comp["node_key"], "warning",
                f"compensation {comp['compensation_id']} of {comp['node_key']}: attempt {attempt['number']} was in "
                f"flight when the runner stopped; recovered: {after['status']}"
                + (f" ({after['reason']})" if after["reason"] else ""))
    # a compensation marked running whose attempt row never got written (crash between the two writes
    # cannot happen: they share one transaction) or whose attempt is settled goes back to pending
    for comp in svc.journal.compensations(run_id):
        if comp["status"] == "running":
            svc.journal.set_compensation_status(comp["compensation_id"], "pending", reason=comp["reason"],
                                                at=svc.now(), held_back_by=comp["held_back_by"])


def ensure_planned(svc: Services, run: dict[str, Any]) -> None:
    """Write missing compensation records of a failed run, or of a stopped run an operator asked to compensate."""
    if run["eval"]:
        return
    if run["status"] == "failed" or (run["status"] == "stopped" and run["compensate_requested"]):
        have = {c["operation_id"] for c in svc.journal.compensations(run["run_id"])}
        ops = [o for o in svc.journal.operations(run["run_id"]) if o["operation_id"] not in have]
        records = plan_records(ops, svc.now())
        if records:
            svc.journal.plan_compensations(records)


def drive(svc: Services, run_id: str) -> str:
    """Take one run as far as it can go now: nodes, then compensation; return the run's status.

    Raises:
        JournalError: when the journal cannot be written (everything stays resumable).
    """
    status = Engine(svc).execute(run_id)
    if svc.stopping():
        return svc.journal.run(run_id)["status"]
    run = svc.journal.run(run_id)
    if status in ("failed", "stopped"):
        from workrun.remote import cancel_open_tasks

        cancel_open_tasks(svc, run_id)  # a run that ended while the runner was down (R-C10); sent at most once
    if status in ("failed", "stopped") and not run["eval"]:
        compensate_now(svc, run_id)
    return svc.journal.run(run_id)["status"]


def compensate_now(svc: Services, run_id: str) -> None:
    """Settle in-flight attempts, plan what is owed, and run the run's pending compensations."""
    recover_attempts(svc, run_id)
    ensure_planned(svc, svc.journal.run(run_id))
    if svc.journal.compensations(run_id):
        compensate_run(svc, run_id)


def unfinished_runs(svc: Services) -> list[str]:
    """Runs with nodes, compensations or remote-task cancels still to run, oldest first (R-R1, R-C10)."""
    ids = [r["run_id"] for r in svc.journal.runs_with_status("running")]
    ids += [r for r in svc.journal.runs_with_open_compensation() if r not in ids]
    ids += [r for r in _runs_with_attempts_in_flight(svc) if r not in ids]
    ids += [r for r in svc.journal.runs_with_open_remote_tasks() if r not in ids]  # owed one cancel (R-C10)
    return ids


def _runs_with_attempts_in_flight(svc: Services) -> list[str]:
    return [c["run_id"] for c in svc.journal.list_compensations("running")]


def resume_all(svc: Services) -> list[str]:
    """Continue every unfinished run and compensation in the data dir; return the run ids handled (R-R1).

    Standalone calls in flight are settled too (their record only; never compensated).
    """
    recover_operations(svc, None)
    handled = []
    for run_id in unfinished_runs(svc):
        if svc.stopping():
            break
        svc.say(run_id, None, "info", f"resuming run {run_id}")
        drive(svc, run_id)
        handled.append(run_id)
    return handled


def stop_orphaned_run(svc: Services, run_id: str) -> str:
    """Stop a ``running`` run whose scheduler is gone (``workrun stop`` holding the lock) (R-C9).

    Its live App process groups are ended (SIGTERM, grace, SIGKILL); a call that had
    already finished keeps its recorded outcome; the run becomes ``stopped``.
    """
    from workrun.runner.uv import Outcome, _alive, _read_exit, kill_group

    for op in svc.journal.operations_in_flight(run_id):
        call_dir = Path(op["call_dir"])
        pid = op["pid"]
        if pid is None:
            outcome = recover(None, None, call_dir, op["deadline"], svc.grace, claim_wait=0.5)
            if outcome.not_started:
                finish_operation(svc, op, outcome)
                continue
            pid = int((call_dir / "claim").read_text().split()[1])
        was_alive = _alive(pid, op["proc_start"] if op["pid"] else None)
        if was_alive:
            kill_group(pid, svc.grace)
        record = _read_exit(call_dir)
        if was_alive:
            outcome = Outcome(stopped=True, exit_code=record.exit_code if record else None,
                              signal=record.signal if record else None)
        else:
            outcome = record or Outcome(unknown=True)
        finish_operation(svc, op, outcome)
    svc.request_stop()
    from workrun.engine import Engine

    return Engine(svc).finish(run_id, None)
