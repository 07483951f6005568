"""Starting a run, shared by ``run`` and ``rerun`` and by the typer-free quick path (issue 14)."""

from __future__ import annotations

import sys
from pathlib import Path

from workrun.cli.session import finish_run, run_claim, scheduling

__all__ = ["audit_run", "run_workflow", "start_run"]


def audit_run(svc, run_id: str, action: str, args: dict) -> None:
    """Record a run-level operator action (R-O2, R-U4): who, when, what."""
    from workrun.operator import actor

    svc.journal.record_event({"run_id": run_id, "at": svc.now(), "actor": actor(), "action": action, "args": args})


def start_run(spec, inputs, *, json_mode: bool, wait: bool, yes: bool, eval_run: bool, rerun_of: str | None,
               note: str, executors) -> int:
    """Create a run, drive it (nodes, then compensation) and print it; return the exit code (shared by run/rerun)."""
    from workrun.engine import create_run
    from workrun.recovery import drive

    with scheduling(json_mode, wait) as svc:
        svc.assume_yes = yes
        if sys.stdin.isatty() and not json_mode:  # a person at a terminal answers typer's prompt
            from workrun.cli.common import ask

            svc.confirm = ask
        run_id = create_run(svc, spec, inputs, eval_run=eval_run, rerun_of=rerun_of)
        if rerun_of:
            audit_run(svc, rerun_of, "rerun", {"new_run": run_id})
        svc.say(run_id, None, "info", f"run {run_id} of {spec.name} started{note}")
        with run_claim(svc, run_id, wait=True):  # shared journal: driven here, as a worker would (R-S3)
            drive(svc, run_id, executors)
        code = finish_run(svc, run_id, json_mode)
        return 130 if svc.stopping() else code


def run_workflow(workflow: Path, inputs: list[str], *, eval_run: bool, yes: bool, json_mode: bool,
                 wait: bool) -> int:
    """``workrun run WORKFLOW`` (without ``--submit``): load and check the workflow, run it, print it; return the
    exit code (SPEC §16). Called by the typer command and, for a plain command line, by
    :mod:`workrun.cli.quick` without typer (issue 14).

    Args:
        inputs: ``KEY=VALUE`` strings of ``--input``.

    Raises:
        WorkrunError: a bad workflow or input (exit 2), a busy scheduler (exit 3), a journal failure.
    """
    from workrun.nodes import default_executors
    from workrun.templates import parse_inputs
    from workrun.workflow import load_workflow

    executors = default_executors()
    spec, values = load_workflow(Path(workflow), parse_inputs(list(inputs)), executors)
    return start_run(spec, values, json_mode=json_mode, wait=wait, yes=yes, eval_run=eval_run, rerun_of=None,
                     note=" (evaluation run)" if eval_run else "", executors=executors)
