"""The ``workrun`` command (typer): run, rerun, stop, resume, compensate, gc, and the groups
``runs``, ``app``, ``compensations``. The console script is :func:`workrun.cli.entry.main`.

Exit codes (SPEC §9, §10): 0 done / run succeeded; 1 run failed or a handled
compensation did not finish; 2 bad usage, config or input, unknown id;
3 another scheduler holds the data directory; 130 run stopped by the user.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any, List, Optional

import typer

from workrun import __version__
from workrun.cli import apps as apps_cli
from workrun.cli import compensations as comp_cli
from workrun.cli import runs as runs_cli
from workrun.cli import tickets as tickets_cli
from workrun.cli import ui as ui_cli
from workrun.cli.common import JsonOpt, LogFormatOpt, WaitOpt, reading, scheduling
from workrun.cli.output import console, one_line, print_error, print_json, raise_broken_pipes, write_out
from workrun.cli.running import rerun_run, run_workflow
from workrun.cli.session import print_run

__all__ = ["app"]

raise_broken_pipes()  # typer's help is printed by rich too


def _no_type_for_flags() -> None:
    """typer's help shows a type beside every option, ``<bool>`` for a flag (``--json <bool>``), which reads as
    if the flag took a value (``--json true`` is a usage error): a flag shows none. Nothing on a typer
    without that column."""
    from typer.core import TyperOption

    shown = getattr(TyperOption, "display_type_rich", None)
    if shown is None:
        return

    def display_type_rich(self: TyperOption, ctx: Any) -> str | None:
        return None if self.is_flag else shown(self, ctx)

    TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign]


_no_type_for_flags()

app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                  help="Workrun: run workflows of Python Apps; when a run finally fails, compensate what "
                       "its calls did, durably, in reverse dependency order.")
app.add_typer(runs_cli.app, name="runs")
app.add_typer(apps_cli.app, name="app")
app.add_typer(comp_cli.app, name="compensations")
app.add_typer(tickets_cli.app, name="tickets")
app.command("ui")(ui_cli.ui)

def _print_version(value: bool) -> None:
    if value:
        console.print(f"workrun {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks for errors."),
    version: bool = typer.Option(False, "--version", help="Print the version and exit.", is_eager=True,
                                 callback=_print_version),
) -> None:
    del debug, version  # --debug is read by main() before typer runs; --version by its eager callback
    from workrun.core import settings

    settings.current()  # every WORKRUN_* setting is checked before anything runs (SPEC §17)


@app.command()
def run(
    workflow: Path = typer.Argument(..., metavar="WORKFLOW", help="The workflow TOML file."),
    input: List[str] = typer.Option([], "--input", "-i", metavar="KEY=VALUE", help="Run input (repeatable)."),
    eval_run: bool = typer.Option(False, "--eval", help="Evaluation run: never compensated."),
    yes: bool = typer.Option(False, "--yes", help="Approve tool calls whose App asks for confirmation."),
    submit: bool = typer.Option(False, "--submit", help="Only record the run for workers (`workrun worker`) and "
                                "print its id (needs WORKRUN_JOURNAL=postgresql://…)."),
    json_mode: bool = JsonOpt,
    wait: bool = WaitOpt,
    log_format: str = LogFormatOpt,
) -> None:
    """Run a workflow; on final failure, compensate its succeeded calls. Exit 0/1/4 (waiting)/130 (0 with --submit)."""
    if submit:
        from workrun.config.workflow import load_workflow
        from workrun.core.templates import parse_inputs
        from workrun.nodes import default_executors

        spec, inputs = load_workflow(workflow, parse_inputs(input), default_executors())
        _submit(spec, inputs, eval_run, json_mode)
    raise typer.Exit(run_workflow(workflow, input, eval_run=eval_run, yes=yes, json_mode=json_mode, wait=wait,
                                  log_format=log_format))


@app.command()
def rerun(
    run_id: str = typer.Argument(..., metavar="RUN", help="The run to run again (id or unique prefix)."),
    json_mode: bool = JsonOpt,
    wait: bool = WaitOpt,
    yes: bool = typer.Option(False, "--yes", help="Approve tool calls whose App asks for confirmation."),
) -> None:
    """Start a new run with the same workflow and inputs; the old run's record is untouched.

    \f
    Implements R-W5 (the text before the form feed is the help).
    """
    raise typer.Exit(rerun_run(run_id, json_mode=json_mode, wait=wait, yes=yes))


@app.command()
def stop(
    run_id: str = typer.Argument(..., metavar="RUN", help="The run to stop (id or unique prefix)."),
    timeout: float = typer.Option(60.0, help="Seconds to wait for the run to end."),
    json_mode: bool = JsonOpt,
    reason: Optional[str] = typer.Option(None, "--reason", help="Why (kept in the audit row)."),
) -> None:
    """Stop a running or waiting run from another terminal: its App processes end, nothing is compensated.

    \f
    Implements R-C9.
    """
    from workrun.app import runs

    done = runs.stop(run_id, timeout=timeout, say=None if json_mode else console.print, reason=reason)
    if json_mode:
        print_json(done.data)
    else:
        console.print(done.note)
    raise typer.Exit(done.code)


@app.command()
def resume(json_mode: bool = JsonOpt, wait: bool = WaitOpt, log_format: str = LogFormatOpt) -> None:
    """Continue every unfinished run and compensation in the data directory; exit 0 if all ended well.

    \f
    Implements R-R1.
    """
    from workrun.app import runs
    from workrun.cli.running import reporter_for

    done = runs.resume(wait=wait, reporter=reporter_for(log_format, json_mode))
    if json_mode:
        print_json(done.data)
    else:
        if done.note:
            console.print(done.note)
        for v in done.data["runs"]:  # each as `run` prints it: the table, its roll-up, what is left to do
            print_run(v, False)
    raise typer.Exit(done.code)


@app.command()
def compensate(
    run_id: str = typer.Argument(..., metavar="RUN", help="A stopped, terminated or failed run (id or unique prefix)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Only show the compensation plan; change nothing."),
    json_mode: bool = JsonOpt,
    wait: bool = WaitOpt,
    reason: Optional[str] = typer.Option(None, "--reason", help="Why (kept in the audit row)."),
) -> None:
    """Explicitly compensate a stopped or terminated run, or finish a failed run's compensation.

    \f
    Implements R-C9; --dry-run R-L3.
    """
    from workrun.app import runs
    from workrun.cli.output import CliReporter

    done = runs.compensate(run_id, dry_run=dry_run, wait=wait, reporter=CliReporter(quiet=json_mode), reason=reason)
    if dry_run and json_mode:
        print_json(done.data)
    elif dry_run:
        _print_plan(done.data)
    else:  # as `run` prints it: the table, then what is left and where to look (a person's compensations)
        print_run(done.data, json_mode)
    raise typer.Exit(done.code)


def _print_plan(plan: dict[str, Any]) -> None:
    """The dry run's plan as text: one line per compensation in order, then what ``compensate`` would do."""
    from workrun.cli.output import escape, styled

    console.print(f"compensation plan of run {plan['run_id']} ({plan['status']}):")
    if not plan["plan"]:
        console.print("  (no compensation)")
    whats = [f"App {step['app']}" if "app" in step else f"reverse action {step['action']}" for step in plan["plan"]]
    places = [f"{step['place']}." for step in plan["plan"]]
    keys = [step["node_key"] or "-" for step in plan["plan"]]
    width = [max(map(len, column), default=0) for column in (places, keys, whats)]  # columns line up
    for step, place, key, what in zip(plan["plan"], places, keys, whats, strict=True):
        held = f"; held back by {', '.join(step['held_back_by'])}" if step["held_back_by"] else ""
        new = " (planned: not in the journal until `compensate` writes it)" if step.get("planned") else ""
        new += f"; {step['code_change']}" if step.get("code_change") else ""
        console.print(f"  {place:>{width[0]}} {escape(key.ljust(width[1]))}  {step['compensation_id']}  "
                      f"{escape(what.ljust(width[2]))}  {styled(step['status'])}{held}{new}")
    console.print(f"would: {plan['would']}")


@app.command()
def check(
    workflow: Path = typer.Argument(..., metavar="WORKFLOW", help="The workflow TOML file."),
    input: List[str] = typer.Option([], "--input", "-i", metavar="KEY=VALUE", help="Run input (repeatable)."),
    json_mode: bool = JsonOpt,
) -> None:
    """Check a workflow as `run` would before anything runs, creating nothing; exit 0 or 2 with every error.

    \f
    Implements R-L1.
    """
    from workrun.cli.running import check_workflow

    raise typer.Exit(check_workflow(workflow, list(input), json_mode=json_mode))


@app.command()
def graph(
    target: str = typer.Argument(..., metavar="WORKFLOW|RUN", help="A workflow file, or a run (id or unique prefix)."),
    fmt: str = typer.Option("mermaid", "--format", metavar="mermaid|dot|json", help="Output format."),
) -> None:
    """Draw a workflow's nodes and edges (needs solid, template references dashed); for a run, each node's status
    and its compensations' places in compensation order.

    \f
    Implements R-L2.
    """
    from workrun.app.graph import graph as draw

    print(draw(target, fmt=fmt).note)
    raise typer.Exit(0)


@app.command()
def schema(
    which: str = typer.Argument(..., metavar="workflow|app",
                                help="workflow: a workflow file; app: a pyproject's tool.workrun table."),
) -> None:
    """Print the JSON Schema (draft 2020-12) of a workflow file or of a pyproject's tool.workrun table.

    \f
    Implements R-L4.
    """
    from workrun.core.errors import UsageError
    from workrun.core.schema import app_schema, workflow_schema

    if which not in ("workflow", "app"):
        raise UsageError(f"unknown schema {which!r} (workflow or app)", field="SCHEMA")
    print_json(workflow_schema() if which == "workflow" else app_schema())
    raise typer.Exit(0)


@app.command()
def verify(
    workflow: Path = typer.Argument(..., metavar="WORKFLOW", help="The workflow TOML file."),
    input: List[str] = typer.Option([], "--input", "-i", metavar="KEY=VALUE", help="Run input (repeatable)."),
    node: List[str] = typer.Option([], "--node", metavar="KEY", help="Fail after this node (repeatable; default: "
                                   "every node with a compensable call)."),
    check: Optional[str] = typer.Option(None, "--check", metavar="PROJECT:APP",
                                        help="An App whose exit 0 says the world is clean after compensation."),
    crash: bool = typer.Option(False, "--crash", help="Also kill the runner at each compensation-phase fault point "
                               "in turn, then resume."),
    json_mode: bool = JsonOpt,
    wait: bool = WaitOpt,
) -> None:
    """Prove the compensations: per node, a real run failed right after it, compensated, each compensation run
    again (idempotent?), and the check App asked; exit 0 when every scenario holds, 1 otherwise.

    \f
    Implements R-V1.
    """
    from workrun.app.verify import verify as prove

    done = prove(workflow, list(input), nodes=list(node) or None, check=check, crash=crash, wait=wait)
    if json_mode:
        print_json(done.data)
    else:
        from workrun.cli.output import escape

        for line in done.note.splitlines():
            console.print(escape(line))
    raise typer.Exit(done.code)


@app.command()
def gc(dry_run: bool = typer.Option(False, "--dry-run", help="Only say what would be removed (takes no lock)."),
       wait: bool = WaitOpt) -> None:
    """Remove code snapshots that no unfinished compensation needs, and stale call directories (exit 1 when one
    cannot be removed)."""
    from workrun.effects.operations import gc_call_dirs
    from workrun.runner.snapshots import gc as snapshots_gc

    snapshots: list[str] = []
    directories: list[Path] = []
    # a dry run removes nothing: it reads beside a run in progress; removing takes the scheduler lock
    with reading() if dry_run else scheduling(False, wait, resume_first=False) as svc:
        removed, kept = snapshots_gc(svc, dry_run=dry_run, named=snapshots)
        console.print(f"{'would remove' if dry_run else 'removed'} {removed} snapshot(s); kept {kept}")
        for sid in snapshots if dry_run else ():  # what would go, one per line (plain: never wrapped)
            write_out(f"  snapshot {one_line(sid)}\n")
        removed, kept, failed = gc_call_dirs(svc, dry_run=dry_run, named=directories)
        console.print(f"{'would remove' if dry_run else 'removed'} {removed} stale call directory(ies); kept {kept}")
        for path in directories if dry_run else ():
            write_out(f"  call directory {one_line(str(path))}\n")
        for path in failed:
            print_error(f"{path}: cannot be removed")
    raise typer.Exit(1 if failed else 0)


def _submit(spec: Any, inputs: dict[str, Any], eval_run: bool, json_mode: bool) -> None:
    """``run --submit``: record the run for workers, print its id, exit 0 (R-S3)."""
    from workrun.cluster.workers import needs_workers
    from workrun.engine.driver import create_run

    with reading(json_mode, writable=True) as svc:
        needs_workers(svc)
        run_id = create_run(svc, spec, inputs, eval_run=eval_run)
        svc.journal.add_message(run_id, None, "info", f"run {run_id} of {spec.name} submitted for workers")
    if json_mode:
        print_json({"run_id": run_id, "workflow": spec.name, "status": "running"})
    else:
        console.print(run_id)
    raise typer.Exit(0)


@app.command()
def worker(
    concurrency: int = typer.Option(2, "--concurrency", "-c", min=1, max=64,
                                    help="Runs driven at once (and App processes run at once, unless --executors)."),
    idle_exit: Optional[float] = typer.Option(None, "--idle-exit", min=0,
                                              help="End after this many seconds with nothing to claim."),
    executors: Optional[int] = typer.Option(None, "--executors", min=0, max=256,
                                            help="App processes run at once for any run (default: as many as "
                                            "--concurrency; 0: only schedule runs)."),
    metrics_port: Optional[int] = typer.Option(None, "--metrics-port", min=1, max=65535,
                                               help="Serve Prometheus metrics on this port (/metrics)."),
    metrics_host: str = typer.Option("127.0.0.1", "--metrics-host", help="Address the metrics are served on."),
    log_format: str = LogFormatOpt,
) -> None:
    """Claim and drive runs, and run their App calls, from a shared journal (WORKRUN_JOURNAL=postgresql://…)
    until stopped.

    Ctrl-C or SIGTERM: claim nothing new and end after the runs and calls in hand; a second one ends at once.

    Claims then pass to other workers when the lease (WORKRUN_LEASE seconds) has passed.

    \f
    Implements R-S2.
    """
    import os
    import signal
    import sys

    from workrun.app.session import serve_metrics
    from workrun.cli.output import CliReporter
    from workrun.cluster.workers import Worker, lease_seconds, needs_workers

    lease = lease_seconds()
    with reading() as svc:
        needs_workers(svc)
        data_dir = svc.data_dir
    serve_metrics(metrics_port, metrics_host)
    from workrun.core import logs
    from workrun.core.errors import DatabaseUnreachableError, UsageError

    if log_format not in ("text", "json"):
        raise UsageError(f"must be text or json, not {log_format!r}", field="--log-format")
    json_logs = log_format == "json"
    reporter = logs.JsonReporter() if json_logs else CliReporter(quiet=False, with_run=True)
    from workrun.repair.policy import open_ticket

    w = Worker(data_dir, concurrency=concurrency, lease=lease, reporter=reporter, idle_exit=idle_exit,
               executors=executors, open_ticket=open_ticket)
    if json_logs:
        logs.enable(w.worker_id)

    def say(event: str, text: str, **fields: object) -> None:
        if json_logs:
            logs.emit(event, "info", message=text, **fields)
        else:
            console.print(text)

    def on_signal(signum: int, frame: object) -> None:
        if w.draining.is_set():
            os._exit(130)
        say("worker_draining", f"worker {w.worker_id}: ending after the runs in hand (again to end now)")
        w.draining.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_signal)
    say("worker_started", f"worker {w.worker_id} (concurrency {concurrency}, executors {w.slots}, lease {lease:g} s) "
        "on the shared journal", concurrency=concurrency, executors=w.slots, lease=lease)
    try:
        code = w.run()
    except DatabaseUnreachableError as exc:
        # R-F1: out of WORKRUN_DB_RETRY. The calls in hand could store nothing: their threads are not waited for
        # (an App may take its whole timeout); their processes end on their own, as after a crash, and their
        # claims pass on after their lease
        import atexit

        for line in exc.lines():
            print_error(line)
        atexit._run_exitfuncs()  # what exiting does besides joining threads: the traces' last export (bounded)
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        os._exit(exc.exit_code)
    executed = w.executors.executed if w.executors else 0
    say("worker_stopped", f"worker {w.worker_id}: drove {w.driven} run(s), executed {executed} call(s)",
        runs=w.driven, calls=executed)
    raise typer.Exit(code)


def _summaries(group: typer.Typer) -> None:
    """Give each command of ``group`` (and of its sub-groups) the one-line summary a command list shows: the first
    paragraph of its help, on one line. typer's rich help keeps a docstring's line breaks there, which showed as
    gaps in the middle of a sentence (new-user review). A command's own ``--help`` is unchanged."""
    for info in group.registered_commands:
        doc = info.help or (info.callback.__doc__ if info.callback is not None else None)
        if info.short_help is None and doc:
            first = inspect.cleandoc(doc).partition("\f")[0].split("\n\n")[0]
            info.short_help = " ".join(first.split())
    for sub in group.registered_groups:
        if sub.typer_instance is not None:
            _summaries(sub.typer_instance)


_summaries(app)
