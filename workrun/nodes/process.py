"""``kind = "process"`` nodes: one App call, retried as the node's ``on_failure`` allows (R-W1, R-W7)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from workrun.core.backoff import backoff_delay
from workrun.core.errors import ConfigError
from workrun.core.models import ProcessNode
from workrun.core.outcomes import Failure, NodeOutcome, brief
from workrun.core.rows import OperationRow
from workrun.core.templates import render
from workrun.effects.operations import call_app
from workrun.nodes.base import NodeJob
from workrun.nodes.process_check import ProcessChecker
from workrun.runner.apps import load_app

if TYPE_CHECKING:
    from workrun.runner.context import Context

__all__ = ["ProcessExecutor"]


def _counts(op: OperationRow) -> bool:
    """True when a failed operation used up one of its node's calls (R-W7)."""
    return op["failure"] is None or Failure(op["failure"]).counts


class ProcessExecutor(ProcessChecker):
    """Runs a process node: renders its input, calls its App, retries under ``on_failure = { retry }``
    (checked as :class:`~workrun.nodes.process_check.ProcessChecker` checks it).

    Resuming after a restart: a succeeded call is reused (never re-sent, R-R2); an
    ``unknown`` outcome fails the node unless the App is idempotent (R-R3); failed
    calls already made count against the retry budget.
    """

    def run(self, job: NodeJob) -> NodeOutcome:
        """Make the node's call (again, up to the retry budget); see the class doc."""
        node = job.node
        assert isinstance(node, ProcessNode)
        svc, run_id = job.svc, job.run_id
        policy = node.on_failure
        # a node that starts now has no call yet (a call's intent carries its node's start): nothing to read
        prior = [] if job.fresh else svc.journal.operations(run_id, node.key)
        used = sum(1 for o in prior if o["status"] == "failed" and _counts(o))
        if prior:
            last = prior[-1]
            if last["status"] == "succeeded":
                return NodeOutcome("succeeded", last["result"])
            if last["status"] == "unknown" and not last["config"].get("idempotent"):
                return NodeOutcome("failed", error=f"operation {last['operation_id']}: {last['error']}")
            if last["status"] in ("starting", "running"):  # its owner lives on: never start it a second time
                return NodeOutcome("failed", error=f"operation {last['operation_id']} is still in flight in "
                                   f"process {last.get('owner_pid')}; not started again (R-R3)")
        attempts = policy.attempts()
        error = next((o["error"] for o in reversed(prior) if o["status"] == "failed"), None)  # budget spent before
        if used and used < attempts and policy.retry:  # resumed between two calls: the backoff still applies
            ended = next((o["ended_at"] for o in reversed(prior) if o["status"] == "failed"), None)
            if job.wait_left_backoff(ended, backoff_delay(policy.retry.backoff, used),
                                     f"call {used + 1} of {attempts}"):
                return NodeOutcome("stopped", error="stopped by the user")
        while used < attempts:
            if job.should_stop():
                return NodeOutcome("stopped", error="stopped by the user")
            try:
                app = load_app(Path(str(node.project)), str(node.app))
                data = render(node.input, job.context)
            except ConfigError as exc:
                return NodeOutcome("failed", error=exc.line())
            op = call_app(svc, project=Path(str(node.project)), app=app, input=data, run_id=run_id,
                          node_key=node.key, depends_on=job.depends_on, ends_node=True)
            job.say("info" if op["status"] == "succeeded" else "error",
                    f"operation {op['operation_id']} ({app.name}): {op['status']}"
                    + (f": {op['error']}" if op["error"] else "")
                    + (f" -> {brief(op['result'])}" if op["status"] == "succeeded" else ""))
            if op["status"] == "succeeded":  # the journal wrote the node's success with it (ends_node)
                return NodeOutcome("succeeded", op["result"])
            error = op["error"]
            if job.should_stop() or op["failure"] == Failure.STOPPED:
                return NodeOutcome("stopped", error="stopped by the user")
            if op["status"] == "unknown":
                return NodeOutcome("failed", error=error)
            if _counts(op):
                used += 1
            if used < attempts and policy.retry:
                delay = backoff_delay(policy.retry.backoff, used)
                job.say("warning", f"retrying (call {used + 1} of {attempts}) in {delay:.2g} s (on_failure = retry)")
                if svc.stop_event.wait(delay):
                    return NodeOutcome("stopped", error="stopped by the user")
        return NodeOutcome("failed", error=error)

    def after_run(self, svc: Context, run_id: str) -> None:
        """Nothing: a process node's calls are compensated by the run's compensation."""
