"""What every use case shares: Services on a data directory, the scheduler lock or a run's claim, signals.

Nothing here prints: progress goes to the :class:`~workrun.runner.context.Reporter` a surface hands in
(the CLI's prints, the API's is silent).
"""

from __future__ import annotations

import gc
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from workrun.journal import Journal
    from workrun.runner.context import Reporter
    from workrun.runner.services import Services

__all__ = ["reading", "run_claim", "scheduling", "serve_metrics", "shared_journal", "start_up", "viewing"]

_HELD = False  # cyclic garbage collection is off for a command's start-up (:func:`start_up`)


@contextmanager
def start_up() -> Iterator[None]:
    """A CLI command's start-up (issue 33): no cyclic garbage collection while it loads its modules and reads its
    workflow. Start-up makes ~10,000 objects that live as long as the process (modules, classes, functions);
    the one collection that came in the middle of it went through all of them: 2-10 ms of wall time (while the
    fork server and the journal's check start on the other core), ~1.5 ms of CPU. Measured on a 1-node
    ``workrun run``, 30 interleaved pairs: median 93.0 -> 90.0 ms whole process, CPU 121.1 -> 119.5 ms.

    The hold ends when :func:`scheduling` starts (what was loaded is frozen out of later collections, which then
    go on as usual: a run of any length collects its garbage), or at the latest when the block ends. Does
    nothing when collection is off already (a program's own choice is kept) or held by an outer block.
    """
    global _HELD
    if _HELD or not gc.isenabled():
        yield
        return
    gc.disable()
    _HELD = True
    try:
        yield
    finally:
        if _HELD:  # ended before scheduling (an error, a dry run): collection as before, nothing frozen
            _HELD = False
            gc.enable()


def _settled() -> None:
    """Start-up is over: what it loaded lives as long as the command, so later collections skip it
    (``gc.freeze``, issue 14); a hold of :func:`start_up` ends."""
    global _HELD
    gc.freeze()
    if _HELD:
        _HELD = False
        gc.enable()


def _services(home: Path | str | None, reporter: Reporter | None, *, check: bool, writable: bool) -> Services:
    from workrun.runner.services import Services

    data_dir = None
    if home is not None:
        from workrun.core.paths import data_dir as checked_dir
        from workrun.core.paths import private_umask

        data_dir = checked_dir(write=writable, home=home)
        private_umask()
    from workrun.repair.policy import open_ticket

    return Services(data_dir, reporter=reporter, check=check, writable=writable, open_ticket=open_ticket)


@contextmanager
def viewing(*, home: Path | str | None = None) -> Iterator[Journal]:
    """The journal alone, for a use case that only reads it (R-P3: no App runner, no Services).

    Opened as :func:`reading` opens it (no integrity check, read-only when the data dir is not writable by
    this user); the same data directory and settings checks apply.

    Args:
        home: the data directory (None: ``WORKRUN_HOME``, else the platform's).

    Raises:
        ConfigError: a bad ``WORKRUN_*`` setting or data directory (exit 2; SPEC §17).
    """
    from workrun.core import settings
    from workrun.core.paths import data_dir, private_umask
    from workrun.journal import open_journal

    settings.current()
    path = data_dir(write=False, home=home)
    private_umask()  # as Services: anything the journal writes in the data dir is private (SPEC §17)
    journal = open_journal(path, check=False, writable=False)
    try:
        yield journal
    finally:
        journal.close()


@contextmanager
def reading(*, home: Path | str | None = None, writable: bool = False,
            reporter: Reporter | None = None) -> Iterator[Services]:
    """Services for a use case that takes no scheduler lock (works while a scheduler runs).

    Args:
        home: the data directory (None: ``WORKRUN_HOME``, else the platform's, R-J4).
        writable: it writes (a standalone call, a stop request); else it may read a data dir it cannot write.
        reporter: where progress goes (None: nowhere).

    Raises:
        ConfigError: a bad data directory or ``WORKRUN_*`` setting (exit 2, SPEC §17).
    """
    svc = _services(home, reporter, check=False, writable=writable)
    try:
        yield svc
    finally:
        svc.close()


@contextmanager
def scheduling(*, home: Path | str | None = None, wait: bool = False, resume_first: bool = True,
               reporter: Reporter | None = None) -> Iterator[Services]:
    """Services holding the scheduler lock (R-J3), with Ctrl-C/SIGTERM meaning *stop* (R-C9) when called from
    the main thread (a thread of an embedding program keeps its own signal handling).

    Pending work left by an earlier runner is resumed first, and the reporter is told (R-R1).

    Args:
        home: the data directory (None: ``WORKRUN_HOME``, else the platform's).
        wait: wait for another scheduler instead of raising.
        resume_first: resume unfinished runs before the use case (SQLite journal only).
        reporter: where progress goes (None: nowhere).

    Raises:
        SchedulerBusyError: another scheduler holds the data dir (exit 3), unless ``wait``.
        ConfigError: a bad data directory or setting (exit 2).
    """
    from workrun.core.lock import SchedulerLock

    _settled()  # what start-up loaded lives as long as the command: later collections skip it
    serve_metrics()
    svc = _services(home, reporter, check=True, writable=True)
    shared = shared_journal()
    if shared:  # a shared journal (R-S2): each run is claimed by whoever drives it, not the data directory
        resume_first = False

    def waiting(holder: dict[str, Any]) -> None:  # --wait: the person is told why nothing happens yet
        svc.reporter.message(None, None, "info", f"waiting for another scheduler: pid {holder.get('pid', '?')} "
                             f"(`{holder.get('command', '?')}`, since {holder.get('since', '?')})")

    try:
        lock = None if shared else SchedulerLock(svc.data_dir, wait=wait, waiting=waiting).acquire()
        gauge = None
        if shared:  # the calls queued for workers (R-F4); a SQLite journal's command never loads the fleet
            from workrun.cluster.workers import queue_depth_gauge

            gauge = queue_depth_gauge(svc.data_dir)
    except BaseException:
        svc.close()
        raise
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

    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, on_signal)
    try:
        _ = svc.journal  # open + integrity check + migrate before anything else
        if resume_first:
            from workrun.engine.recovery import resume_all, unfinished_runs

            pending = unfinished_runs(svc)
            if pending:
                svc.reporter.message(None, None, "warning",
                                     f"resuming {len(pending)} unfinished run(s) first: {', '.join(pending)}")
                resume_all(svc, past_internal_errors=True)  # one broken run must not stop every command
        yield svc
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if lock is not None:
            lock.release()
        if gauge is not None:
            gauge.close()
        svc.close()


def serve_metrics(port: int | None = None, host: str = "127.0.0.1") -> None:
    """Serve Prometheus metrics on ``host:port`` (default ``WORKRUN_METRICS_PORT``; nothing when unset, R-F4).

    Raises:
        UsageError: the address cannot be bound (exit 2, naming it).
    """
    from workrun.core import metrics, settings
    from workrun.core.errors import UsageError

    field = "--metrics-port" if port is not None else "WORKRUN_METRICS_PORT"  # what the person gave
    port = port if port is not None else settings.current().metrics_port
    if port is None:
        return
    try:
        metrics.serve(port, host)
    except OSError as exc:
        raise UsageError(f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}", field=field) from None


def shared_journal() -> bool:
    """True when the journal is shared by workers (``WORKRUN_JOURNAL=postgresql://…``, R-S1).

    Raises:
        ConfigError: a bad ``WORKRUN_JOURNAL`` (exit 2).
    """
    from workrun.journal import journal_url

    return journal_url() is not None


@contextmanager
def run_claim(svc: Services, run_id: str, wait: bool) -> Iterator[None]:
    """Hold the run's claim while a use case schedules it on a shared journal (no-op on SQLite, whose
    file lock already makes this process the only scheduler).

    Raises:
        SchedulerBusyError: a live worker holds the run and ``wait`` is False (exit 3).
    """
    if not shared_journal():
        yield
        return
    from workrun.cluster.workers import holding

    with holding(svc, run_id, wait=wait):
        yield
