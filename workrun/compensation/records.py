"""Compensation records: one per succeeded call of a finally failed run (R-C1, R-C2, SPEC §10).

Built here, written by the journal in the same transaction that marks the run
``failed`` (so every succeeded call has its record before anything is undone).
"""

from __future__ import annotations

from typing import cast

from workrun import effects
from workrun.core.digest import sha256
from workrun.core.rows import CompensationRow, OperationRow

__all__ = ["compensation_id_for", "plan_records"]


def compensation_id_for(operation_id: str) -> str:
    """The stable compensation id of an operation: ``cmp_`` + 12 hex of sha256(operation id) (R-C2)."""
    return "cmp_" + sha256(operation_id.encode()).hexdigest()[:12]


def plan_records(ops: list[OperationRow], now: float) -> list[CompensationRow]:
    """Compensation records for every succeeded call of a finally failed run (R-C1, SPEC §10).

    A call whose config snapshot has a compensation entry (a script, or an HTTP reverse action: an http
    node's ``compensation`` table or an App's ``compensation = { http = ... }``, R-H6) gets ``pending``; one
    without gets ``skipped`` (not an error). Failed and unknown calls get none. A reverse action's record
    carries the action (templates unfilled) in its context as ``reverse_action``.
    """
    records = []
    for op in ops:
        if op["status"] != "succeeded":
            continue
        cid = compensation_id_for(op["operation_id"])
        planned = effects.plan(op)  # a script, an HTTP reverse action (R-H6), … or None
        context = {
            "original_operation_id": op["operation_id"], "compensation_id": cid, "original_input": op["input"],
            "original_result": op["result"], "resources": op["resources"], "app": op["app"],
            "node_key": op["node_key"], "run_id": op["run_id"],
        }
        owed = planned is not None
        if planned is not None:
            context.update(planned.context)
        knobs = planned.knobs if planned is not None else {}
        records.append(cast(CompensationRow, {
            "compensation_id": cid, "operation_id": op["operation_id"], "run_id": op["run_id"],
            "node_key": op["node_key"], "status": "pending" if owed else "skipped",
            "reason": None if owed else effects.for_operation(op).no_compensation(op),
            "context": context if owed else None,
            **(knobs if owed else {"max_attempts": 0, "timeout": 0, "backoff": 0, "idempotent": 0}),
            "created_at": now, "updated_at": now,
        }))
    return records
