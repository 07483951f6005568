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

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, cast

from workrun.compensation.records import plan_records
from workrun.core import logs, metrics, tracing
from workrun.core.models import FailurePolicy, NodeSpec, WorkflowSpec
from workrun.core.outcomes import NodeOutcome
from workrun.core.pool import Pool, Task
from workrun.core.rows import CompensationRow, NodeRow, NodeStatus, OperationRow, RunRow, TicketEventRow, TicketRow
from workrun.core.states import NODE_ENDED
from workrun.core.templates import node_dependencies, reads_data
from workrun.effects import settle_operations
from workrun.effects.ticket_records import run_data
from workrun.engine.scheduler import ReadySet, Verdict
from workrun.nodes.base import NodeExecutor, NodeJob
from workrun.runner.context import Context, new_id

__all__ = ["STOP_POLL_SECONDS", "Engine", "create_run"]

STOP_POLL_SECONDS = 0.05
"""How often (seconds) a running engine looks in the journal for a stop asked from another terminal (R-C9)."""


def create_run(svc: Context, spec: WorkflowSpec, inputs: dict[str, Any], *, eval_run: bool = False,
               rerun_of: str | None = None) -> str:
    """Record a new run (status ``running``) with its workflow snapshot and inputs; return its id (R-W2)."""
    run_id = new_id("run")
    written = spec.model_dump(mode="json")
    svc.journal.create_run({
        "run_id": run_id, "workflow": spec.name, "workflow_path": spec.path, "spec": written,
        "inputs": inputs, "status": "running", "eval": int(eval_run), "rerun_of": rerun_of,
        "created_at": svc.now(), "verify": int(spec.verify), "data": dict(inputs),
    }, list(spec.nodes))
    _CREATED.clear()
    _CREATED[run_id] = (written, spec)
    return run_id


_CREATED: dict[str, tuple[Any, WorkflowSpec]] = {}
"""The run this process created last: its journaled spec and the validated spec it was written from."""


def _spec_of(run: RunRow) -> WorkflowSpec:
    """The run's workflow spec: validated from its journaled snapshot, unless this process wrote that very
    snapshot from a spec it holds (a run just created: the snapshot is compared, not validated again, issue 33:
    ~2 ms of a 50-node run's start)."""
    created = _CREATED.get(run["run_id"])
    if created is not None and created[0] == run["spec"]:
        return created[1]
    return WorkflowSpec.model_validate(run["spec"])


def _deps(node: NodeSpec) -> list[str]:
    return node_dependencies(node.needs, node.templated())


class _NodeRows:
    """The run's node rows as the driver last read them (``known``, in workflow order), kept up to date at
    O(changes) per step (issue 14).

    When no other connection wrote to the journal since the last look (its change token), only this process's
    node threads changed rows, and only of nodes that ended (and the fallbacks they may have run in their
    place): only those rows are read. Otherwise (a person resumed a ticket, a backend that cannot tell, the
    first look) every node's state is looked up, and a whole row (with its result) read again only when its
    state changed.
    """

    def __init__(self, svc: Context, run_id: str, standby: frozenset[str]) -> None:
        self.svc, self.run_id, self.standby = svc, run_id, standby
        self.known: dict[str, NodeRow] = {}
        self.token: object = None

    def _changed(self, state: NodeRow) -> bool:
        k = self.known.get(state["node_key"])
        return k is None or k["status"] != state["status"] or k["handled"] != state["handled"]

    def refresh(self, ended: list[str]) -> set[str]:
        """Read what may have changed (``ended``: nodes whose thread returned since the last look); return the
        keys whose state moved."""
        journal = self.svc.journal
        token = journal.change_token()
        if token is None or token != self.token or not self.known:
            look = sorted(s["node_key"] for s in journal.node_states(self.run_id) if self._changed(s))
        else:
            look = sorted({*ended, *self.standby}) if ended else []
        rows = journal.nodes(self.run_id, look) if look else []  # in workflow order
        moved = {row["node_key"] for row in rows if self._changed(row)}
        self.known.update((row["node_key"], row) for row in rows)
        self.token = token
        return moved


class Engine:
    """Drives one run's nodes to the end (see module doc).

    Args:
        svc: services (journal, runner, reporter, stop event, ``concurrency``).
        executors: ``{kind: executor}`` for every node kind the run may hold.
    """

    def __init__(self, svc: Context, executors: Mapping[str, NodeExecutor]) -> None:
        self.svc = svc
        self.executors = executors
        self._stop_checked: dict[str, float] = {}  # run id -> monotonic time of the last journal look

    # -- helpers -----------------------------------------------------------

    def _stop_requested(self, run_id: str, *, fresh: bool = True) -> bool:
        """True when this process is stopping or ``workrun stop`` flagged the run in the journal (R-C9).

        Args:
            fresh: look in the journal now. False (the scheduling loop): at most every
                :data:`STOP_POLL_SECONDS`, so a fast chain does not re-read the run twice per call
                (each node's ``should_stop`` still looks before its call starts).
        """
        if self.svc.stopping():
            return True
        now = time.monotonic()
        if not fresh and now - self._stop_checked.get(run_id, -STOP_POLL_SECONDS) < STOP_POLL_SECONDS:
            return False
        self._stop_checked[run_id] = now
        if self.svc.journal.stop_requested(run_id):
            self.svc.request_stop()
            return True
        return False

    def _effective_ops(self, key: str, spec: WorkflowSpec, nodes: dict[str, NodeRow],
                       ops_of: Callable[[str], list[OperationRow]], seen: frozenset[str] = frozenset()) -> list[str]:
        """Succeeded operations a downstream call depends on through node ``key`` (looking through
        nodes without calls, and through a fallback that ran in its place). ``ops_of(node key)``: that
        node's operation statuses (read only for the nodes looked at, issue 14)."""
        if key in seen:
            return []
        own = [o["operation_id"] for o in ops_of(key) if o["status"] == "succeeded"]
        policy = spec.nodes[key].on_failure
        if policy.fallback and nodes[key]["handled"]:
            own += self._effective_ops(policy.fallback, spec, nodes, ops_of, seen | {key})
        if own:
            return own
        out: list[str] = []
        for dep in _deps(spec.nodes[key]):
            for o in self._effective_ops(dep, spec, nodes, ops_of, seen | {key}):
                if o not in out:
                    out.append(o)
        return out

    # -- running one node --------------------------------------------------

    def _run_node(self, run_id: str, spec: WorkflowSpec, key: str, nodes: dict[str, NodeRow] | None = None,
                  inputs: dict[str, Any] | None = None, in_place_of: list[str] | None = None) -> NodeOutcome:
        """Run one node to its outcome and journal it.

        ``nodes`` (the run's node rows when the node was scheduled: every dependency had ended) and
        ``inputs`` (the run's inputs) spare the journal reads when the caller has them. ``in_place_of``: for a
        fallback, the operations its primary's calls depended on; its own calls depend on them too, so they
        are compensated before them (R-C3, R-W4).
        """
        svc = self.svc
        node = spec.nodes[key]
        policy = node.on_failure
        if nodes is None:
            nodes = {n["node_key"]: n for n in svc.journal.nodes(run_id)}
        row = nodes[key]
        if row["status"] in NODE_ENDED or row["status"] == "waiting":
            # a fallback that ended (or waits for a person) before a restart while its primary still ran: what
            # it recorded stands; it never runs twice (the primary's thread, not the scheduler, asks for it)
            return NodeOutcome("succeeded" if row["handled"] else row["status"], row["result"],
                               None if row["status"] == "succeeded" else "recorded before the runner restarted")
        executor = self.executors[node.kind]
        fresh = row["status"] != "running"
        start = svc.now()
        if fresh:
            svc.journal.start_node(run_id, key, at=start)  # the journal writes it with the node's next write
            svc.say(run_id, key, "info", f"{key}: running")
        read: dict[str, list[OperationRow]] = {}

        def ops_of(node_key: str) -> list[OperationRow]:
            if node_key not in read:
                read[node_key] = svc.journal.operation_statuses(run_id, node_key)
            return read[node_key]

        if inputs is None:
            inputs = svc.journal.run(run_id)["inputs"]
        context: dict[str, Any] = {"inputs": inputs, "nodes": {
            k: {"result": n["result"]} for k, n in nodes.items()
            if n["status"] == "succeeded" or (n["handled"] and n["result"] is not None)}}
        if reads_data(node.templated()) or reads_data(node.on_failure.written()):  # R-K4: read when it starts
            context["data"] = run_data(svc.journal.run(run_id))
        depends_on: list[str] = list(in_place_of or [])  # a fallback's calls depend on what its primary's did
        for dep in _deps(node):
            for o in self._effective_ops(dep, spec, nodes, ops_of):
                if o not in depends_on:
                    depends_on.append(o)
        job = NodeJob(run_id=run_id, node=node, context=context, depends_on=depends_on, svc=svc,
                      should_stop=lambda: self._stop_requested(run_id), fresh=fresh)
        outcome = executor.run(job)
        if tracing.enabled():
            node_status = cast(NodeStatus, outcome.status)
            tracing.node_span(run_id, {"node_key": key, "status": node_status, "started_at": start,
                                       "ended_at": time.time()})
        if outcome.status == "failed" and policy.opens_ticket:
            return self._hand_to_a_person(run_id, spec, key, policy, outcome, context)
        handled = False
        result = outcome.result
        if outcome.status == "failed" and policy.kind == "continue":
            handled = True
            svc.say(run_id, key, "warning", f"{key}: failed ({outcome.error}); handled by on_failure = continue")
        elif outcome.status == "failed" and policy.kind == "fallback" and policy.fallback:
            svc.say(run_id, key, "warning",
                    f"{key}: failed ({outcome.error}); fallback {policy.fallback!r} runs in its place")
            fb = self._run_node(run_id, spec, policy.fallback, in_place_of=depends_on)
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

    def _hand_to_a_person(self, run_id: str, spec: WorkflowSpec, key: str, policy: FailurePolicy,
                          outcome: NodeOutcome, context: dict[str, Any]) -> NodeOutcome:
        """A failed node whose policy opens a ticket (R-M1..R-M5): the ticket policy handed in with the context
        (``svc.open_ticket``, :func:`workrun.repair.policy.open_ticket` in every surface) opens it.

        Raises:
            RuntimeError: no ticket policy was handed in (a composition bug: nothing is written).
        """
        if self.svc.open_ticket is None:
            raise RuntimeError(f"run {run_id}: node {key!r} opens a ticket but no ticket policy was handed in")
        return self.svc.open_ticket(self.svc, run_id, spec, key, policy, outcome, context)

    # -- the run -------------------------------------------------------------

    def execute(self, run_id: str) -> str:
        """Drive a ``running`` run until it succeeds, fails or is stopped; return its status.

        In-flight calls from a runner that died are settled first (R-R1, R-R3).
        Compensation is not run here; see :func:`workrun.engine.recovery.drive`.

        The scheduling loop runs in a thread of its own (``workrun-scheduler``), which runs a node itself when it
        is the only one that can run (a chain: no hand-over between threads per step, issue 14); this thread
        waits for it and looks for a stop asked from another terminal every :data:`STOP_POLL_SECONDS` meanwhile
        (R-C9), and handles the process's signals as before (it holds no lock the stop needs).

        Raises:
            JournalError: the journal cannot be written (the run stays resumable).
        """
        run = self.svc.journal.run(run_id)
        if run["status"] != "running":
            return str(run["status"])
        box: dict[str, Any] = {}
        ending = threading.Event()  # the run is being ended: a stop no longer applies (nothing runs any more)

        def drive() -> None:
            try:
                box["status"] = self._drive(run_id, run, ending)
            except BaseException as exc:  # handed to the caller's thread below
                box["error"] = exc

        scheduler = threading.Thread(target=drive, name="workrun-scheduler", daemon=True)
        scheduler.start()
        while scheduler.is_alive():
            scheduler.join(STOP_POLL_SECONDS)
            if scheduler.is_alive() and not ending.is_set() and not self.svc.stopping():
                self._stop_requested(run_id, fresh=False)
        if "error" in box:
            raise box["error"]
        return str(box["status"])

    def _drive(self, run_id: str, run: RunRow, ending: threading.Event) -> str:
        """The scheduling loop of :meth:`execute` (in its scheduler thread); returns the run's status.
        ``ending`` is set once no node runs any more and the run is ended (:meth:`finish`).

        Which nodes may start is :class:`~workrun.engine.scheduler.ReadySet`'s business and what the ended ones
        mean :class:`~workrun.engine.scheduler.Verdict`'s; this loop reads the journal (:class:`_NodeRows`),
        hands nodes to threads and waits for them."""
        svc = self.svc
        spec = _spec_of(run)
        inputs = run["inputs"]
        settle_operations(svc, run_id)
        standby = {n.on_failure.fallback for n in spec.nodes.values() if n.on_failure.fallback}
        plan = ReadySet.of({k: _deps(n) for k, n in spec.nodes.items()}, standby)
        verdict = Verdict(fail_after=spec.fail_after)
        rows = _NodeRows(svc, run_id, frozenset(standby))
        futures: dict[Task[NodeOutcome], str] = {}
        with Pool(svc.concurrency, "workrun-node") as pool:
            plan.moved(rows.refresh([]))
            verdict.resumed(rows.known)  # failed (or injected) before a restart: nothing new starts (R-W3)
            for key, n in rows.known.items():  # a node left running by a dead runner resumes where it was
                if n["status"] == "running" and key not in standby:  # a fallback: its primary's thread runs it
                    futures[pool.submit(self._run_node, run_id, spec, key, dict(rows.known), inputs)] = key
            while True:
                stopping = self._stop_requested(run_id, fresh=False)
                plan.moved(rows.refresh(verdict.take_ended()))
                if not stopping and verdict.starts_more:
                    ready = plan.ready(rows.known, futures.values(), svc.concurrency - len(futures))
                    snapshot = dict(rows.known) if ready else {}
                    if len(ready) == 1 and not futures:  # the only node that can run: run it here, no hand-over
                        verdict.node_ended(ready[0], self._run_node(run_id, spec, ready[0], snapshot, inputs))
                        continue
                    for key in ready:
                        futures[pool.submit(self._run_node, run_id, spec, key, snapshot, inputs)] = key
                if not futures:
                    break
                done = pool.wait_first(futures, timeout=0.1)
                for fut in done:
                    verdict.node_ended(futures.pop(fut), fut.result())
        ending.set()
        return self.finish(run_id, verdict.failed_node)

    def after_run(self, run_id: str) -> None:
        """Let the executor of each node kind the run's workflow uses act on a run that ended ``failed``,
        ``stopped`` or ``terminated`` (e.g. one remote cancel, R-C10). Kinds the workflow does not use are not
        asked, so their modules are never imported for it (R-P3)."""
        nodes = (self.svc.journal.run(run_id)["spec"] or {}).get("nodes") or {}
        kinds = {str(n.get("kind") or "process") for n in nodes.values() if isinstance(n, dict)}
        for kind in self.executors:
            if kind in kinds:
                self.executors[kind].after_run(self.svc, run_id)

    def finish(self, run_id: str, failed_node: str | None, *, by_ticket: tuple[str, TicketEventRow] | None = None,
               terminated_by: TicketRow | None = None) -> str:
        """End (or pause) a run and return its status.

        ``stopped`` when a stop was requested; ``terminated`` when a node's policy is ``terminate``
        (R-M5) or ``terminated_by`` is given (nothing compensated); ``failed`` (with compensation
        records, in one transaction, SPEC §10) when a node failed unhandled; ``waiting`` when a node
        waits for a person and nothing else can run (R-M1; not final); else ``succeeded``. Ending a
        run ends its waiting nodes and terminates its pending tickets in the same transaction (R-M7).

        Args:
            by_ticket: ``(ticket_id, event)`` of an operator's ``tickets terminate``: that ticket and
                its node end in the same transaction as the run (R-M6).
            terminated_by: the ticket whose ending makes the run ``terminated`` rather than failed.
        """
        svc = self.svc
        nodes = svc.journal.nodes(run_id)
        now = svc.now()
        run = svc.journal.run(run_id)

        def end(status: str, reason: str | None, records: list[CompensationRow] | None = None) -> None:
            if by_ticket is not None:
                svc.journal.end_run_by_ticket(by_ticket[0], by_ticket[1], status, at=now, reason=reason,
                                              compensations=records or [])
            else:
                svc.journal.end_run(run_id, status, at=now, reason=reason, compensations=records or [])
            metrics.count_run(status)
            if tracing.enabled():
                tracing.run_span(svc.journal.run(run_id))

        if svc.stopping() or any(n["status"] == "stopped" for n in nodes):
            # nodes a dead runner left running (``workrun stop`` of an orphaned run) end stopped too
            end("stopped", "stopped by the user")
            if any(o["status"] == "succeeded" for o in svc.journal.operation_statuses(run_id)):
                svc.say(run_id, None, "warning", "run stopped by the user: side effects of calls that succeeded were "
                        f"NOT undone (no compensation ran); `workrun compensate {run_id}` undoes them")
            else:
                svc.say(run_id, None, "warning", "run stopped by the user: no call had succeeded, so there is "
                        "nothing to undo (side effects of a stopped call are NOT undone)")
            self.after_run(run_id)
            return "stopped"
        tickets = svc.journal.tickets(run_id)
        ended_by = terminated_by or next((t for t in tickets if t["policy"] == "terminate"), None)
        if ended_by is not None:
            how = ("on_failure = terminate" if terminated_by is None
                   else "terminated by an operator without compensation")
            end("terminated", f"node {ended_by['node_key']!r} failed ({how})")
            svc.say(run_id, None, "error", f"run terminated: node {ended_by['node_key']!r} failed ({how}, ticket "
                    f"{ended_by['ticket_id']}); nothing was compensated: `workrun compensate {run_id}` undoes its "
                    "calls on request")
            self.after_run(run_id)
            return "terminated"
        if failed_node is None and any(n["status"] == "failed" and not n["handled"] for n in nodes):
            failed_node = next(n["node_key"] for n in nodes if n["status"] == "failed" and not n["handled"])
        if failed_node is not None:
            records = [] if run["eval"] else plan_records(svc.journal.operations(run_id), now)
            injected = any(n["node_key"] == failed_node and n["status"] == "succeeded" for n in nodes)
            why = (f"failure injected after node {failed_node!r} succeeded" if injected
                   else f"node {failed_node!r} failed")
            end("failed", why, records)
            svc.say(run_id, None, "error", f"run failed: {why}"
                    + (" (evaluation run: no compensation, R-W6)" if run["eval"] else ""))
            for r in records:
                if r["status"] == "skipped":
                    metrics.count_compensation("skipped")
                text = f"compensation {r['compensation_id']} of {r['node_key']}: {r['status']}"
                with logs.about(r):
                    svc.say(run_id, r["node_key"], "info", text + (f" ({r['reason']})" if r["reason"] else ""))
            self.after_run(run_id)
            return "failed"
        if any(n["status"] == "waiting" for n in nodes):
            waiting = [t for t in tickets if t["status"] == "pending"]
            svc.journal.pause_run(run_id, reason="waiting for a person: "
                                  + ", ".join(t["ticket_id"] for t in waiting), at=now)
            svc.say(run_id, None, "warning", "run waiting for a person: " + "; ".join(
                f"ticket {t['ticket_id']} ({t['node_key']}): `workrun tickets resume {t['ticket_id']}` or "
                f"`workrun tickets terminate {t['ticket_id']}`" for t in waiting))
            return "waiting"
        end("succeeded", None)
        svc.say(run_id, None, "info", "run succeeded")
        return "succeeded"
