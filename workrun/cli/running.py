"""``run`` and ``rerun`` for the CLI, shared by the typer commands and the typer-free quick path (issue 14):
thin adapters over :mod:`workrun.app.runs`."""

from __future__ import annotations

import sys
from pathlib import Path

from workrun.cli.session import print_run

__all__ = ["rerun_run", "run_workflow"]


def _confirm(json_mode: bool):  # noqa: ANN202 - a Confirm or None
    """A person at a terminal answers typer's prompt; nobody is asked otherwise."""
    if sys.stdin.isatty() and not json_mode:
        from workrun.cli.common import ask

        return ask
    return None


def run_workflow(workflow: Path, inputs: list[str], *, eval_run: bool, yes: bool, json_mode: bool,
                 wait: bool) -> int:
    """``workrun run WORKFLOW`` (without ``--submit``): :func:`workrun.app.runs.run`, printed; return the exit
    code (SPEC §16). Called by the typer command and, for a plain command line, by :mod:`workrun.cli.quick`
    without typer (issue 14).

    Args:
        inputs: ``KEY=VALUE`` strings of ``--input``.

    Raises:
        WorkrunError: a bad workflow or input (exit 2), a busy scheduler (exit 3), a journal failure.
    """
    from workrun.app import runs
    from workrun.cli.output import CliReporter

    done = runs.run(workflow, list(inputs), wait=wait, eval_run=eval_run, yes=yes,
                    reporter=CliReporter(quiet=json_mode), confirm=_confirm(json_mode))
    print_run(done.data, json_mode)
    return done.code


def rerun_run(run_id: str, *, json_mode: bool, wait: bool, yes: bool) -> int:
    """``workrun rerun RUN``: :func:`workrun.app.runs.rerun`, printed; return the exit code (SPEC §16)."""
    from workrun.app import runs
    from workrun.cli.output import CliReporter

    done = runs.rerun(run_id, wait=wait, yes=yes, reporter=CliReporter(quiet=json_mode), confirm=_confirm(json_mode))
    print_run(done.data, json_mode)
    return done.code
