"""The read commands' work, without typer (R-P3): ``runs list|show``, ``compensations list|show``.

The typer commands in ``runs.py`` and ``compensations.py`` call these, and so does the quick path
(:mod:`workrun.cli.quick`), which runs them without importing typer at all. They open only the
journal (:func:`viewing`): no App runner, no engine, no pydantic; rich only for text output.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from workrun.cli.output import console, escape, print_compensations, print_json, print_list, run_table, styled
from workrun.core.errors import UsageError
from workrun.core.states import COMPENSATION_STATUSES

if TYPE_CHECKING:
    pass

__all__ = ["list_compensations", "list_runs", "show_compensation", "show_run", "viewing"]


from workrun.app.session import viewing

TABLE_LIMIT = 50
"""Runs shown by ``workrun runs list`` without ``--limit`` (``--json`` shows all)."""


def list_runs(json_mode: bool, limit: int | None, all_runs: bool = False) -> None:
    """``workrun runs list``: runs, newest first: at most ``limit`` (None: :data:`TABLE_LIMIT` in the table,
    all in JSON). With ``all_runs``, ``workrun verify``'s runs too: the table says ``(verify)`` after their
    workflow, the JSON has ``"verify": true``; likewise ``(eval)`` for an evaluation run (``"eval": true``).

    Raises:
        UsageError: ``limit`` is below 1 (exit 2).
    """
    from workrun.app.views import rollup_line, runs_list

    if limit is not None and limit < 1:
        raise UsageError(f"must be at least 1, not {limit}", field="--limit")
    with viewing() as journal:
        rows = runs_list(journal, limit=limit if limit is not None else None if json_mode else TABLE_LIMIT,
                         verify=None if all_runs else False)
    if json_mode:
        print_json(rows)
        return
    if not rows:
        print("no runs yet")
        return
    print_list(["run", "workflow", "status", "compensation", "started (UTC)"],
               [[r["run_id"], r["workflow"] + (" (verify)" if r.get("verify") else "")
                 + (" (eval)" if r.get("eval") else ""), r["status"],
                 rollup_line(r) or "-", (r["started_at"] or "-")[:19].replace("T", " ")] for r in rows],
               status_column=2)


def show_run(run_id: str, json_mode: bool) -> None:
    """``workrun runs show RUN``: nodes with their messages, calls, and each call's compensation.

    Raises:
        NotFoundError: no run matches ``run_id`` (exit 2).
    """
    from workrun.app.views import iso, rollup_line, run_detail, unfinished_hint, unknown_calls_line

    with viewing() as journal:
        view = run_detail(journal, run_id)
        audit = [e for e in journal.events_of_run(view["run_id"]) if not e.get("compensation_id")]
    if json_mode:
        print_json(view)
        return
    console.print(run_table(view))
    if view["compensation"]:
        console.print(rollup_line(view))
    unknown = unknown_calls_line(view)
    if unknown:  # R-R3: shown for an operator
        console.print(f"[yellow]{escape(unknown)}[/]")
    for m in view["messages"]:
        console.print(f"[dim]{m['at']}[/] run: {escape(m['text'])}")
    for e in audit:  # run-level operator actions, who and why (R-O2, R-D4: stop, compensate, rerun...)
        console.print(f"[dim]{iso(e['at'])}[/] operator: {escape(e['action'])} by {escape(e['actor'] or '?')}"
                      + (f": {escape(e.get('text') or '')}" if e.get("text") else ""))
    for node in view["nodes"]:
        console.print(f"\n[bold]{escape(node['node_key'])}[/] {styled(node['status'])}")
        for m in node["messages"]:
            console.print(f"  [dim]{m['at']}[/] {escape(m['text'])}")
    for t in view["remote_tasks"]:
        console.print(f"\nremote task of {t['node_key']}: {t['task_id']} state {t['state']}; cancel: "
                      f"{t['cancel_status'] or 'not sent'} {escape(t['cancel_answer'] or '')}")
    for t in view.get("tickets", []):
        action = t["action"]
        console.print(f"\nticket {t['ticket_id']} {styled(t['status'])} node {escape(t['node_key'])} (on_failure = "
                      f"{t['policy']}): {escape(t['error'] or '')}"
                      + (f"; action {styled(action['status'])} ({len(action['attempts'])} attempt(s))"
                         if action else ""))
        if t["status"] == "pending":
            console.print(f"  `workrun tickets resume {t['ticket_id']}` or "
                          f"`workrun tickets terminate {t['ticket_id']}`")
    if view["unfinished_compensations"]:
        unfinished = len(view["unfinished_compensations"])
        console.print(f"\n[yellow]compensation not finished[/] for {unfinished} operation(s): "
                      f"{escape(unfinished_hint(view))}; `workrun compensations list --run {view['run_id']}` "
                      "lists them")


def list_compensations(status: str | None, run: str | None, json_mode: bool, workflow: str | None = None,
                       all_runs: bool = False) -> None:
    """``workrun compensations list``: compensations (all runs but those of ``workrun verify`` unless ``all_runs``,
    or of a run or a workflow), oldest first.

    Raises:
        UsageError: ``status`` is not a compensation status (exit 2).
    """
    from workrun.app.views import compensations_list

    if status is not None and status not in COMPENSATION_STATUSES:
        raise UsageError(f"unknown status {status!r} (one of: {', '.join(COMPENSATION_STATUSES)})", field="--status")
    if run == "":
        raise UsageError("an empty run id matches nothing", field="--run")
    if workflow == "":
        raise UsageError("an empty workflow name matches nothing", field="--workflow")
    with viewing() as journal:
        rows = compensations_list(journal, status=status, run=run, workflow=workflow, all_runs=all_runs)
    if json_mode:
        print_json(rows)
    elif not rows:
        print("no compensations")
    else:
        print_compensations(rows)


def show_compensation(compensation_id: str, json_mode: bool) -> None:
    """``workrun compensations show ID``: the original call, attempts, notes and operator actions, in time order.

    Raises:
        NotFoundError: no compensation matches ``compensation_id`` (exit 2).
    """
    from workrun.app.views import compensation_detail, iso, operator_commands

    with viewing() as journal:
        view = compensation_detail(journal, compensation_id)
        op = journal.operation(view["operation_id"])
    if json_mode:
        print_json(view)
        return
    console.print(f"[bold]compensation {view['compensation_id']}[/] {styled(view['status'])}  "
                  f"run {view['run_id']} node {escape(view['node_key'] or '-')}")
    if view["reason"]:
        console.print(f"reason: {escape(view['reason'])}")
    from workrun.effects import for_operation

    what = for_operation(op).describe(op)
    console.print(f"original operation {op['operation_id']} of {what}: {op['status']}, ended {iso(op['ended_at'])}")
    action = (view["context"] or {}).get("reverse_action")
    if action:
        console.print(f"  reverse action: {escape(action['method'])} {escape(action['url'])}")
    console.print(f"  input:  {escape(json.dumps(op['input'], ensure_ascii=False))}\n"
                  f"  result: {escape(json.dumps(op['result'], ensure_ascii=False))}")
    timeline: list[tuple[str, str]] = []
    for a in view["attempts"]:
        text = (f"attempt {a['number']} ({a['trigger']}): {styled(a['status'])}"
                + (f", exit {a['exit_code']}" if a["exit_code"] is not None else "")
                + (f", signal {a['signal']}" if a["signal"] else "")
                + (f", HTTP {a['http_status']}" if a.get("http_status") is not None else "")
                + (f" — {escape(a['error'])}" if a["error"] else ""))
        timeline.append((a["started_at"], text))
        for stream in ("stdout", "stderr"):  # what the script printed too (new-user review: stdout was not shown)
            for line in (a.get(f"{stream}_tail") or "").strip().splitlines()[-3:]:
                timeline.append((a["started_at"], f"    {stream}: {escape(line)}"))
        for line in (a.get("response_tail") or "").strip().splitlines()[:3]:  # a reverse action's answer (R-H7)
            timeline.append((a["started_at"], f"    response: {escape(line[:200])}"))
    for e in view["events"]:
        args = ", ".join(f"{k}={v}" for k, v in (e["args"] or {}).items() if v is not None)
        timeline.append((e["at"], f"{e['action']}" + (f" ({escape(args)})" if args else "")
                         + f" by {escape(e['actor'])}"
                         + (f": {escape(e['text'])}" if e["text"] else "")
                         + (f" \\[attachment {escape(e['attachment'])}]" if e["attachment"] else "")))
    for at, text in sorted(timeline, key=lambda t: t[0] or ""):
        console.print(f"  [dim]{at}[/] {text}")
    auto = sum(1 for a in view["attempts"] if a["trigger"] == "auto")
    operator_made = len(view["attempts"]) - auto
    console.print(f"attempts: {auto} automatic of at most {view['max_attempts']}"
                  + (f", {operator_made} by an operator" if operator_made else ""))
    todo = operator_commands(view["compensation_id"], view["status"], view["held_back_by"])
    if todo:  # what a person can do with it now
        console.print(f"next: {escape(todo)}")
