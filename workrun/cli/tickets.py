"""``workrun tickets list|show|resume|retry|note|resolve|terminate|confirm`` (SPEC §12, R-M6).

Refusals exit 2 with one line and change nothing: each action is checked read-only
before the scheduler lock is taken (and before any unfinished work is resumed), and
again under the lock.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import typer

from workrun.cli.common import JsonOpt, WaitOpt, finish_run, reading, run_claim, scheduling
from workrun.cli.output import console, escape, print_json, styled
from workrun.core.errors import UsageError
from workrun.core.states import TICKET_STATUSES

__all__ = ["app"]

app = typer.Typer(no_args_is_help=True, help="Tickets: nodes that wait for a person (manual repair).")

IdArg = typer.Argument(..., metavar="TICKET", help="Ticket id (tkt_…) or unique prefix.")


def _print_ticket_line(t: dict[str, Any]) -> None:
    action = t["action"]
    tail = f"; action {styled(action['status'])} ({len(action['attempts'])} attempt(s))" if action else ""
    console.print(f"{t['ticket_id']} {styled(t['status'])} run {t['run_id']} node {escape(t['node_key'])} "
                  f"({t['policy']}){tail}: {escape(t['error'] or '')}")


def _run_outcome(svc: Any, run_id: str, json_mode: bool) -> int:
    code = finish_run(svc, run_id, json_mode)
    return 130 if svc.stopping() else code


@app.command("list")
def list_tickets(
    status: Optional[str] = typer.Option(None, "--status", help="Only this status (pending, resolved, terminated)."),
    run: Optional[str] = typer.Option(None, "--run", help="Only this run (id or unique prefix)."),
    workflow: Optional[str] = typer.Option(None, "--workflow", help="Only runs of this workflow (its name)."),
    json_mode: bool = JsonOpt,
) -> None:
    """List tickets (all runs), oldest first."""
    from workrun.app.views import tickets_list

    if status is not None and status not in TICKET_STATUSES:
        raise UsageError(f"unknown status {status!r} (one of: {', '.join(TICKET_STATUSES)})", field="--status")
    if run == "":
        raise UsageError("an empty run id matches nothing", field="--run")
    if workflow == "":
        raise UsageError("an empty workflow name matches nothing", field="--workflow")
    with reading(json_mode) as svc:
        rows = tickets_list(svc.journal, status=status, run=run, workflow=workflow)
    if json_mode:
        print_json(rows)
        return
    if not rows:
        console.print("no tickets")
    for t in rows:
        _print_ticket_line(t)


@app.command("show")
def show(ticket_id: str = IdArg, json_mode: bool = JsonOpt) -> None:
    """Show a ticket's timeline: the error, the action's attempts, notes and operator actions."""
    from workrun.app.views import ticket_view

    with reading(json_mode) as svc:
        view = ticket_view(svc.journal, svc.journal.ticket(ticket_id))
    if json_mode:
        print_json(view)
        return
    console.print(f"[bold]ticket {view['ticket_id']}[/] {styled(view['status'])}  run {view['run_id']} node "
                  f"{escape(view['node_key'])} (on_failure = {view['policy']})")
    console.print(f"error: {escape(view['error'] or '-')}")
    action = view["action"]
    if action:
        req = action["request"] or {}
        console.print(f"action: {styled(action['status'])} {escape(str(req.get('method', '')))} "
                      f"{escape(str(req.get('url', '')))}"
                      + (f" ({escape(action['reason'])})" if action["reason"] else ""))
    timeline: list[tuple[str, str]] = []
    for a in (action or {}).get("attempts", []):
        timeline.append((a["started_at"], f"action attempt {a['number']} ({a['trigger']}): {styled(a['status'])}"
                         + (f", HTTP {a['http_status']}" if a["http_status"] is not None else "")
                         + (f" — {escape(a['error'])}" if a["error"] else "")))
    for e in view["history"]:
        args = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False) if not isinstance(v, str) else v}"
                         for k, v in (e["args"] or {}).items() if v is not None)
        timeline.append((e["at"], f"{e['action']}" + (f" ({escape(args)})" if args else "")
                         + f" by {escape(e['actor'])}"
                         + (f": {escape(e['text'])}" if e["text"] else "")
                         + (f" \\[attachment {escape(e['attachment'])}]" if e["attachment"] else "")))
    for at, text in sorted(timeline, key=lambda x: x[0] or ""):
        console.print(f"  [dim]{at}[/] {text}")
    for n in view["notifications"]:
        console.print(f"notification {n['notification_id']}: {n['status']}" + (f" ({escape(n['error'])})"
                                                                              if n["error"] else ""))
    if view["status"] == "pending":
        console.print(f"ways on: `workrun tickets resume {view['ticket_id']} [--result JSON]` or "
                      f"`workrun tickets terminate {view['ticket_id']} [--no-compensate]`")


@app.command("resume")
def resume(ticket_id: str = IdArg,
           result: Optional[str] = typer.Option(None, "--result", help="The node's result as JSON (default {})."),
           json_mode: bool = JsonOpt, wait: bool = WaitOpt) -> None:
    """Mark the waiting node succeeded with RESULT and continue its run now (exit codes as `run`)."""
    from workrun.repair import tickets

    value = tickets.parse_result(result)
    with reading(json_mode) as ro:  # refusals change nothing: checked before the lock and any resuming
        t = tickets.check(ro, ticket_id, "resume", result=value)
    with scheduling(json_mode, wait) as svc, run_claim(svc, t["run_id"], wait):
        tickets.resume(svc, t["ticket_id"], value)
        code = _run_outcome(svc, t["run_id"], json_mode)
    raise typer.Exit(code)


@app.command("terminate")
def terminate(ticket_id: str = IdArg,
              no_compensate: bool = typer.Option(False, "--no-compensate",
                                                 help="End the run terminated, without compensating its calls."),
              json_mode: bool = JsonOpt, wait: bool = WaitOpt,
              reason: Optional[str] = typer.Option(None, "--reason", help="Why (kept in the audit row).")) -> None:
    """End the ticket's run: failed and its calls compensated (exit 1), or terminated with --no-compensate."""
    from workrun.repair import tickets

    with reading(json_mode) as ro:
        t = tickets.check(ro, ticket_id, "terminate")
    with scheduling(json_mode, wait) as svc, run_claim(svc, t["run_id"], wait):
        tickets.terminate(svc, t["ticket_id"], compensate=not no_compensate, reason=reason)
        code = _run_outcome(svc, t["run_id"], json_mode)
    raise typer.Exit(code)


@app.command("retry")
def retry(ticket_id: str = IdArg, json_mode: bool = JsonOpt, wait: bool = WaitOpt) -> None:
    """Send the ticket's failed action again now (history kept). Exit 0 if it succeeded, else 1."""
    from workrun.app.views import ticket_view
    from workrun.repair import tickets

    with reading(json_mode) as ro:
        t = tickets.check(ro, ticket_id, "retry")
    with scheduling(json_mode, wait) as svc, run_claim(svc, t["run_id"], wait):
        row = tickets.retry(svc, t["ticket_id"])
        view = ticket_view(svc.journal, svc.journal.ticket(t["ticket_id"]))
    if json_mode:
        print_json(view)
    else:
        _print_ticket_line(view)
    raise typer.Exit(0 if row["status"] == "succeeded" else 1)


@app.command("note")
def note(ticket_id: str = IdArg, text: str = typer.Argument(..., metavar="TEXT", help="The note."),
         attach: Optional[Path] = typer.Option(None, "--attach", help="A file to copy into the record.")) -> None:
    """Add a note (and optionally a file) to a ticket's history."""
    from workrun.repair import tickets

    with reading() as svc:
        t = tickets.note(svc, ticket_id, text, attach)
    console.print(f"note added to {t['ticket_id']}")


@app.command("resolve")
def resolve(ticket_id: str = IdArg,
            note_text: Optional[str] = typer.Option(None, "--note", help="What was done by hand.")) -> None:
    """Close a pending ticket by hand. The run is not advanced: its node keeps waiting."""
    from workrun.repair import tickets

    with reading() as svc:
        t = tickets.resolve(svc, ticket_id, note_text)
    console.print(f"{t['ticket_id']}: {styled(t['status'])}; node {escape(t['node_key'])} of run {t['run_id']} still "
                  f"waits (resolving is not resuming): `workrun stop {t['run_id']}` ends the run, `workrun compensate "
                  f"{t['run_id']}` then undoes it")


@app.command("confirm")
def confirm(ticket_id: str = IdArg,
            done: bool = typer.Option(False, "--done", help="You verified the action was done."),
            not_done: bool = typer.Option(False, "--not-done", help="You verified it was not done."),
            note_text: Optional[str] = typer.Option(None, "--note", help="How you verified.")) -> None:
    """Settle an action whose outcome is unknown: --done or --not-done (then it may be retried)."""
    from workrun.repair import tickets

    if done == not_done:
        raise UsageError("give exactly one of --done or --not-done", field="confirm")
    with reading() as svc:
        row = tickets.confirm(svc, ticket_id, done=done, text=note_text)
    console.print(f"{row['ticket_id']}: action {styled(row['status'])} ({escape(row['reason'] or '')})")

