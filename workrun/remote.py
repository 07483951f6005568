"""Remote agent nodes over A2A (R-C10). Requires the optional extra ``workrun[a2a]``."""

from __future__ import annotations

from typing import Any

from workrun.models import NodeSpec
from workrun.services import Services

__all__ = ["cancel_open_tasks", "run_remote_node"]


def run_remote_node(svc: Services, run_id: str, node: NodeSpec, context: dict[str, Any]) -> Any:
    """Send the node's message to the A2A agent and follow the task; return a NodeOutcome."""
    from workrun.engine import NodeOutcome

    return NodeOutcome("failed", error="remote_agent nodes are not available in this build")


def cancel_open_tasks(svc: Services, run_id: str) -> None:
    """Send one best-effort ``tasks/cancel`` to each non-terminal remote task of the run (R-C10)."""
    if not svc.journal.remote_tasks(run_id):
        return
