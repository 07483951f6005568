"""``workrun compensations list|show|retry|note|resolve|confirm`` (R-O1..R-O3)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer

from workrun.cli import reads
from workrun.cli.common import JsonOpt, WaitOpt, reading, run_claim, scheduling
from workrun.cli.output import console, escape, print_compensations, print_json, styled
from workrun.core.errors import UsageError
from workrun.core.states import COMPENSATION_DONE, COMPENSATION_STATUSES

app = typer.Typer(no_args_is_help=True, help="See and repair compensations (the operator's view).")

STATUSES = COMPENSATION_STATUSES
IdArg = typer.Argument(..., metavar="COMPENSATION_ID", help="Compensation id or unique prefix.")


def _released(c: dict[str, Any]) -> None:
    if c.get("released"):
        console.print(f"released {len(c['released'])} held-back compensation(s) ({', '.join(c['released'])}): "
                      "`workrun resume` runs them")


@app.command("list")
def list_compensations(
    status: Optional[str] = typer.Option(None, "--status", help="Only this status."),
    run: Optional[str] = typer.Option(None, "--run", help="Only this run (id or unique prefix)."),
    workflow: Optional[str] = typer.Option(None, "--workflow", help="Only runs of this workflow (its name)."),
    all_runs: bool = typer.Option(False, "--all", help="Those of the runs of `workrun verify` too."),
    json_mode: bool = JsonOpt,
) -> None:
    """List compensations (all runs but verify's), oldest first."""
    reads.list_compensations(status, run, json_mode, workflow, all_runs)


@app.command("show")
def show(compensation_id: str = IdArg, json_mode: bool = JsonOpt) -> None:
    """Show a compensation's timeline: the original call, attempts, notes and operator actions."""
    reads.show_compensation(compensation_id, json_mode)


@app.command("retry")
def retry(compensation_id: str = IdArg,
          accept_code_change: bool = typer.Option(False, "--accept-code-change",
                                                  help="Run it with today's code even though the App changed."),
          json_mode: bool = JsonOpt, wait: bool = WaitOpt) -> None:
    """Run a new attempt now (history kept); then run what it was holding back. Exit 0 if all succeeded."""
    from workrun.app.views import compensation_full as _full
    from workrun.app.views import operator_commands
    from workrun.repair import operator

    with reading(json_mode) as ro:  # an unknown id or a refusal is exit 2 at once, even while another scheduler runs
        comp = ro.journal.compensation(compensation_id)
        refusal = operator.retry_refusal(comp, lasting_only=True)
        if refusal is not None:
            raise refusal
        run_id = comp["run_id"]
    with scheduling(json_mode, wait) as svc:
        t0 = svc.now()
        before = {x["compensation_id"]: x["status"] for x in svc.journal.compensations(run_id)}
        with run_claim(svc, run_id, wait):
            c = operator.retry(svc, compensation_id, accept_code_change=accept_code_change)
        # what this command handled (SPEC §10's exit code): the retried one, those it ran (an attempt each) and
        # those whose status it changed (released, then left pending); one it only wrote a new reason to (still
        # held back by another) was not handled
        handled = [_full(svc.journal, x) for x in svc.journal.compensations(c["run_id"])
                   if x["compensation_id"] == c["compensation_id"] or before.get(x["compensation_id"]) != x["status"]
                   or any(a["started_at"] >= t0 for a in svc.journal.attempts(x["compensation_id"]))]
        ok = all(r["status"] in COMPENSATION_DONE for r in handled)
        if json_mode:
            print_json(_full(svc.journal, c))
        else:
            print_compensations(handled)
            for x in handled:  # what is still not done, and how to go on (new-user review: nothing said it)
                todo = operator_commands(x["compensation_id"], x["status"], x["held_back_by"] or ())
                if todo:
                    console.print(f"next: {x['compensation_id']} {escape(todo)}")
    raise typer.Exit(0 if ok else 1)


@app.command("note")
def note(compensation_id: str = IdArg, text: str = typer.Argument(..., metavar="TEXT", help="The note."),
         attach: Optional[Path] = typer.Option(None, "--attach", help="A file to copy into the record.")) -> None:
    """Add a note (and optionally a file) to a compensation's history."""
    from workrun.repair import operator

    with reading(writable=True) as svc:
        c = operator.note(svc, compensation_id, text, attach)
    console.print(f"note added to {c['compensation_id']}")


@app.command("resolve")
def resolve(compensation_id: str = IdArg,
            note_text: Optional[str] = typer.Option(None, "--note", help="What was done by hand.")) -> None:
    """Mark a compensation fixed by hand: done, and what it held back may proceed."""
    from workrun.repair import operator

    with reading(writable=True) as svc:
        c = operator.resolve(svc, compensation_id, note_text)
    console.print(f"{c['compensation_id']}: {styled(c['status'])} ({escape(c['reason'] or '')})")
    _released(c)


@app.command("confirm")
def confirm(compensation_id: str = IdArg,
            done: bool = typer.Option(False, "--done", help="You verified it was done."),
            not_done: bool = typer.Option(False, "--not-done", help="You verified it was not done."),
            note_text: Optional[str] = typer.Option(None, "--note", help="How you verified.")) -> None:
    """Settle a compensation whose outcome is unknown: --done or --not-done (then it may be retried)."""
    from workrun.repair import operator

    if done == not_done:
        raise UsageError("give exactly one of --done or --not-done", field="confirm")
    with reading(writable=True) as svc:
        c = operator.confirm(svc, compensation_id, done=done, text=note_text)
    console.print(f"{c['compensation_id']}: {styled(c['status'])} ({escape(c['reason'] or '')})")
    _released(c)
