"""``run`` and ``rerun`` for the CLI, shared by the typer commands and the typer-free quick path (issue 14):
thin adapters over :mod:`workrun.app.runs`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # types only: the quick path imports nothing it does not run
    from workrun.runner.context import Confirm, Reporter

__all__ = ["check_workflow", "reporter_for", "rerun_run", "run_workflow"]


def reporter_for(log_format: str, json_mode: bool) -> Reporter:
    """The progress reporter of ``--log-format``: ``text`` (the terminal's lines, none with ``--json``) or
    ``json`` (one JSON object per line on stderr, R-F6; JSON logs switched on for the whole process).

    Raises:
        UsageError: another value (exit 2).
    """
    from workrun.cli.output import CliReporter
    from workrun.core import logs
    from workrun.core.errors import UsageError

    if log_format not in ("text", "json"):
        raise UsageError(f"must be text or json, not {log_format!r}", field="--log-format")
    if log_format == "json":
        logs.enable(None)
        return logs.JsonReporter()
    return CliReporter(quiet=json_mode)


def _confirm(json_mode: bool) -> Confirm | None:
    """A person at a terminal answers typer's prompt; nobody is asked otherwise."""
    if sys.stdin.isatty() and not json_mode:
        from workrun.cli.common import ask

        return ask
    return None


def run_workflow(workflow: Path, inputs: list[str], *, eval_run: bool, yes: bool, json_mode: bool,
                 wait: bool, log_format: str = "text") -> int:
    """``workrun run WORKFLOW`` (without ``--submit``): :func:`workrun.app.runs.run`, printed; return the exit
    code (SPEC §16). Called by the typer command and, for a plain command line, by :mod:`workrun.cli.quick`
    without typer (issue 14).

    Args:
        inputs: ``KEY=VALUE`` strings of ``--input``.
        log_format: ``text`` or ``json`` (:func:`reporter_for`).

    Raises:
        WorkrunError: a bad workflow or input (exit 2), a busy scheduler (exit 3), a journal failure.
    """
    from workrun.app.session import start_up

    with start_up():  # no garbage collection until the run is scheduled
        from workrun.app import runs
        from workrun.cli.session import print_run

        reporter = reporter_for(log_format, json_mode)
        done = runs.run(workflow, list(inputs), wait=wait, eval_run=eval_run, yes=yes, reporter=reporter,
                        confirm=_confirm(json_mode))
        print_run(done.data, json_mode)
    return done.code


def rerun_run(run_id: str, *, json_mode: bool, wait: bool, yes: bool) -> int:
    """``workrun rerun RUN``: :func:`workrun.app.runs.rerun`, printed; return the exit code (SPEC §16)."""
    from workrun.app import runs
    from workrun.cli.output import CliReporter
    from workrun.cli.session import print_run

    done = runs.rerun(run_id, wait=wait, yes=yes, reporter=CliReporter(quiet=json_mode), confirm=_confirm(json_mode))
    print_run(done.data, json_mode)
    return done.code


def check_workflow(workflow: Path | str, inputs: list[str], *, json_mode: bool) -> int:
    """``workrun check WORKFLOW``: :func:`workrun.app.runs.check`, printed (``ok: N nodes, M compensable`` or
    the JSON); return the exit code. Called by the typer command and, for a plain command line, by
    :mod:`workrun.cli.quick` without typer or rich (SPEC §24: ``check`` in ≤ 150 ms).

    Raises:
        ConfigError: without ``--json``, every error (exit 2, one line each).
    """
    from workrun.app.checks import check
    from workrun.cli.output import print_json
    from workrun.core.errors import ConfigError

    try:
        done = check(Path(workflow), list(inputs))
    except ConfigError as exc:
        if not json_mode:
            raise
        print_json({"ok": False, "errors": exc.lines()})
        return 2
    if json_mode:
        print_json(done.data)
    else:
        sys.stdout.write(f"{done.note}\n")
        sys.stdout.flush()
    return 0


check_workflow.reports_settings = True  # type: ignore[attr-defined]  # a bad WORKRUN_* setting is one of its errors
