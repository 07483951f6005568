"""Runs a workflow: schedules nodes, applies failure policies, ends runs (R-W1..R-W7, R-C9).

Run states (durable in the journal)::

    running --all nodes done/handled--> succeeded
    running --a node fails, policy does not absorb--> failed   (final failure, R-W3)
    running --stop (Ctrl-C, `workrun stop`)--> stopped          (no compensation, R-C9)

At final failure the run stops scheduling, lets running nodes finish, then in
one transaction marks the run ``failed``, the never-started nodes ``skipped``
and writes a compensation record for every succeeded call (SPEC §10). Node
states: pending -> running -> succeeded | failed | stopped; pending -> skipped.

The engine knows no node kind: it is handed executors ``{kind: executor}``
(:mod:`workrun.nodes`) and hands each node a :class:`~workrun.nodes.base.NodeJob`.
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from typing import Any

from workrun.compensation.records import plan_records
from workrun.models import NodeSpec, WorkflowSpec
from workrun.nodes.base import NodeExecutor, NodeJob
from workrun.operations import settle_operations
from workrun.outcomes import NodeOutcome
from workrun.services import Services, new_id
from workrun.templates import node_dependencies

__all__ = ["Engine", "create_run"]


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


def _deps(node: NodeSpec) -> list[str]:
    return node_dependencies(node.needs, node.templated())


class Engine:
    """Drives one run's nodes to the end (see module doc).

    Args:
        svc: services (journal, runner, reporter, stop event, ``concurrency``).
        executors: ``{kind: executor}`` for every node kind the run may hold.
    """

    def __init__(self, svc: Services, executors: Mapping[str, NodeExecutor]) -> None:
        self.svc = svc
        self.executors = executors

    # -- helpers -----------------------------------------------------------

    def _stop_requested(self, run_id: str) -> bool:
        if self.svc.stopping():
            return True
        if self.svc.journal.run(run_id)["stop_requested"]:
            self.svc.request_stop()
            return True
        return False

    def _effective_ops(self, key: str, spec: WorkflowSpec, nodes: dict[str, dict[str, Any]],
                       ops: list[dict[str, Any]], seen: frozenset[str] = frozenset()) -> list[str]:
        """Succeeded operations a downstream call depends on through node ``key`` (looking through
        nodes without calls, and through a fallback that ran in its place)."""
        if key in seen:
            return []
        own = [o["operation_id"] for o in ops if o["node_key"] == key and o["status"] == "succeeded"]
        policy = spec.nodes[key].on_failure
        if policy.fallback and nodes[key]["handled"]:
            own += self._effective_ops(policy.fallback, spec, nodes, ops, seen | {key})
        if own:
            return own
        out: list[str] = []
        for dep in _deps(spec.nodes[key]):
            for o in self._effective_ops(dep, spec, nodes, ops, seen | {key}):
                if o not in out:
                    out.append(o)
        return out

    # -- running one node --------------------------------------------------

    def _run_node(self, run_id: str, spec: WorkflowSpec, key: str) -> NodeOutcome:
        svc = self.svc
        node = spec.nodes[key]
        policy = node.on_failure
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
        for dep in _deps(node):
            for o in self._effective_ops(dep, spec, nodes, ops):
                if o not in depends_on:
                    depends_on.append(o)
        job = NodeJob(run_id=run_id, node=node, context=context, depends_on=depends_on, svc=svc,
                      should_stop=lambda: self._stop_requested(run_id))
        outcome = self.executors[node.kind].run(job)
        handled = False
        result = outcome.result
        if outcome.status == "failed" and policy.kind == "continue":
            handled = True
            svc.say(run_id, key, "warning", f"{key}: failed ({outcome.error}); handled by on_failure = continue")
        elif outcome.status == "failed" and policy.kind == "fallback" and policy.fallback:
            svc.say(run_id, key, "warning",
                    f"{key}: failed ({outcome.error}); fallback {policy.fallback!r} runs in its place")
            fb = self._run_node(run_id, spec, policy.fallback)
            if fb.status == "succeeded":
                handled, result = True, fb.result
            elif fb.status == "stopped":
                outcome = fb
        status = outcome.status
        svc.journal.finish_node(run_id, key, status=status, handled=handled,
                                result=result if (status == "succeeded" or handled) else None, at=svc.now())
        if not handled:
            level = "info" if status == "succeeded" else "error"
            svc.say(run_id, key, level, f"{key}: {status}" + (f": {outcome.error}" if outcome.error else ""))
        return NodeOutcome("succeeded" if handled else status, result, outcome.error)

    # -- the run -------------------------------------------------------------

    def execute(self, run_id: str) -> str:
        """Drive a ``running`` run until it succeeds, fails or is stopped; return its status.

        In-flight calls from a runner that died are settled first (R-R1, R-R3).
        Compensation is not run here; see :func:`workrun.recovery.drive`.

        Raises:
            JournalError: the journal cannot be written (the run stays resumable).
        """
        svc = self.svc
        run = svc.journal.run(run_id)
        if run["status"] != "running":
            return str(run["status"])
        spec = WorkflowSpec.model_validate(run["spec"])
        settle_operations(svc, run_id)
        standby = {n.on_failure.fallback for n in spec.nodes.values() if n.on_failure.fallback}
        deps = {k: _deps(n) for k, n in spec.nodes.items()}
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

    def after_run(self, run_id: str) -> None:
        """Let every executor act on a run that ended ``failed`` or ``stopped`` (e.g. one remote cancel, R-C10)."""
        for executor in self.executors.values():
            executor.after_run(self.svc, run_id)

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
            self.after_run(run_id)
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
            self.after_run(run_id)
            return "failed"
        svc.journal.end_run(run_id, "succeeded", at=now)
        svc.say(run_id, None, "info", "run succeeded")
        return "succeeded"
