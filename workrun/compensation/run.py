"""Running a run's compensations in reverse dependency order, independent ones concurrently (R-C3, R-C4, R-C7).

:func:`compensate_run` uses :mod:`workrun.compensation.planning` for the order
and hold-back, and :func:`workrun.effects.operations.run_attempt` for each attempt;
concurrency is bounded by ``Context.concurrency``.
"""

from __future__ import annotations

import time
from typing import Any

from workrun.compensation.planning import Item, Plan, plan
from workrun.core import logs, metrics
from workrun.core.outcomes import Failure, brief
from workrun.core.pool import Pool, Task
from workrun.core.rows import CompensationRow
from workrun.effects import for_compensation
from workrun.effects.operations import Attempted
from workrun.outbound.http import remember_declared
from workrun.runner.context import Context

__all__ = ["compensate_run", "refresh_holds"]


def _label(comp: CompensationRow) -> str:
    return f"compensation {comp['compensation_id']} of {comp['node_key']}"


def _holders_text(by_id: dict[str, CompensationRow], holders: list[str]) -> str:
    parts = []
    for h in holders:
        c = by_id.get(h)
        parts.append(f"{c['node_key']} ({h}, {c['status']})" if c else h)
    return "held back by " + ", ".join(parts) + ": their calls depend on its call, so it waits until they are cleared"


def _attempt(comp: CompensationRow, op: Any, svc: Context, trigger: str) -> Attempted:
    """One attempt of ``comp`` (in a pool thread), its progress lines about its operation and itself (R-F6)."""
    with logs.about(comp):
        return for_compensation(comp).run_attempt(svc, comp, op, trigger)


def _announce(svc: Context, comp: CompensationRow, old: str | None) -> None:
    if comp["status"] != old:
        text = f"{_label(comp)}: {comp['status']}" + (f" ({comp['reason']})" if comp.get("reason") else "")
        if comp["status"] == "succeeded" and comp.get("result") is not None:
            text += f" -> {brief(comp['result'])}"
        level = {"succeeded": "info", "failed": "error", "unknown": "error", "blocked": "warning"}.get(
            comp["status"], "info")
        with logs.about(comp):
            svc.say(comp["run_id"], comp["node_key"], level, text)


def refresh_holds(svc: Context, run_id: str,
                  in_flight: frozenset[str] | set[str] = frozenset()) -> tuple[Plan, dict[str, Any], set[str]]:
    """Apply the planner's hold-back and release decisions to the journal (R-C4).

    Returns:
        (the :class:`workrun.compensation.planning.Plan`, compensations by id before the changes, ids released).
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
                          bool(c and c["held_back_by"] is not None), tuple(c["held_back_by"] or ()) if c else ()))
    decision = plan(items)
    for cid, holders in decision.hold.items():
        c = by_id[cid]
        reason = _holders_text(by_id, holders)
        if c["status"] != "blocked" or list(c["held_back_by"] or []) != holders or c["reason"] != reason:
            svc.journal.set_compensation_status(cid, "blocked", reason=reason, held_back_by=holders, at=svc.now())
            if c["status"] != "blocked":
                metrics.count_compensation("blocked")
            _announce(svc, svc.journal.compensation(cid), c["status"])
    for cid in decision.release:
        svc.journal.set_compensation_status(cid, "pending", reason=None, at=svc.now())
        _announce(svc, svc.journal.compensation(cid), "blocked")
    return decision, by_id, set(decision.release)


def compensate_run(svc: Context, run_id: str, *, only: set[str] | None = None) -> list[CompensationRow]:
    """Run the run's compensations until none can make progress now; return them afterwards.

    Args:
        run_id: a run with compensation records.
        only: when given, start only these compensation ids (an operator's retry) plus any
            that they release.

    Stops early (leaving unfinished ones ``pending``) when a stop is requested.
    Compensations whose environment is unavailable stay ``pending`` for ``resume``.
    """
    remember_declared(svc.journal.run(run_id)["spec"])  # its secrets are redacted in whatever answer (R-X2)
    deferred: set[str] = set()
    running: dict[Task[Attempted], str] = {}
    released: set[str] = set()
    with Pool(svc.concurrency, "workrun-comp") as pool:
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
                    with logs.about(c):
                        svc.say(run_id, c["node_key"], "info", f"{_label(c)}: running")
                    running[pool.submit(_attempt, c, op, svc, trigger)] = cid
            if not running:
                if freed and not svc.stopping():  # released just now: pending from the next look on
                    continue
                if next_due is None or svc.stopping():
                    break
                time.sleep(max(0.0, min(next_due - svc.now(), 0.2)))
                continue
            done = pool.wait_first(running, timeout=0.2)
            for fut in done:
                cid = running.pop(fut)
                attempted = fut.result()
                if attempted.failure is Failure.ENVIRONMENT:
                    deferred.add(cid)
                _announce(svc, attempted.compensation, "running")
    return svc.journal.compensations(run_id)
