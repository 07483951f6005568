"""Compensation records: one per succeeded call of a finally failed run (R-C1, R-C2, SPEC §10).

Built here, written by the journal in the same transaction that marks the run
``failed`` (so every succeeded call has its record before anything is undone).
"""

from __future__ import annotations

import hashlib
from typing import Any

from workrun.models import AppSpec

__all__ = ["compensation_id_for", "plan_records"]


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
