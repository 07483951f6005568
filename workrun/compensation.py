"""Planning and running a run's compensation (R-C1..R-C4, R-C6, R-C7, SPEC §10).

:func:`plan_records` builds the compensation records written in the same
transaction that marks the run ``failed`` (so every succeeded call has a
committed record before any compensation starts). :func:`compensate_run`
then runs them in reverse dependency order, independent ones concurrently
(bounded by ``Services.concurrency``), using :mod:`workrun.planning` for the
order and hold-back, and :func:`workrun.calls.run_attempt` for each attempt.
"""

from __future__ import annotations

import hashlib
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from typing import Any

from workrun.calls import Attempted, run_attempt
from workrun.models import AppSpec
from workrun.outcomes import Failure, brief
from workrun.planning import Item, plan
from workrun.services import Services

__all__ = ["FINISHED", "compensate_run", "compensation_id_for", "plan_records", "refresh_holds"]

FINISHED = frozenset({"succeeded", "skipped", "failed", "blocked", "unknown"})


def compensation_id_for(operation_id: str) -> str:
    """The stable compensation id of an operation: ``cmp_`` + 12 hex of sha256(operation id) (R-C2)."""
    return "cmp_" + hashlib.sha256(operation_id.encode()).hexdigest()[:12]


def plan_records(ops: list[dict[str, Any]], now: float) -> list[dict[str, Any]]:
    """Compensation records for every succeeded call of a finally failed run (R-C1, SPEC §10).

    A call whose config snapshot has a compensation entry gets ``pending``; one
    without gets ``skipped`` (not an error). Failed and unknown calls get none.
    """
    records = []
    for op in ops:
        if op["status"] != "succeeded":
            continue
        config = AppSpec.model_validate(op["config"])
        cid = compensation_id_for(op["operation_id"])
        comp = config.compensation
        context = {
            "original_operation_id": op["operation_id"], "compensation_id": cid, "original_input": op["input"],
            "original_result": op["result"], "resources": op["resources"], "app": op["app"],
            "node_key": op["node_key"], "run_id": op["run_id"],
        }
        records.append({
            "compensation_id": cid, "operation_id": op["operation_id"], "run_id": op["run_id"],
            "node_key": op["node_key"], "status": "pending" if comp else "skipped",
            "reason": None if comp else f"App {op['app']!r} has no compensation entry",
            "context": context if comp else None,
            "max_attempts": (comp.max_retries + 1) if comp else 0, "timeout": comp.timeout if comp else 0,
            "backoff": comp.backoff if comp else 0, "idempotent": int(comp.idempotent) if comp else 0,
            "created_at": now, "updated_at": now,
        })
    return records


def _label(comp: dict[str, Any]) -> str:
    return f"compensation {comp['compensation_id']} of {comp['node_key']}"


def _holders_text(by_id: dict[str, dict[str, Any]], holders: list[str]) -> str:
    parts = []
    for h in holders:
        c = by_id.get(h)
        parts.append(f"{c['node_key']} ({h}, {c['status']})" if c else h)
    return "held back by " + ", ".join(parts) + ": it depends on their calls, so it waits until they are cleared"


def _announce(svc: Services, comp: dict[str, Any], old: str | None) -> None:
    if comp["status"] != old:
        text = f"{_label(comp)}: {comp['status']}" + (f" ({comp['reason']})" if comp.get("reason") else "")
        if comp["status"] == "succeeded" and comp.get("result") is not None:
            text += f" -> {brief(comp['result'])}"
        level = {"succeeded": "info", "failed": "error", "unknown": "error", "blocked": "warning"}.get(
            comp["status"], "info")
        svc.say(comp["run_id"], comp["node_key"], level, text)


def refresh_holds(svc: Services, run_id: str, in_flight: set[str] = frozenset()) -> tuple[Any, dict[str, Any], set[str]]:
    """Apply the planner's hold-back and release decisions to the journal (R-C4).

    Returns:
        (the :class:`workrun.planning.Plan`, compensations by id before the changes, ids released).
    """
    comps = svc.journal.compensations(run_id)
    by_id = {c["compensation_id"]: c for c in comps}
    by_op = {c["operation_id"]: c for c in comps}
    items = []
    for op in svc.journal.operations(run_id):
        c = by_op.get(op["operation_id"])
        status = c["status"] if c else None
        if c and c["compensation_id"] in in_flight:
            status = "running"
        items.append(Item(op["operation_id"], op["node_key"] or "", tuple(op["depends_on"] or ()),
                          c["compensation_id"] if c else None, status,
                          bool(c and c["held_back_by"] is not None)))
    decision = plan(items)
    for cid, holders in decision.hold.items():
        c = by_id[cid]
        reason = _holders_text(by_id, holders)
        if c["status"] != "blocked" or list(c["held_back_by"] or []) != holders or c["reason"] != reason:
            svc.journal.set_compensation_status(cid, "blocked", reason=reason, held_back_by=holders, at=svc.now())
            _announce(svc, svc.journal.compensation(cid), c["status"])
    for cid in decision.release:
        svc.journal.set_compensation_status(cid, "pending", reason=None, at=svc.now())
        _announce(svc, svc.journal.compensation(cid), "blocked")
    return decision, by_id, set(decision.release)


def compensate_run(svc: Services, run_id: str, *, only: set[str] | None = None) -> list[dict[str, Any]]:
    """Run the run's compensations until none can make progress now; return them afterwards.

    Args:
        run_id: a run with compensation records.
        only: when given, start only these compensation ids (an operator's retry) plus any
            that they release.

    Stops early (leaving unfinished ones ``pending``) when a stop is requested.
    Compensations whose environment is unavailable stay ``pending`` for ``resume``.
    """
    deferred: set[str] = set()
    running: dict[Future[Attempted], str] = {}
    released: set[str] = set()
    with ThreadPoolExecutor(max_workers=svc.concurrency, thread_name_prefix="workrun-comp") as pool:
        while True:
            in_flight = set(running.values())
            decision, by_id, freed = refresh_holds(svc, run_id, in_flight)
            released |= freed
            now = svc.now()
            next_due: float | None = None
            if not svc.stopping():
                for cid in reversed(decision.ready):  # newest call first among independent ones
                    if cid in in_flight or cid in deferred or len(running) >= svc.concurrency:
                        continue
                    if only is not None and cid not in only and cid not in released:
                        continue
                    c = by_id[cid]
                    if c["next_attempt_at"] and c["next_attempt_at"] > now:
                        next_due = min(next_due or c["next_attempt_at"], c["next_attempt_at"])
                        continue
                    op = svc.journal.operation(c["operation_id"])
                    trigger = "operator" if only is not None and cid in only else "auto"
                    if only is not None and cid in only:
                        only = only - {cid}
                    svc.say(run_id, c["node_key"], "info", f"{_label(c)}: running")
                    running[pool.submit(run_attempt, svc, c, op, trigger)] = cid
            if not running:
                if next_due is None or svc.stopping():
                    break
                time.sleep(max(0.0, min(next_due - svc.now(), 0.2)))
                continue
            done, _ = wait_futures(list(running), timeout=0.2, return_when=FIRST_COMPLETED)
            for fut in done:
                cid = running.pop(fut)
                attempted = fut.result()
                if attempted.failure is Failure.ENVIRONMENT:
                    deferred.add(cid)
                _announce(svc, attempted.compensation, "running")
    return svc.journal.compensations(run_id)
