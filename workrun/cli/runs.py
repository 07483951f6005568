"""``workrun runs list|show``: read-only views of runs (work while a scheduler runs)."""

from __future__ import annotations

import typer

from workrun.cli import reads
from workrun.cli.common import JsonOpt

app = typer.Typer(no_args_is_help=True, help="List and show runs.")


@app.command("list")
def list_runs(json_mode: bool = JsonOpt,
              limit: int | None = typer.Option(None, help="Show at most this many runs (default: 50 in the "
                                                        "table, all with --json)."),
              all_runs: bool = typer.Option(False, "--all", help="Also the runs of `workrun verify`.")) -> None:
    """List runs, newest first."""
    reads.list_runs(json_mode, limit, all_runs)


@app.command("show")
def show(run_id: str = typer.Argument(..., metavar="RUN", help="Run id or unique prefix."),
         json_mode: bool = JsonOpt) -> None:
    """Show a run: nodes with their messages, calls, and each call's compensation."""
    reads.show_run(run_id, json_mode)
