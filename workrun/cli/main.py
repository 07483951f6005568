"""The ``workrun`` command (typer): run, rerun, stop, resume, compensate, gc, and the groups
``runs``, ``app``, ``compensations``. The console script is :func:`workrun.cli.entry.main`.

Exit codes (SPEC §9, §10): 0 done / run succeeded; 1 run failed or a handled
compensation did not finish; 2 bad usage, config or input, unknown id;
3 another scheduler holds the data directory; 130 run stopped by the user.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, List, Optional

import typer

from workrun import __version__
from workrun.cli import apps as apps_cli
from workrun.cli import compensations as comp_cli
from workrun.cli import runs as runs_cli
from workrun.cli import tickets as tickets_cli
from workrun.cli import ui as ui_cli
from workrun.cli.common import JsonOpt, WaitOpt, reading, run_claim, scheduling, shared_journal
from workrun.cli.output import console, print_error, print_json, raise_broken_pipes, run_table
from workrun.cli.running import audit_run, run_workflow, start_run
from workrun.errors import ActionRefusedError, WorkrunError
from workrun.states import COMPENSATION_DONE

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
    from workrun import settings

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
) -> None:
    """Run a workflow; on final failure, compensate its succeeded calls. Exit 0/1/4 (waiting)/130 (0 with --submit)."""
    if submit:
        from workrun.nodes import default_executors
        from workrun.templates import parse_inputs
        from workrun.workflow import load_workflow

        spec, inputs = load_workflow(workflow, parse_inputs(input), default_executors())
        _submit(spec, inputs, eval_run, json_mode)
    raise typer.Exit(run_workflow(workflow, input, eval_run=eval_run, yes=yes, json_mode=json_mode, wait=wait))


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
    from workrun.models import WorkflowSpec
    from workrun.nodes import default_executors
    from workrun.workflow import load_workflow

    executors = default_executors()
    with reading(json_mode) as ro:
        old = ro.journal.run(run_id)
    path = Path(old["workflow_path"])
    if path.is_file():
        spec, inputs = load_workflow(path, {k: v for k, v in old["inputs"].items()}, executors,
                                     known_inputs_only=False)
    else:
        spec, inputs = WorkflowSpec.model_validate(old["spec"]), old["inputs"]
    note = f" (re-run of {old['run_id']})" + ("" if path.is_file() else f"; {path} is gone, so the recorded "
                                                                       "workflow is used")
    raise typer.Exit(start_run(spec, inputs, json_mode=json_mode, wait=wait, yes=yes, eval_run=bool(old["eval"]),
                               rerun_of=old["run_id"], note=note, executors=executors))


@app.command()
def stop(
    run_id: str = typer.Argument(..., metavar="RUN", help="The run to stop (id or unique prefix)."),
    timeout: float = typer.Option(60.0, help="Seconds to wait for the run to end."),
) -> None:
    """Stop a running or waiting run from another terminal: its App processes end, nothing is compensated.

    \f
    Implements R-C9.
    """
    from workrun.lock import SchedulerLock
    from workrun.recovery import stop_orphaned_run

    with reading(writable=True) as svc:
        run = svc.journal.run(run_id)
        rid = run["run_id"]
        if run["status"] == "waiting":  # nobody drives a waiting run: end it here, under the lock (R-M7)
            with run_claim(svc, rid, wait=True) if shared_journal() else SchedulerLock(svc.data_dir, wait=True):
                if svc.journal.run(rid)["status"] == "waiting":
                    stop_orphaned_run(svc, rid)
            console.print(f"run {rid}: {svc.journal.run(rid)['status']}; its pending tickets are terminated; side "
                          f"effects were NOT undone; `workrun compensate {rid}` undoes them")
            raise typer.Exit(0)
        if run["status"] != "running":
            console.print(f"run {rid} is {run['status']}; nothing to stop")
            raise typer.Exit(0)
        svc.journal.request_stop(rid)
        audit_run(svc, rid, "stop", {})
        lock: _StopClaim | SchedulerLock | None = _StopClaim(svc, rid) if shared_journal() else SchedulerLock(
            svc.data_dir)
        assert lock is not None
        try:
            lock.acquire()
        except WorkrunError:
            holder = lock.holder()
            who = (f"worker {holder['worker_id']} (host {holder.get('host', '?')}, pid {holder.get('pid', '?')})"
                   if holder.get("worker_id") else f"the scheduler (pid {holder.get('pid', '?')})")
            console.print(f"stop requested; {who} is ending run {rid}")
            end = time.monotonic() + timeout
            lock = None
            while time.monotonic() < end and svc.journal.run(rid)["status"] == "running":
                time.sleep(0.1)
                if shared_journal() and (_claim_of(svc, rid) or {}).get("lease_until", 0) < time.time():
                    lock = _StopClaim(svc, rid)  # its scheduler died (its lease passed): end the run here
                    try:
                        lock.acquire()
                        break
                    except WorkrunError:
                        lock = None
        if lock is not None:
            try:
                if svc.journal.run(rid)["status"] == "running":
                    with _dispatching(svc, rid):  # shared journal: its calls are ended through their claims
                        stop_orphaned_run(svc, rid)
            finally:
                lock.release()
        status = svc.journal.run(rid)["status"]
        done = any(o["status"] == "succeeded" for o in svc.journal.operations(rid))
        console.print(f"run {rid}: {status}" + ((": side effects were NOT undone; `workrun compensate "
                                                f"{rid}` undoes them") if status == "stopped" and done else
                                               ": no call had succeeded, nothing to undo" if status == "stopped"
                                               else ""))
    raise typer.Exit(0)


def _dispatching(svc, run_id: str):
    """On a shared journal, the run's App processes are reached through their executors' claims (R-S2)."""
    from contextlib import nullcontext

    if not shared_journal():
        return nullcontext()
    from workrun.workers import dispatching

    return dispatching(svc, run_id)


def _claim_of(svc, run_id: str):
    """The run's claim on a shared journal (its ``lease_until``), or None."""
    from workrun.workers import shared

    return shared(svc).run_claim(run_id)


class _StopClaim:
    """``stop`` on a shared journal: the run's claim plays the scheduler lock's part (R-S2)."""

    def __init__(self, svc, run_id: str) -> None:
        from workrun.workers import Heartbeat, lease_seconds

        self.svc, self.run_id = svc, run_id
        self.beat = Heartbeat(svc.data_dir, lease_seconds())

    def acquire(self) -> None:
        from workrun.errors import SchedulerBusyError

        self.beat.start()
        if not self.beat.claim(self.svc.journal, self.run_id):
            self.beat.stop()
            raise SchedulerBusyError("held by a worker")

    def holder(self) -> dict:
        return self.svc.journal.run_claim(self.run_id) or {}

    def release(self) -> None:
        self.beat.release(self.svc.journal, self.run_id)
        self.beat.stop()


@app.command()
def resume(json_mode: bool = JsonOpt, wait: bool = WaitOpt) -> None:
    """Continue every unfinished run and compensation in the data directory; exit 0 if all ended well.

    \f
    Implements R-R1.
    """
    from workrun.recovery import resume_all
    from workrun.views import run_view

    with scheduling(json_mode, wait, resume_first=False) as svc:
        t0 = svc.now()
        if shared_journal():  # claim runs one by one, like a worker that ends when nothing is left (R-S2)
            from workrun.workers import resume_shared

            handled = resume_shared(svc)
        else:
            handled = resume_all(svc)
        views = [run_view(svc.journal, r) for r in handled]
        # SPEC §10: 0 when every compensation it handled ended succeeded or skipped, and every ticket action it
        # sent or settled (R-M3: a job with attempts, like a compensation; `tickets retry` exits by it too)
        # succeeded; an action that had failed before this command (a dead letter already) is not its doing
        acted = [a for v in views for t in v["tickets"] if t["action"]
                 and (a := svc.journal.ticket_action(t["ticket_id"])) is not None and a["updated_at"] >= t0]
        ok = all(op["compensation"]["status"] in COMPENSATION_DONE
                 for v in views for op in v["operations"] if op["compensation"])
        ok = ok and all(a["status"] == "succeeded" for a in acted)
        if json_mode:
            print_json({"runs": views})
        else:
            if not handled:
                console.print("nothing to resume")
            for v in views:
                console.print(run_table(v))
        code = 130 if svc.stopping() else (0 if ok else 1)
    raise typer.Exit(code)


def _check_compensate(run: dict[str, Any], *, lasting_only: bool = False) -> None:
    """Refuse ``workrun compensate`` of this run row (exit 2): an evaluation run, or one running, succeeded or
    waiting for a person.

    ``lasting_only``: only what resuming a dead runner's work cannot change (evaluation, succeeded, waiting),
    asked before the scheduler lock (the dashboard reports a command that holds it as started, R-U4); a
    ``running`` run may be one a dead runner left, which the command resumes first.

    Raises:
        ActionRefusedError: the run cannot be compensated.
    """
    rid = run["run_id"]
    if run["eval"]:
        raise ActionRefusedError("evaluation runs are never compensated (R-W6)", field="RUN")
    if run["status"] == "running" and not lasting_only:
        raise ActionRefusedError(f"run {rid} is still running; `workrun stop {rid}` first", field="RUN")
    if run["status"] == "succeeded":
        raise ActionRefusedError(f"run {rid} succeeded; succeeded runs are not compensated (R-C1)", field="RUN")
    if run["status"] == "waiting":
        raise ActionRefusedError(f"run {rid} is waiting for a person; `workrun tickets terminate TICKET` "
                                 "ends it and compensates its calls", field="RUN")


@app.command()
def compensate(
    run_id: str = typer.Argument(..., metavar="RUN", help="A stopped, terminated or failed run (id or unique prefix)."),
    json_mode: bool = JsonOpt,
    wait: bool = WaitOpt,
) -> None:
    """Explicitly compensate a stopped or terminated run, or finish a failed run's compensation.

    \f
    Implements R-C9.
    """
    from workrun.operator import actor
    from workrun.recovery import compensate_now
    from workrun.views import run_view

    with reading(json_mode) as ro:  # an unknown id or a refusal is exit 2 at once, even while another scheduler runs
        _check_compensate(ro.journal.run(run_id), lasting_only=True)
    with scheduling(json_mode, wait) as svc:
        run = svc.journal.run(run_id)
        rid = run["run_id"]
        _check_compensate(run)  # again: the run may have moved while this command waited for the lock
        if run["status"] in ("stopped", "terminated") and not run["compensate_requested"]:
            svc.journal.request_compensation(rid, {"run_id": rid, "at": svc.now(), "actor": actor(),
                                                   "action": "compensate", "args": {}})
            svc.say(rid, None, "info", f"compensation of {run['status']} run {rid} requested by {actor()}")
        with run_claim(svc, rid, wait):
            compensate_now(svc, rid)
        view = run_view(svc.journal, rid)
        comps = [op["compensation"] for op in view["operations"] if op["compensation"]]
        ok = all(c["status"] in COMPENSATION_DONE for c in comps)
        if json_mode:
            print_json(view)
        else:
            console.print(run_table(view))
        code = 130 if svc.stopping() else (0 if ok else 1)
    raise typer.Exit(code)


@app.command()
def gc(dry_run: bool = typer.Option(False, "--dry-run", help="Only say what would be removed.")) -> None:
    """Remove code snapshots that no unfinished compensation needs, and stale call directories (exit 1 when one
    cannot be removed)."""
    from workrun.operations import gc_call_dirs
    from workrun.snapshots import gc as snapshots_gc

    with scheduling(False, False, resume_first=False) as svc:
        removed, kept = snapshots_gc(svc, dry_run=dry_run)
        console.print(f"{'would remove' if dry_run else 'removed'} {removed} snapshot(s); kept {kept}")
        removed, kept, failed = gc_call_dirs(svc, dry_run=dry_run)
        console.print(f"{'would remove' if dry_run else 'removed'} {removed} stale call directory(ies); kept {kept}")
        for path in failed:
            print_error(f"{path}: cannot be removed")
    raise typer.Exit(1 if failed else 0)


def _submit(spec, inputs: dict, eval_run: bool, json_mode: bool) -> None:
    """``run --submit``: record the run for workers, print its id, exit 0 (R-S3)."""
    from workrun.engine import create_run
    from workrun.workers import needs_workers

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

    from workrun.cli.output import CliReporter
    from workrun.workers import Worker, lease_seconds, needs_workers

    lease = lease_seconds()
    with reading() as svc:
        needs_workers(svc)
        data_dir = svc.data_dir
    w = Worker(data_dir, concurrency=concurrency, lease=lease, reporter=CliReporter(quiet=False, with_run=True),
               idle_exit=idle_exit, executors=executors)

    def on_signal(signum: int, frame: object) -> None:
        if w.draining.is_set():
            os._exit(130)
        console.print(f"worker {w.worker_id}: ending after the runs in hand (again to end now)")
        w.draining.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_signal)
    console.print(f"worker {w.worker_id} (concurrency {concurrency}, executors {w.slots}, lease {lease:g} s) on "
                  "the shared journal")
    code = w.run()
    console.print(f"worker {w.worker_id}: drove {w.driven} run(s), executed "
                  f"{w.executors.executed if w.executors else 0} call(s)")
    raise typer.Exit(code)

