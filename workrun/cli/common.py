"""What every typer command shares: its common options and the yes/no question; the rest (Services, the
scheduler lock, signals, exit codes) is :mod:`workrun.cli.session`, which needs no typer."""

from __future__ import annotations

import typer

from workrun.cli.session import EXIT, finish_run, reading, run_claim, scheduling, shared_journal

__all__ = ["EXIT", "JsonOpt", "WaitOpt", "ask", "finish_run", "reading", "run_claim", "scheduling",
           "shared_journal"]

JsonOpt = typer.Option(False, "--json", help="Print JSON instead of tables.")
WaitOpt = typer.Option(False, "--wait", help="Wait for another scheduler to finish instead of exiting 3.")
LogFormatOpt = typer.Option("text", "--log-format", metavar="text|json",
                            help="json: progress as one JSON object per line on stderr (R-F6).")


def ask(question: str) -> bool:
    """Ask a yes/no question on the terminal (default no); end of input or Ctrl-C at the prompt is no."""
    try:
        return bool(typer.confirm(question, default=False))
    except typer.Abort:
        return False
