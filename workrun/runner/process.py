"""App processes: spawning in their own process group, telling them apart, ending them (R-A7, R-C9).

- :func:`spawn_app_process` is the one place a process is spawned (``WORKRUN_LAUNCH=spawn``);
  :mod:`workrun.runner.forkserver` forks calls otherwise (R-P1).
- :class:`Watchdog` is one background thread that ends process groups at their
  deadline or on stop: SIGTERM, then SIGKILL after the grace period, driven from
  the same loop (no thread per kill).
- :func:`wait` blocks in ``Popen.wait()`` or on a pidfd (no polling on the hot path).
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

from workrun.core.structs import struct
from workrun.runner.base import RUNNING_AFTER, Outcome
from workrun.runner.calldir import fence, read_exit
from workrun.runner.forkserver import ForkedProcess
from workrun_sdk import _wire

__all__ = ["Watchdog", "alive", "kill_group", "proc_start_time", "spawn_app_process", "wait", "wait_exit"]


def spawn_app_process(argv: list[str], cwd: Path, env: dict[str, str], stdout: Path,
                      stderr: Path) -> subprocess.Popen[bytes]:
    """Start ``argv`` in a new session (its own process group), stdin from /dev/null, output to files.

    Args:
        argv: the command (the App's python, the SDK launcher, the entry script).
        cwd: the working directory (the App project).
        env: the whole environment of the process.
        stdout / stderr: files to create for the process's output (so it survives the runner dying, R-R3).

    Raises:
        OSError: the process cannot be started.
    """
    out = _wire.open_empty(stdout)  # emptied only when not empty (a pooled file is): see open_empty
    try:
        err = _wire.open_empty(stderr)
        try:
            return subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                    start_new_session=True, close_fds=True)
        finally:
            os.close(err)
    finally:
        os.close(out)


def proc_start_time(pid: int) -> str | None:
    """Return the process's start time (``/proc/PID/stat`` field 22) to tell a reused pid apart, or None
    (the one reading the supervisor's claim uses too: :func:`workrun_sdk._wire.start_time`)."""
    return _wire.start_time(pid)


def alive(pid: int, start: str | None) -> bool:
    """True when ``pid`` is a live (not zombie) process and, when ``start`` is given, the same one."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    now = proc_start_time(pid)
    if now is None:  # not Linux: trust kill(0)
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            state = fh.read().decode(errors="replace").rsplit(")", 1)[1].split()[0]
        if state == "Z":
            return False
    except (OSError, IndexError):
        pass
    return start is None or now == start


def wait_exit(pid: int, timeout: float) -> None:
    """Block until ``pid`` (not necessarily our child) exits or ``timeout`` seconds pass (a pidfd on Linux;
    a short sleep elsewhere). Returns None: the caller looks again with :func:`alive`."""
    if _exited_within(pid, timeout) is None:
        time.sleep(min(timeout, 0.05))


def _exited_within(pid: int, timeout: float) -> bool | None:
    """True when ``pid`` has exited (a zombie at least) within ``timeout`` seconds, False when it is still
    going, None when there is no pidfd to tell (Linux before 5.3, other platforms)."""
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        return bool(poller.poll(max(0, int(timeout * 1000))))
    finally:
        os.close(fd)


def _signal_group(pgid: int, sig: int) -> bool:
    """Send ``sig`` to the group; False when the group is gone."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


# The group's leader is the call's supervisor: on SIGTERM it ends every descendant itself (also those that
# left the group: SPEC §17), SIGKILLing what is alive after the grace period, then exits. The group gets
# SIGKILL from the runner only when it is still there this long after that (a stuck or killed supervisor).
SUPERVISOR_MARGIN = 2.0


def kill_group(pgid: int, grace: float) -> None:
    """SIGTERM the process group, wait for it to go, then SIGKILL it (R-A7, R-C9). Blocks.

    The supervisor (the group's leader) ends every descendant within ``grace`` seconds; the group gets
    SIGKILL here when it is still there ``grace + SUPERVISOR_MARGIN`` seconds after the SIGTERM.
    """
    if not _signal_group(pgid, signal.SIGTERM):
        return
    end = time.monotonic() + grace + SUPERVISOR_MARGIN
    while time.monotonic() < end:
        if not _signal_group(pgid, 0):
            return
        time.sleep(0.02)
    _signal_group(pgid, signal.SIGKILL)


@struct
class _Watched:
    deadline: float
    timed_out: bool = False
    stopped: bool = False
    term_at: float | None = None  # monotonic time of the SIGTERM, once ending
    killed: bool = False

    @property
    def ending(self) -> bool:
        return self.term_at is not None


class Watchdog:
    """Ends process groups at their deadline or when the run is stopped.

    One background thread sleeps until the next thing is due (at most ``tick`` seconds
    when something is due, so a clock change is caught): a group past its deadline
    gets SIGTERM, and SIGKILL ``grace`` seconds later if it is still there. With
    nothing due sooner it looks once every ``tick``; :meth:`watch` wakes it only
    for a deadline before its next look and :meth:`stop_all` always (a call of
    the usual kind costs the thread no wake-up, issue 14).

    Args:
        grace: seconds between SIGTERM and SIGKILL.
        tick: the longest sleep (seconds) while a deadline or a SIGKILL is pending.
    """

    def __init__(self, grace: float = 5.0, tick: float = 1.0) -> None:
        self.grace = grace
        self.tick = tick
        self._procs: dict[int, _Watched] = {}
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._stop_all = False
        self._until = 0.0  # monotonic time of the thread's next look
        self._thread = threading.Thread(target=self._loop, name="workrun-watchdog", daemon=True)
        self._thread.start()

    def watch(self, pid: int, deadline: float) -> _Watched:
        """Register a process group leader with its deadline (epoch seconds); return its flags."""
        watched = _Watched(deadline)
        with self._lock:
            self._procs[pid] = watched
            if self._stop_all:
                self._end(pid, watched, stopped=True)
            if self._stop_all or time.monotonic() + (deadline - time.time()) < self._until:
                self._wake.notify()
        return watched

    def forget(self, pid: int) -> None:
        """Unregister a process after it was reaped."""
        with self._lock:
            self._procs.pop(pid, None)

    def stop_all(self) -> None:
        """Stop every watched group now and any registered later (R-C9)."""
        with self._lock:
            self._stop_all = True
            for pid, watched in list(self._procs.items()):
                self._end(pid, watched, stopped=True)
            self._wake.notify()

    def _end(self, pid: int, watched: _Watched, *, stopped: bool = False, timed_out: bool = False) -> None:
        watched.stopped = watched.stopped or stopped
        if watched.ending:
            return
        watched.timed_out = watched.timed_out or timed_out
        # A supervisor just forked by a fork server may not lead its group yet (setsid() comes right after the
        # fork): the SIGTERM would be lost, so it is sent again on the next tick until the group exists.
        if _signal_group(pid, signal.SIGTERM):
            watched.term_at = time.monotonic()

    def _due_in(self) -> float:
        """Seconds until the next deadline or SIGKILL, capped at ``tick`` (``tick`` when nothing is pending)."""
        now, mono = time.time(), time.monotonic()
        waits = []
        for w in self._procs.values():
            if w.term_at is None:
                waits.append(w.deadline - now)
            elif not w.killed:
                waits.append(w.term_at + self.grace + SUPERVISOR_MARGIN - mono)
        return min(self.tick, max(0.0, min(waits))) if waits else self.tick

    def _loop(self) -> None:
        while True:
            with self._lock:
                due = self._due_in()
                self._until = time.monotonic() + due
                self._wake.wait(due)
                now, mono = time.time(), time.monotonic()
                for pid, watched in list(self._procs.items()):
                    if not watched.ending and (watched.stopped or watched.timed_out or now >= watched.deadline):
                        self._end(pid, watched, timed_out=not watched.stopped)
                    elif watched.term_at is not None and not watched.killed and \
                            mono - watched.term_at >= self.grace + SUPERVISOR_MARGIN:
                        watched.killed = True
                        _signal_group(pid, signal.SIGKILL)


def _ended_by_supervisor(proc: subprocess.Popen[bytes] | ForkedProcess, code: int | None, record: Outcome) -> bool:
    """True when the call's supervisor itself says every process of the call has ended: a forked one on the
    runner's *done* pipe, which no App process has; a spawned one by exiting the way its record says the App
    did, which it does only after writing ``ended`` (killed before, it exits by SIGKILL instead). Only then is
    the ``ended`` file believed: an App can write one too."""
    if isinstance(proc, ForkedProcess):
        return proc.told
    if record.signal is not None:
        return code == -record.signal
    return code == record.exit_code


def wait(proc: subprocess.Popen[bytes] | ForkedProcess, watchdog: Watchdog, deadline: float,
         call_dir: Path | None = None, *, running: Callable[[], None] | None = None) -> Outcome:
    """Wait for a call's supervisor; the watchdog ends its group at ``deadline`` (epoch seconds) or on stop.

    ``running`` is called once if the call is still going :data:`~workrun.runner.base.RUNNING_AFTER` seconds
    into the wait (a spawned call's at once where there is no pidfd to wait on with a timeout).

    The supervisor's exit record in ``call_dir`` (the App's own exit code or signal) wins over the
    supervisor process's status (SPEC §17: an App ended by a signal is recorded with that signal).
    A supervisor gone without a record (killed) leaves the outcome unknown (R-R3); what is left of
    its group is ended.
    """
    watched = watchdog.watch(proc.pid, deadline)
    try:
        if running is not None:
            if isinstance(proc, ForkedProcess):
                if not proc.wait(RUNNING_AFTER):
                    running()
            elif not _exited_within(proc.pid, RUNNING_AFTER):  # a spawned call: one write fewer when quick
                running()
        if isinstance(proc, ForkedProcess):
            proc.wait()
            code = None  # a forked supervisor is its server's child: its exit record decides
        else:
            code = proc.wait()
    finally:
        watchdog.forget(proc.pid)
    if watched.ending:
        # the leader is gone, but members of its group that ignore SIGTERM may not be: end them all now
        kill_group(proc.pid, watchdog.grace)
    record = read_exit(call_dir) if call_dir is not None else None
    if record is not None:
        if record.ended and not _ended_by_supervisor(proc, code, record):
            record.ended = False  # an ``ended`` file its supervisor did not write (the App's?) is not believed
        if not record.ended:  # its supervisor was killed while ending the App's descendants: end what is left
            kill_group(proc.pid, watchdog.grace)
        record.timed_out, record.stopped = watched.timed_out, watched.stopped
        return record
    if code is None and call_dir is not None and not (call_dir / "claim").is_file() and fence(call_dir):
        # a forked supervisor (whose status we cannot read) gone before it claimed the call: nothing of the
        # App ran, and now nothing ever will
        return Outcome(not_started=True, timed_out=watched.timed_out, stopped=watched.stopped)
    if code is None or (code < 0 and call_dir is not None and (call_dir / "claim").is_file()):
        kill_group(proc.pid, watchdog.grace)  # the supervisor was killed: its App is unsupervised
        return Outcome(unknown=True, timed_out=watched.timed_out, stopped=watched.stopped)
    return Outcome(exit_code=code if code >= 0 else None, signal=-code if code < 0 else None,
                   timed_out=watched.timed_out, stopped=watched.stopped)
