"""Machine views of journal rows: the JSON of SPEC §9 (``runs show --json``, ``compensations list --json``).

Pure functions of journal rows; the CLI prints them as JSON or turns them into tables.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from workrun.journal import Journal
from workrun.states import COMPENSATION_DONE, OPERATION_ENDED

__all__ = ["attempt_view", "compensation_view", "iso", "run_summary", "run_view"]


def iso(ts: float | None) -> str | None:
    """Epoch seconds -> ISO 8601 UTC with microseconds (sortable as text), or None."""
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="microseconds")


def attempt_view(a: dict[str, Any]) -> dict[str, Any]:
    """One attempt: ``{number, started_at, ended_at, exit_code, signal, stderr_tail, trigger, status, error,
    result}``."""
    return {"number": a["number"], "started_at": iso(a["started_at"]), "ended_at": iso(a["ended_at"]),
            "exit_code": a["exit_code"], "signal": a["signal"], "stderr_tail": a["stderr_tail"] or "",
            "trigger": a["trigger"], "status": a["status"], "error": a["error"], "result": a["result"]}


def compensation_view(c: dict[str, Any], attempts: list[dict[str, Any]]) -> dict[str, Any]:
    """One compensation as in SPEC §9, plus the context it was given and its timestamps."""
    return {"compensation_id": c["compensation_id"], "status": c["status"],
            "attempts": [attempt_view(a) for a in attempts], "result": c["result"], "reason": c["reason"],
            "max_attempts": c["max_attempts"], "held_back_by": c["held_back_by"] or [],
            "accept_code_change": bool(c["accept_code_change"]), "context": c["context"],
            "next_attempt_at": iso(c["next_attempt_at"]), "created_at": iso(c["created_at"]),
            "updated_at": iso(c["updated_at"])}


def run_summary(run: dict[str, Any]) -> dict[str, Any]:
    """``{run_id, workflow, workflow_path, status, started_at, ended_at, eval, rerun_of}`` (``runs list --json``)."""
    return {"run_id": run["run_id"], "workflow": run["workflow"], "workflow_path": run["workflow_path"],
            "status": run["status"], "started_at": iso(run["created_at"]), "ended_at": iso(run["ended_at"]),
            "eval": bool(run["eval"]), "rerun_of": run["rerun_of"]}


def run_view(journal: Journal, run_id: str) -> dict[str, Any]:
    """The whole run as one JSON object (SPEC §9), with ``unfinished_compensations`` and remote tasks.

    Raises:
        NotFoundError: unknown run id (a unique prefix is accepted).
    """
    run = journal.run(run_id)
    run_id = run["run_id"]
    messages = journal.messages(run_id)
    comps = {c["operation_id"]: c for c in journal.compensations(run_id)}
    attempts: dict[str, list[dict[str, Any]]] = {}
    for a in journal.attempts_of_run(run_id):
        attempts.setdefault(a["compensation_id"], []).append(a)

    def msgs(key: str | None) -> list[dict[str, Any]]:
        return [{"at": iso(m["at"]), "level": m["level"], "text": m["text"]} for m in messages
                if m["node_key"] == key]

    nodes = [{"node_key": n["node_key"], "status": n["status"], "handled": bool(n["handled"]),
              "result": n["result"], "started_at": iso(n["started_at"]), "ended_at": iso(n["ended_at"]),
              "messages": msgs(n["node_key"])} for n in journal.nodes(run_id)]
    operations = []
    for op in journal.operations(run_id):
        c = comps.get(op["operation_id"])
        status = op["status"] if op["status"] in OPERATION_ENDED else "running"
        operations.append({
            "operation_id": op["operation_id"], "node_key": op["node_key"], "tool_call_index": op["tool_call_index"],
            "app": op["app"], "kind": op["kind"], "tool": op["tool_name"], "status": status,
            "input": op["input"], "result": op["result"], "resources": op["resources"],
            "depends_on": op["depends_on"], "fingerprint": op["fingerprint"], "error": op["error"],
            "exit_code": op["exit_code"], "signal": op["signal"],
            "started_at": iso(op["started_at"] or op["created_at"]), "ended_at": iso(op["ended_at"]),
            "stdout_tail": op["stdout_tail"] or "", "stderr_tail": op["stderr_tail"] or "",
            "compensation": compensation_view(c, attempts.get(c["compensation_id"], [])) if c else None,
        })
    unfinished = [c["compensation_id"] for c in comps.values() if c["status"] not in COMPENSATION_DONE]
    return {**run_summary(run), "inputs": run["inputs"], "reason": run["reason"],
            "stop_requested": bool(run["stop_requested"]), "messages": msgs(None), "nodes": nodes,
            "operations": operations, "unfinished_compensations": unfinished,
            "remote_tasks": [{k: t[k] for k in ("node_key", "url", "task_id", "state", "cancel_status",
                                                  "cancel_answer")} for t in journal.remote_tasks(run_id)]}
