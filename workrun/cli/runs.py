"""``workrun runs list|show``: read-only views of runs (work while a scheduler runs)."""

from __future__ import annotations

import typer

from workrun.cli.common import JsonOpt, viewing
from workrun.cli.output import console, escape, print_json, run_table, styled

app = typer.Typer(no_args_is_help=True, help="List and show runs.")


@app.command("list")
def list_runs(json_mode: bool = JsonOpt, limit: int = typer.Option(50, help="Show at most this many runs.")) -> None:
    """List runs, newest first."""
    from workrun.views import rollup_line, runs_list

    with viewing() as journal:
        rows = runs_list(journal, limit=None if json_mode else limit)
    if json_mode:
        print_json(rows)
        return
    from rich.table import Table

    table = Table()
    table.add_column("run", no_wrap=True)
    table.add_column("workflow", overflow="fold")
    table.add_column("status", no_wrap=True)
    table.add_column("compensation", overflow="fold")
    table.add_column("started (UTC)", no_wrap=True)
    for r in rows:
        started = (r["started_at"] or "-")[:19].replace("T", " ")
        table.add_row(r["run_id"], escape(r["workflow"]), styled(r["status"]), rollup_line(r) or "-", started)
    console.print(table if rows else "no runs yet")


@app.command("show")
def show(run_id: str = typer.Argument(..., metavar="RUN", help="Run id or unique prefix."),
         json_mode: bool = JsonOpt) -> None:
    """Show a run: nodes with their messages, calls, and each call's compensation."""
    from workrun.views import rollup_line, run_detail

    with viewing() as journal:
        view = run_detail(journal, run_id)
    if json_mode:
        print_json(view)
        return
    console.print(run_table(view))
    if view["compensation"]:
        console.print(rollup_line(view))
    for m in view["messages"]:
        console.print(f"[dim]{m['at']}[/] run: {escape(m['text'])}")
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
        console.print(f"\n[yellow]compensation not finished[/] for {len(view['unfinished_compensations'])} call(s): "
                      f"`workrun resume` continues pending ones; `workrun compensations list --run {view['run_id']}` "
                      "and `workrun compensations show ID` for the rest")
