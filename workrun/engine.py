"""Runs a workflow: schedules nodes, applies failure policies, ends runs (R-W1..R-W7, R-C9).

Run states (durable in the journal)::

    running --all nodes done/handled--> succeeded
    running --a node fails, policy does not absorb--> failed   (final failure, R-W3)
    running --stop (Ctrl-C, `workrun stop`)--> stopped          (no compensation, R-C9)

At final failure the run stops scheduling, lets running nodes finish, then in
one transaction marks the run ``failed``, the never-started nodes ``skipped``
and writes a compensation record for every succeeded call (SPEC §10). Node
states: pending -> running -> succeeded | failed | stopped; pending -> skipped.
"""

from __future__ import annotations

from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workrun.apps import load_app
from workrun.calls import call_app
from workrun.compensation import plan_records
from workrun.errors import ConfigError
from workrun.models import NodeSpec, WorkflowSpec
from workrun.outcomes import Failure
from workrun.remote import cancel_open_tasks
from workrun.services import Services, new_id
from workrun.workflow import FailurePolicy, node_dependencies, parse_policy, render

__all__ = ["Engine", "NodeOutcome", "brief", "create_run"]


def brief(value: Any, limit: int = 160) -> str:
    """A short one-line JSON rendering of a result for progress messages."""
    import json

    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass
class NodeOutcome:
    """How one node ended: ``status`` succeeded | failed | stopped, its result or error."""

    status: str
    result: Any = None
    error: str | None = None


def create_run(svc: Services, spec: WorkflowSpec, inputs: dict[str, Any], *, eval_run: bool = False,
               rerun_of: str | None = None) -> str:
    """Record a new run (status ``running``) with its workflow snapshot and inputs; return its id (R-W2)."""
    run_id = new_id("run")
    svc.journal.create_run({
        "run_id": run_id, "workflow": spec.name, "workflow_path": spec.path, "spec": spec.model_dump(mode="json"),
        "inputs": inputs, "status": "running", "eval": int(eval_run), "rerun_of": rerun_of,
        "created_at": svc.now(),
    }, list(spec.nodes))
    return run_id


def _counts(op: dict[str, Any]) -> bool:
    """True when a failed operation used up one of its node's calls (R-W7)."""
    return op["failure"] is None or Failure(op["failure"]).counts


class Engine:
    """Drives one run's nodes to the end (see module doc)."""

    def __init__(self, svc: Services) -> None:
        self.svc = svc

    # -- helpers -----------------------------------------------------------

    def _stop_requested(self, run_id: str) -> bool:
        if self.svc.stopping():
            return True
        if self.svc.journal.run(run_id)["stop_requested"]:
            self.svc.request_stop()
            return True
        return False

    def _effective_ops(self, run_id: str, key: str, spec: WorkflowSpec, nodes: dict[str, dict[str, Any]],
                       ops: list[dict[str, Any]], seen: frozenset[str] = frozenset()) -> list[str]:
        """Succeeded operations a downstream call depends on through node ``key`` (looking through
        nodes without calls, and through a fallback that ran in its place)."""
        if key in seen:
            return []
        own = [o["operation_id"] for o in ops if o["node_key"] == key and o["status"] == "succeeded"]
        policy = parse_policy(spec.nodes[key].on_failure, spec.path, key)
        if policy.fallback and nodes[key]["handled"]:
            own += self._effective_ops(run_id, policy.fallback, spec, nodes, ops, seen | {key})
        if own:
            return own
        out: list[str] = []
        for dep in node_dependencies(spec.nodes[key]):
            for o in self._effective_ops(run_id, dep, spec, nodes, ops, seen | {key}):
                if o not in out:
                    out.append(o)
        return out

    # -- running one node --------------------------------------------------

    def _run_process(self, run_id: str, node: NodeSpec, policy: FailurePolicy, context: dict[str, Any],
                     depends_on: list[str]) -> NodeOutcome:
        svc = self.svc
        prior = svc.journal.operations(run_id, node.key)
        used = sum(1 for o in prior if o["status"] == "failed" and _counts(o))
        if prior:
            last = prior[-1]
            if last["status"] == "succeeded":
                return NodeOutcome("succeeded", last["result"])
            if last["status"] == "unknown" and not last["config"].get("idempotent"):
                return NodeOutcome("failed", error=f"operation {last['operation_id']}: {last['error']}")
        attempts = policy.attempts()
        error = None
        while used < attempts:
            if self._stop_requested(run_id):
                return NodeOutcome("stopped", error="stopped by the user")
            try:
                app = load_app(Path(node.project), node.app)  # type: ignore[arg-type]
                data = render(node.input, context)
            except ConfigError as exc:
                return NodeOutcome("failed", error=exc.line())
            except KeyError as exc:
                return NodeOutcome("failed", error=f"template {{{{ {exc.args[0]} }}}} has no value")
            op = call_app(svc, project=Path(node.project), app=app, input=data,  # type: ignore[arg-type]
                          run_id=run_id, node_key=node.key, depends_on=depends_on)
            svc.say(run_id, node.key, "info" if op["status"] == "succeeded" else "error",
                    f"operation {op['operation_id']} ({app.name}): {op['status']}"
                    + (f": {op['error']}" if op["error"] else "")
                    + (f" -> {brief(op['result'])}" if op["status"] == "succeeded" else ""))
            if op["status"] == "succeeded":
                return NodeOutcome("succeeded", op["result"])
            error = op["error"]
            if self._stop_requested(run_id) or op["failure"] == Failure.STOPPED:
                return NodeOutcome("stopped", error="stopped by the user")
            if op["status"] == "unknown":
                return NodeOutcome("failed", error=error)
            if _counts(op):
                used += 1
            if used < attempts and policy.retry:
                delay = policy.retry.backoff * (2 ** (used - 1))
                svc.say(run_id, node.key, "warning",
                        f"retrying (call {used + 1} of {attempts}) in {delay:g} s (on_failure = retry)")
                if svc.stop_event.wait(delay):
                    return NodeOutcome("stopped", error="stopped by the user")
        return NodeOutcome("failed", error=error)

    def _run_kind(self, run_id: str, node: NodeSpec, policy: FailurePolicy, context: dict[str, Any],
                  depends_on: list[str]) -> NodeOutcome:
        if node.kind == "process":
            return self._run_process(run_id, node, policy, context, depends_on)
        if node.kind == "agent":
            from workrun.agent import run_agent_node

            return run_agent_node(self.svc, run_id, node, context, depends_on)
        from workrun.remote import run_remote_node

        return run_remote_node(self.svc, run_id, node, context)

    def _run_node(self, run_id: str, spec: WorkflowSpec, key: str) -> NodeOutcome:
        svc = self.svc
        node = spec.nodes[key]
        policy = parse_policy(node.on_failure, spec.path, f"nodes.{key}.on_failure")
        nodes = {n["node_key"]: n for n in svc.journal.nodes(run_id)}
        if nodes[key]["status"] != "running":
            svc.journal.start_node(run_id, key, at=svc.now())
            svc.say(run_id, key, "info", f"{key}: running")
        ops = svc.journal.operation_statuses(run_id)
        run = svc.journal.run(run_id)
        context = {"inputs": run["inputs"], "nodes": {
            k: {"result": n["result"]} for k, n in nodes.items()
            if n["status"] == "succeeded" or (n["handled"] and n["result"] is not None)}}
        depends_on: list[str] = []
        for dep in node_dependencies(node):
            for o in self._effective_ops(run_id, dep, spec, nodes, ops):
                if o not in depends_on:
                    depends_on.append(o)
        outcome = self._run_kind(run_id, node, policy, context, depends_on)
        handled = 0
        result = outcome.result
        if outcome.status == "failed" and policy.kind == "continue":
            handled = 1
            svc.say(run_id, key, "warning", f"{key}: failed ({outcome.error}); handled by on_failure = continue")
        elif outcome.status == "failed" and policy.kind == "fallback" and policy.fallback:
            svc.say(run_id, key, "warning",
                    f"{key}: failed ({outcome.error}); fallback {policy.fallback!r} runs in its place")
            fb = self._run_node(run_id, spec, policy.fallback)
            if fb.status == "succeeded":
                handled, result = 1, fb.result
            elif fb.status == "stopped":
                outcome = fb
        status = outcome.status
        svc.journal.finish_node(run_id, key, status=status, handled=bool(handled),
                                result=result if (status == "succeeded" or handled) else None, at=svc.now())
        if not handled:
            level = "info" if status == "succeeded" else "error"
            svc.say(run_id, key, level, f"{key}: {status}" + (f": {outcome.error}" if outcome.error else ""))
        return NodeOutcome("succeeded" if handled else status, result, outcome.error)

    # -- the run -------------------------------------------------------------

    def execute(self, run_id: str) -> str:
        """Drive a ``running`` run until it succeeds, fails or is stopped; return its status.

        In-flight calls from a runner that died are recovered first (R-R1, R-R3).
        Compensation is not run here; see :func:`workrun.recovery.drive`.

        Raises:
            JournalError: the journal cannot be written (the run stays resumable).
        """
        from workrun.recovery import recover_operations

        svc = self.svc
        run = svc.journal.run(run_id)
        if run["status"] != "running":
            return run["status"]
        spec = WorkflowSpec.model_validate(run["spec"])
        recover_operations(svc, run_id)
        policies = {k: parse_policy(n.on_failure, spec.path, f"nodes.{k}.on_failure") for k, n in spec.nodes.items()}
        standby = {p.fallback for p in policies.values() if p.fallback}
        deps = {k: node_dependencies(n) for k, n in spec.nodes.items()}
        failed_node: str | None = None
        futures: dict[Future[NodeOutcome], str] = {}

        def status_of() -> dict[str, dict[str, Any]]:
            return {n["node_key"]: n for n in svc.journal.nodes(run_id)}

        with ThreadPoolExecutor(max_workers=svc.concurrency, thread_name_prefix="workrun-node") as pool:
            nodes = status_of()
            for key, n in nodes.items():  # a node left running by a dead runner resumes where it was
                if n["status"] == "running":
                    futures[pool.submit(self._run_node, run_id, spec, key)] = key
            while True:
                stopping = self._stop_requested(run_id)
                nodes = status_of()
                if not stopping and failed_node is None:
                    active = set(futures.values())
                    for key, n in nodes.items():
                        if n["status"] != "pending" or key in standby or key in active:
                            continue
                        if len(futures) >= svc.concurrency:
                            break
                        if all(nodes[d]["status"] == "succeeded" or nodes[d]["handled"] for d in deps[key]):
                            futures[pool.submit(self._run_node, run_id, spec, key)] = key
                            active.add(key)
                if not futures:
                    break
                done, _ = wait_futures(list(futures), timeout=0.1, return_when=FIRST_COMPLETED)
                for fut in done:
                    key = futures.pop(fut)
                    outcome = fut.result()
                    if outcome.status == "failed" and failed_node is None:
                        failed_node = key
        return self.finish(run_id, failed_node)

    def finish(self, run_id: str, failed_node: str | None) -> str:
        """End a run: ``stopped`` when a stop was requested, ``failed`` (with compensation records, in one
        transaction, SPEC §10) when a node failed unhandled, else ``succeeded``; return that status."""
        svc = self.svc
        nodes = svc.journal.nodes(run_id)
        now = svc.now()
        run = svc.journal.run(run_id)
        if svc.stopping() or any(n["status"] == "stopped" for n in nodes):
            # nodes a dead runner left running (``workrun stop`` of an orphaned run) end stopped too
            svc.journal.end_run(run_id, "stopped", at=now, reason="stopped by the user")
            if any(o["status"] == "succeeded" for o in svc.journal.operation_statuses(run_id)):
                svc.say(run_id, None, "warning", "run stopped by the user: side effects of calls that succeeded were "
                        f"NOT undone (no compensation ran); `workrun compensate {run_id}` undoes them")
            else:
                svc.say(run_id, None, "warning", "run stopped by the user: no call had succeeded, so there is "
                        "nothing to undo (side effects of a stopped call are NOT undone)")
            cancel_open_tasks(svc, run_id)
            return "stopped"
        if failed_node is None and any(n["status"] == "failed" and not n["handled"] for n in nodes):
            failed_node = next(n["node_key"] for n in nodes if n["status"] == "failed" and not n["handled"])
        if failed_node is not None:
            records = [] if run["eval"] else plan_records(svc.journal.operations(run_id), now)
            svc.journal.end_run(run_id, "failed", at=now, reason=f"node {failed_node!r} failed", compensations=records)
            svc.say(run_id, None, "error", f"run failed: node {failed_node!r} failed"
                    + (" (evaluation run: no compensation, R-W6)" if run["eval"] else ""))
            for r in records:
                text = f"compensation {r['compensation_id']} of {r['node_key']}: {r['status']}"
                svc.say(run_id, r["node_key"], "info", text + (f" ({r['reason']})" if r["reason"] else ""))
            cancel_open_tasks(svc, run_id)
            return "failed"
        svc.journal.end_run(run_id, "succeeded", at=now)
        svc.say(run_id, None, "info", "run succeeded")
        return "succeeded"
