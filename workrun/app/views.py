"""Machine views of journal rows: the JSON of SPEC §9 (``runs show --json``, ``compensations list --json``).

Pure functions of journal rows; the CLI prints them as JSON or turns them into tables.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from workrun.core.rows import AttemptRow, CompensationRow, RunRow, TicketRow
from workrun.core.states import COMPENSATION_DONE, COMPENSATION_STATUSES, OPERATION_ENDED, TICKET_STATUSES
from workrun.journal import Journal

__all__ = ["COMPENSATION_STATUSES", "TICKET_STATUSES", "attempt_view", "compensation_detail", "compensation_full",
           "compensation_rollup", "compensation_view", "compensations_list", "iso", "not_undone_rollup",
           "operator_commands", "rollup_line", "uncompensated_calls", "unfinished_hint", "unknown_calls_line",
           "run_detail", "run_summary", "run_view", "runs_list", "ticket_view", "tickets_list",
           "with_rollup"]


def iso(ts: float | None) -> str | None:
    """Epoch seconds -> ISO 8601 UTC with microseconds (sortable as text), or None."""
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="microseconds")


def attempt_view(a: AttemptRow, connector: str | None = None) -> dict[str, Any]:
    """One attempt: ``{number, started_at, ended_at, exit_code, signal, stderr_tail, stdout_tail, http_status,
    response_tail, smtp_code, connector, trigger, status, error, result}`` (``http_status``/``response_tail`` for
    a reverse action, R-H7; ``connector``: the connector its request went through, R-K1, else None)."""
    return {"number": a["number"], "started_at": iso(a["started_at"]), "ended_at": iso(a["ended_at"]),
            "exit_code": a["exit_code"], "signal": a["signal"], "stderr_tail": a["stderr_tail"] or "",
            "stdout_tail": a.get("stdout_tail") or "",
            "http_status": a.get("http_status"), "response_tail": a.get("response_tail"),
            "smtp_code": a.get("smtp_code"), "connector": connector,
            "trigger": a["trigger"], "status": a["status"], "error": a["error"], "result": a["result"]}


def _connector_of(request: Any) -> str | None:
    """The connector a request (a reverse action, a ticket action, an http call's input) names, or None (R-K1)."""
    name = request.get("connector") if isinstance(request, dict) else None
    return name if isinstance(name, str) else None


def _operation_connector(op: Any) -> str | None:
    """The connector an operation's request went through (R-K1), else None: asked of its effect only when its input
    names one (a read command imports no effect for the runs of most workflows, R-P3)."""
    if _connector_of(op["input"]) is None:
        return None
    from workrun.effects import operation_connector

    return operation_connector(op)


def compensation_view(c: CompensationRow, attempts: list[AttemptRow]) -> dict[str, Any]:
    """One compensation as in SPEC §9, plus the context it was given and its timestamps."""
    connector = _connector_of((c["context"] or {}).get("reverse_action") if isinstance(c["context"], dict) else None)
    return {"compensation_id": c["compensation_id"], "status": c["status"],
            "attempts": [attempt_view(a, connector) for a in attempts], "result": c["result"], "reason": c["reason"],
            "max_attempts": c["max_attempts"], "held_back_by": c["held_back_by"] or [],
            "accept_code_change": bool(c["accept_code_change"]), "context": c["context"],
            "next_attempt_at": iso(c["next_attempt_at"]), "created_at": iso(c["created_at"]),
            "updated_at": iso(c["updated_at"])}


def operator_commands(compensation_id: str, status: str, held_back_by: list[str] | tuple[str, ...] = ()) -> str:
    """What a person can do next with a compensation that is not done, by its status (the hints of ``run``,
    ``runs show`` and ``compensate --dry-run``; SPEC §10's commands), e.g. ``failed: `workrun compensations retry
    cmp_1` or `workrun compensations resolve cmp_1```; for one ``blocked`` behind others, which. Empty for one
    that ``workrun resume`` goes on with (``pending``, ``running``)."""
    cmd = "`workrun compensations"
    if status == "failed":
        return f"{status}: {cmd} retry {compensation_id}` or {cmd} resolve {compensation_id}`"
    if status == "unknown":
        return (f"{status}: {cmd} confirm {compensation_id} --done` (or `--not-done`) or "
                f"{cmd} resolve {compensation_id}`")
    if status == "blocked" and held_back_by:
        return f"held back by {', '.join(held_back_by)} until they are done"
    if status == "blocked":  # held back by no other: its App's code changed since the call (R-C8)
        return (f"{status}, its App's code changed since the call: {cmd} retry {compensation_id} "
                f"--accept-code-change` (runs the code as it is now) or {cmd} resolve {compensation_id}`")
    return ""


def unknown_calls_line(view: dict[str, Any]) -> str:
    """One line for a run view whose calls ended ``unknown`` (R-R3: shown for an operator), e.g. "outcome unknown:
    op_1 (pay): never re-sent, and not compensated; verify outside whether it took effect"; empty when none."""
    unknown = [f"{op['operation_id']} ({op['node_key'] or op['app']})" for op in view["operations"]
               if op["status"] == "unknown"]
    if not unknown:
        return ""
    return (f"outcome unknown: {', '.join(unknown)}: never re-sent, and not compensated; verify outside whether "
            f"{'it' if len(unknown) == 1 else 'each'} took effect")


def unfinished_hint(view: dict[str, Any]) -> str:
    """One line for a run view (``runs show --json``'s shape) whose compensations are not all done: how many
    ``workrun resume`` goes on with, and what each other one waits for (:func:`operator_commands`). Empty when
    every compensation is done."""
    unfinished = set(view["unfinished_compensations"])
    comps = [o["compensation"] for o in view["operations"]
             if o["compensation"] and o["compensation"]["compensation_id"] in unfinished]
    todo = [(c["compensation_id"], operator_commands(c["compensation_id"], c["status"], c["held_back_by"]))
            for c in comps]
    pending = sum(1 for _, what in todo if not what)
    parts = [f"`workrun resume` goes on with {pending} of them"] if pending else []
    parts += [f"{cid} {what}" for cid, what in todo if what]
    return "; ".join(parts)


def run_summary(run: RunRow) -> dict[str, Any]:
    """``{run_id, workflow, workflow_path, status, started_at, ended_at, eval, verify, rerun_of}`` (``runs list
    --json``; ``verify``: a run of ``workrun verify``, R-V1)."""
    return {"run_id": run["run_id"], "workflow": run["workflow"], "workflow_path": run["workflow_path"],
            "status": run["status"], "started_at": iso(run["created_at"]), "ended_at": iso(run["ended_at"]),
            "eval": bool(run["eval"]), "verify": bool(run.get("verify")), "rerun_of": run["rerun_of"]}


def run_view(journal: Journal, run_id: str) -> dict[str, Any]:
    """The whole run as one JSON object (SPEC §9), with ``unfinished_compensations`` and remote tasks.

    Raises:
        NotFoundError: unknown run id (a unique prefix is accepted).
    """
    run = journal.run(run_id)
    run_id = run["run_id"]
    messages = journal.messages(run_id)
    comps = {c["operation_id"]: c for c in journal.compensations(run_id)}
    attempts: dict[str, list[AttemptRow]] = {}
    for a in journal.attempts_of_run(run_id):
        attempts.setdefault(a["compensation_id"], []).append(a)

    by_node: dict[str | None, list[dict[str, Any]]] = {}  # each node's messages, in order: one pass, not one per node
    for m in messages:
        by_node.setdefault(m["node_key"], []).append({"at": iso(m["at"]), "level": m["level"], "text": m["text"]})

    def msgs(key: str | None) -> list[dict[str, Any]]:
        return by_node.get(key, [])

    nodes = [{"node_key": n["node_key"], "status": n["status"], "handled": bool(n["handled"]),
              "result": n["result"], "started_at": iso(n["started_at"]), "ended_at": iso(n["ended_at"]),
              "messages": msgs(n["node_key"])} for n in journal.nodes(run_id)]
    operations = []
    for op in journal.operation_views(run_id):
        c = comps.get(op["operation_id"])
        status = op["status"] if op["status"] in OPERATION_ENDED else "running"
        operations.append({
            "operation_id": op["operation_id"], "node_key": op["node_key"], "tool_call_index": op["tool_call_index"],
            "app": op["app"], "kind": op["kind"], "tool": op["tool_name"], "status": status,
            "connector": _operation_connector(op),
            "input": op["input"], "result": op["result"], "resources": op["resources"],
            "depends_on": op["depends_on"], "fingerprint": op["fingerprint"], "error": op["error"],
            "exit_code": op["exit_code"], "signal": op["signal"],
            "started_at": iso(op["started_at"] or op["created_at"]), "ended_at": iso(op["ended_at"]),
            "stdout_tail": op["stdout_tail"] or "", "stderr_tail": op["stderr_tail"] or "",
            "compensation": compensation_view(c, attempts.get(c["compensation_id"], [])) if c else None,
        })
    unfinished = [c["compensation_id"] for c in comps.values() if c["status"] not in COMPENSATION_DONE]
    data = run.get("data")
    return {**run_summary(run), "inputs": run["inputs"], "data": data if isinstance(data, dict) else run["inputs"],
            "reason": run["reason"],
            "stop_requested": bool(run["stop_requested"]), "messages": msgs(None), "nodes": nodes,
            "operations": operations, "unfinished_compensations": unfinished,
            "remote_tasks": [{k: t[k] for k in ("node_key", "url", "task_id", "state", "cancel_status",
                                                  "cancel_answer")} for t in journal.remote_tasks(run_id)],
            "tickets": [ticket_view(journal, t) for t in journal.tickets(run_id)]}


def ticket_view(journal: Journal, t: TicketRow) -> dict[str, Any]:
    """One ticket as in SPEC §12: ``ticket_id``, ``run_id``, ``node_key``, ``status``, ``error``, ``action``
    (null or ``{status, attempts, result, reason, request, max_attempts}``), ``history`` (every event:
    ``{at, actor, action, args, text, attachment}``), plus ``policy``, ``notifications`` and timestamps.

    An attempt is ``{number, started_at, ended_at, http_status, response_tail, trigger, status, error}`` (R-H7).
    """
    tid = t["ticket_id"]
    a = journal.ticket_action(tid)
    action = None
    if a is not None:
        action = {"status": a["status"], "result": a["result"], "reason": a["reason"], "request": a["request"],
                  "max_attempts": a["max_attempts"], "next_attempt_at": iso(a["next_attempt_at"]),
                  "attempts": [{"number": x["number"], "started_at": iso(x["started_at"]),
                                "ended_at": iso(x["ended_at"]), "http_status": x["http_status"],
                                "smtp_code": x.get("smtp_code"), "connector": _connector_of(a["request"]),
                                "response_tail": x["response_tail"] or "", "trigger": x["trigger"],
                                "status": x["status"], "error": x["error"]} for x in journal.ticket_attempts(tid)]}
    return {"ticket_id": tid, "run_id": t["run_id"], "node_key": t["node_key"], "policy": t["policy"],
            "status": t["status"], "error": t["error"], "result": t["result"], "action": action,
            "history": [{"at": iso(e["at"]), "actor": e["actor"], "action": e["action"], "args": e["args"],
                         "text": e["text"], "attachment": e["attachment"]} for e in journal.ticket_events(tid)],
            "notifications": [{"notification_id": n["notification_id"], "status": n["status"],
                               "message": n["message"], "http_status": n["http_status"], "error": n["error"]}
                              for n in journal.notifications(t["run_id"]) if n["ticket_id"] == tid],
            "created_at": iso(t["created_at"]), "updated_at": iso(t["updated_at"])}


def tickets_list(journal: Journal, *, status: str | None = None, run: str | None = None,
                 workflow: str | None = None) -> list[dict[str, Any]]:
    """``tickets list --json`` and ``/api/tickets`` (SPEC §12): :func:`ticket_view` of each ticket, oldest first,
    of the given status, run and workflow name (None: any; R-D1).

    Raises:
        NotFoundError: ``run`` matches no run (a unique prefix is accepted).
    """
    run_id = journal.run(run)["run_id"] if run else None
    return [ticket_view(journal, t) for t in journal.list_tickets(status, run_id, workflow)]



# -- run-level compensation roll-up (SPEC §16) and the list views shared by CLI and dashboard (R-U7) --------

_ATTENTION = ("failed", "blocked", "unknown")  # states.COMPENSATION_HOLDING, in the order people read them


def compensation_rollup(counts: dict[str, int]) -> dict[str, Any]:
    """The run-level roll-up of SPEC §16 from ``{status: count}`` of the run's compensations.

    Returns:
        ``{"compensation": None | "in_progress" | "complete" | "needs_attention", "compensation_counts":
        {status: n for all seven statuses}}``: ``None`` when nothing is owed (no compensation records);
        ``needs_attention`` when any is failed, blocked or unknown; ``in_progress`` when any is pending or
        running (and none needs attention); ``complete`` when every one succeeded or was skipped.
    """
    full = {s: int(counts.get(s, 0)) for s in COMPENSATION_STATUSES}
    if not any(full.values()):
        state = None
    elif any(full[s] for s in _ATTENTION):
        state = "needs_attention"
    elif full["pending"] or full["running"]:
        state = "in_progress"
    else:
        state = "complete"
    return {"compensation": state, "compensation_counts": full}


def not_undone_rollup(calls: int) -> dict[str, Any]:
    """The roll-up of a stopped run whose succeeded calls were not undone (R-L6): ``{"compensation":
    "not_undone", "compensation_counts": {"calls": N}}`` (N: its succeeded calls whose config has a
    compensation)."""
    return {"compensation": "not_undone", "compensation_counts": {"calls": calls}}


def uncompensated_calls(journal: Journal, run_id: str) -> int:
    """How many succeeded calls of a run have a compensation in their config snapshot (a script or a reverse
    action) but no compensation record: what ``workrun compensate RUN`` would undo (R-L6)."""
    return sum(1 for op in journal.operations(run_id)
               if op["status"] == "succeeded" and (op["config"] or {}).get("compensation"))


def rollup_line(rollup: dict[str, Any]) -> str:
    """One line for people: "compensated: 3 of 3", "needs attention: 1 failed, 1 blocked", "not undone: 2
    calls — workrun compensate RUN", … ("" when none)."""
    state, counts = rollup["compensation"], rollup["compensation_counts"]
    if state == "not_undone":
        return f"not undone: {counts['calls']} calls — workrun compensate {rollup.get('run_id', 'RUN')}"
    total = sum(counts.values())
    done = counts["succeeded"] + counts["skipped"]
    if state is None:
        return ""
    if state == "complete":
        return f"compensated: {done} of {total}"
    if state == "in_progress":
        return f"compensating: {done} of {total} done"
    return "needs attention: " + ", ".join(f"{counts[s]} {s}" for s in _ATTENTION if counts[s])


def with_rollup(summary: dict[str, Any], counts: dict[str, int], journal: Journal | None = None) -> dict[str, Any]:
    """``summary`` (a run summary or view) with the SPEC §16 roll-up keys added; a stopped run with no
    compensation records whose succeeded calls have compensations says ``not_undone`` (R-L6; needs ``journal``).
    """
    if journal is not None and summary.get("status") == "stopped" and not any(counts.values()):
        calls = uncompensated_calls(journal, summary["run_id"])
        if calls:
            return {**summary, **not_undone_rollup(calls)}
    return {**summary, **compensation_rollup(counts)}


def runs_list(journal: Journal, *, status: str | None = None, workflow: str | None = None,
              limit: int | None = None, offset: int = 0, verify: bool | None = None, text: str | None = None,
              since: float | None = None, until: float | None = None, sort: str = "started",
              descending: bool = True) -> list[dict[str, Any]]:
    """``runs list --json`` and ``/api/runs``: run summaries with the roll-up, newest first (SPEC §10, §16).

    Args:
        status, workflow: exact filters (None: all); limit/offset: pagination (None: every run).
        verify: False leaves ``workrun verify``'s runs out (``runs list`` without ``--all``, R-V1); None: all.
        text, since, until, sort, descending: the dashboard's find (R-D1, see the journal's ``run_summaries``).
    """
    rows = journal.run_summaries(status=status, workflow=workflow, limit=limit, offset=offset, verify=verify,
                                 text=text, since=since, until=until, sort=sort, descending=descending)
    counts = journal.compensation_counts([r["run_id"] for r in rows] if limit is not None or offset else None)
    return [with_rollup(run_summary(r), counts.get(r["run_id"], {}), journal) for r in rows]


def run_detail(journal: Journal, run_id: str) -> dict[str, Any]:
    """``runs show --json`` and ``/api/runs/{id}``: :func:`run_view` plus the SPEC §16 roll-up.

    Raises:
        NotFoundError: unknown run id (a unique prefix is accepted).
    """
    view = run_view(journal, run_id)
    counts: dict[str, int] = {}
    for op in view["operations"]:
        if op["compensation"]:
            counts[op["compensation"]["status"]] = counts.get(op["compensation"]["status"], 0) + 1
    return with_rollup(view, counts, journal)


def compensation_full(journal: Journal, c: CompensationRow) -> dict[str, Any]:
    """One compensation row as in ``compensations list --json``: the §9 object plus ``operation_id``,
    ``run_id``, ``node_key`` and its operator ``events``."""
    view = compensation_view(c, journal.attempts(c["compensation_id"]))
    view.update(operation_id=c["operation_id"], run_id=c["run_id"], node_key=c["node_key"])
    view["events"] = [{"at": iso(e["at"]), "actor": e["actor"], "action": e["action"], "args": e["args"],
                       "text": e["text"], "attachment": e["attachment"]}
                      for e in journal.events(c["compensation_id"])]
    return view


def compensations_list(journal: Journal, *, status: str | None = None, run: str | None = None,
                       workflow: str | None = None, all_runs: bool = False) -> list[dict[str, Any]]:
    """``compensations list --json`` and ``/api/compensations`` (SPEC §9), oldest first, of the given status, run
    and workflow name (None: any; R-D1); those of the runs of ``workrun verify`` only with ``all_runs`` or when
    ``run`` names one (as ``runs list`` leaves those runs out, R-V1).

    Raises:
        NotFoundError: ``run`` matches no run (a unique prefix is accepted).
    """
    run_id = journal.run(run)["run_id"] if run else None
    rows = journal.list_compensations(status, run_id, workflow, verify=all_runs or run_id is not None)
    return [compensation_full(journal, c) for c in rows]


def compensation_detail(journal: Journal, compensation_id: str) -> dict[str, Any]:
    """``compensations show ID --json``: :func:`compensation_full` plus the original ``operation``.

    Raises:
        NotFoundError: unknown id or ambiguous prefix.
    """
    c = journal.compensation(compensation_id)
    op = journal.operation(c["operation_id"])
    return {**compensation_full(journal, c), "operation": {k: op[k] for k in (
        "operation_id", "app", "project", "input", "result", "resources", "fingerprint", "status")}}
