"""What every command shares without typer: Services, the scheduler lock, signals, exit codes.

Typer-free so that a command line run without typer's parsing (:mod:`workrun.cli.quick`: the plain read
commands and ``run``) imports none of it (R-P3, issue 14).
"""

from __future__ import annotations

import gc
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from workrun.cli.output import CliReporter, console, print_json, run_table

if TYPE_CHECKING:
    from workrun.services import Services

__all__ = ["EXIT", "finish_run", "reading", "run_claim", "scheduling", "shared_journal"]

EXIT = {"succeeded": 0, "failed": 1, "terminated": 1, "waiting": 4, "stopped": 130}  # SPEC §16


@contextmanager
def reading(json_mode: bool = False, *, writable: bool = False) -> Iterator[Services]:
    """Services for a command that takes no scheduler lock (works while a scheduler runs).

    Args:
        writable: the command writes (a standalone call); else it may read a data dir it cannot write.
    """
    from workrun.services import Services

    svc = Services(reporter=CliReporter(quiet=json_mode), check=False, writable=writable)
    try:
        yield svc
    finally:
        svc.close()


@contextmanager
def scheduling(json_mode: bool, wait: bool, *, resume_first: bool = True) -> Iterator[Services]:
    """Services holding the scheduler lock (R-J3), with Ctrl-C/SIGTERM meaning *stop* (R-C9).

    Pending work left by an earlier runner is resumed first, and the user is told (R-R1).

    Raises:
        SchedulerBusyError: another scheduler holds the data dir (exit 3), unless ``wait``.
    """
    from workrun.lock import SchedulerLock
    from workrun.services import Services

    gc.freeze()  # what start-up loaded lives as long as the command: later collections skip it (issue 14)
    svc = Services(reporter=CliReporter(quiet=json_mode))
    shared = shared_journal()
    if shared:  # a shared journal (R-S2): each run is claimed by whoever drives it, not the data directory
        resume_first = False
    lock = None if shared else SchedulerLock(svc.data_dir, wait=wait).acquire()
    previous: dict[int, Any] = {}

    def on_signal(signum: int, frame: Any) -> None:
        first = not svc.stopping()
        svc.request_stop()  # first: saying so must never keep the stop from happening
        if first:
            try:
                svc.reporter.message(None, None, "warning",
                                     "stop requested: ending App processes (side effects are not undone)")
            except Exception:  # e.g. the signal came while the main thread was importing what printing needs
                pass

    for sig in (signal.SIGINT, signal.SIGTERM):
        previous[sig] = signal.signal(sig, on_signal)
    try:
        _ = svc.journal  # open + integrity check + migrate before anything else
        if resume_first:
            from workrun.recovery import resume_all, unfinished_runs

            pending = unfinished_runs(svc)
            if pending:
                svc.reporter.message(None, None, "warning",
                                     f"resuming {len(pending)} unfinished run(s) first: {', '.join(pending)}")
                resume_all(svc)
        yield svc
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if lock is not None:
            lock.release()
        svc.close()


def finish_run(svc: Services, run_id: str, json_mode: bool) -> int:
    """Print the run (table or JSON) and return the exit code its status means (SPEC §16)."""
    from workrun.views import run_detail

    view = run_detail(svc.journal, run_id)
    if json_mode:
        print_json(view)
        for t in view["tickets"]:  # the JSON is on stdout; the two ways on still reach the person, on stderr
            if t["status"] == "pending" and view["status"] == "waiting":
                print(f"waiting for a person: ticket {t['ticket_id']} (node {t['node_key']}): `workrun tickets "
                      f"resume {t['ticket_id']}` or `workrun tickets terminate {t['ticket_id']}`", file=sys.stderr)
    else:
        console.print()
        console.print(run_table(view))
        if view["unfinished_compensations"]:
            console.print(f"[yellow]{len(view['unfinished_compensations'])} compensation(s) not finished[/]: "
                          f"see `workrun runs show {run_id}`, `workrun resume`, `workrun compensations list "
                          f"--run {run_id}`")
        for t in view["tickets"]:
            if t["status"] == "pending" and view["status"] == "waiting":
                console.print(f"[yellow]waiting for a person[/]: ticket {t['ticket_id']} (node {t['node_key']}): "
                              f"`workrun tickets resume {t['ticket_id']}` or `workrun tickets terminate "
                              f"{t['ticket_id']}`")
    return EXIT.get(view["status"], 1)


def shared_journal() -> bool:
    """True when the journal is shared by workers (``WORKRUN_JOURNAL=postgresql://…``, R-S1).

    Raises:
        ConfigError: a bad ``WORKRUN_JOURNAL`` (exit 2).
    """
    from workrun.journal import journal_url

    return journal_url() is not None


@contextmanager
def run_claim(svc: Services, run_id: str, wait: bool) -> Iterator[None]:
    """Hold the run's claim while a command schedules it on a shared journal (no-op on SQLite, whose
    file lock already makes this command the only scheduler).

    Raises:
        SchedulerBusyError: a live worker holds the run and ``wait`` is False (exit 3).
    """
    if not shared_journal():
        yield
        return
    from workrun.workers import holding

    with holding(svc, run_id, wait=wait):
        yield
