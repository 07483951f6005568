"""What every command shares without typer: Services, the scheduler lock, signals, exit codes.

Typer-free so that a command line run without typer's parsing (:mod:`workrun.cli.quick`: the plain read
commands and ``run``) imports none of it (R-P3, issue 14).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from workrun.app.runs import EXIT
from workrun.app.session import run_claim, shared_journal
from workrun.cli.output import CliReporter, console, print_json, run_table

if TYPE_CHECKING:
    from workrun.runner.services import Services

__all__ = ["EXIT", "finish_run", "print_run", "reading", "run_claim", "scheduling", "shared_journal"]


@contextmanager
def reading(json_mode: bool = False, *, writable: bool = False) -> Iterator[Services]:
    """Services for a command that takes no scheduler lock (:func:`workrun.app.session.reading`), with the CLI's
    reporter.

    Args:
        writable: the command writes (a standalone call); else it may read a data dir it cannot write.
    """
    from workrun.app import session

    with session.reading(writable=writable, reporter=CliReporter(quiet=json_mode)) as svc:
        yield svc


@contextmanager
def scheduling(json_mode: bool, wait: bool, *, resume_first: bool = True) -> Iterator[Services]:
    """Services holding the scheduler lock (:func:`workrun.app.session.scheduling`), with the CLI's reporter.

    Raises:
        SchedulerBusyError: another scheduler holds the data dir (exit 3), unless ``wait``.
    """
    from workrun.app import session

    with session.scheduling(wait=wait, resume_first=resume_first, reporter=CliReporter(quiet=json_mode)) as svc:
        yield svc


def finish_run(svc: Services, run_id: str, json_mode: bool) -> int:
    """Print the run (table or JSON) and return the exit code its status means (SPEC §16)."""
    from workrun.app.views import run_detail

    view = run_detail(svc.journal, run_id)
    print_run(view, json_mode)
    return EXIT.get(view["status"], 1)


def print_run(view: dict[str, Any], json_mode: bool) -> None:
    """Print a run that a command drove (``runs show --json`` shape): JSON, or the table with what is left to
    do; a run waiting for a person names its tickets either way (on stderr with ``--json``)."""
    if json_mode:
        print_json(view)
        for t in view["tickets"]:  # the JSON is on stdout; the two ways on still reach the person, on stderr
            if t["status"] == "pending" and view["status"] == "waiting":
                print(f"waiting for a person: ticket {t['ticket_id']} (node {t['node_key']}): `workrun tickets "
                      f"resume {t['ticket_id']}` or `workrun tickets terminate {t['ticket_id']}`", file=sys.stderr)
        return
    run_id = view["run_id"]
    console.print()
    console.print(run_table(view))
    if view.get("compensation"):  # the roll-up, as `runs show` says it (R-L6: "not undone: N calls — …")
        from workrun.app.views import rollup_line

        console.print(rollup_line(view))
    from workrun.app.views import unknown_calls_line
    from workrun.cli.output import escape

    unknown = unknown_calls_line(view)
    if unknown:  # R-R3: shown for an operator (hostile review: only a node message said it)
        console.print(f"[yellow]{escape(unknown)}[/]")
    if view["unfinished_compensations"]:
        from workrun.app.views import unfinished_hint

        console.print(f"[yellow]{len(view['unfinished_compensations'])} compensation(s) not finished[/]: "
                      f"{escape(unfinished_hint(view))} (`workrun runs show {run_id}` shows each)")
    for t in view["tickets"]:
        if t["status"] == "pending" and view["status"] == "waiting":
            console.print(f"[yellow]waiting for a person[/]: ticket {t['ticket_id']} (node {t['node_key']}): "
                          f"`workrun tickets resume {t['ticket_id']}` or `workrun tickets terminate "
                          f"{t['ticket_id']}`")


