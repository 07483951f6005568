"""One scheduler per data directory (R-J3): a file lock plus a note naming its holder.

The lock is an OS file lock (``flock(2)`` of the data directory and of
``scheduler.lock``, what ``filelock`` takes on Unix), released by the kernel
when the holder dies, so a lock left by a killed process is taken over safely. The holder note (pid,
command, since) is only for the refusal message. It is taken directly, without
``filelock``: every scheduling command takes it, and importing ``filelock``
costs 10-17 ms of their start-up (issue 33); ``filelock`` still guards the App
environments' sync (:mod:`workrun.runner.env`), which is off that path.
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from workrun.core.errors import SchedulerBusyError

__all__ = ["SchedulerLock"]


class SchedulerLock:
    """Hold the scheduler lock of ``data_dir`` for the life of a scheduling command.

    Args:
        data_dir: Workrun's data directory.
        wait: wait for the holder to finish instead of refusing (``--wait``).

    Raises (from :meth:`acquire`):
        SchedulerBusyError: another live process holds it and ``wait`` is False (exit 3).
    """

    def __init__(self, data_dir: Path, *, wait: bool = False,
                 waiting: Callable[[dict[str, object]], None] | None = None) -> None:
        self.data_dir = data_dir
        self.wait = wait
        self.waiting = waiting  # with ``wait``: told the holder's note once, when it has to wait
        self._path = data_dir / "scheduler.lock"
        self._fds: list[int] = []
        self._note = data_dir / "scheduler.json"

    def holder(self) -> dict[str, object]:
        """The last holder's note: ``{pid, command, since}`` (may be stale if nobody holds the lock)."""
        try:
            note = json.loads(self._note.read_text())
        except (OSError, ValueError):
            return {}
        return note if isinstance(note, dict) else {}

    def acquire(self) -> SchedulerLock:
        """Take the lock (see class doc): at once, or blocking until the holder ends with ``wait``.

        Two locks, in this order: the data directory itself, which cannot be deleted and made again under a live
        holder as a file can (a hostile test removed ``scheduler.lock`` and a second scheduler took over a live
        run, R-J3), then ``scheduler.lock``, the lock Workrun took before (so an older ``workrun`` on the same
        data directory is kept out too).

        Raises:
            SchedulerBusyError: another live process holds it and ``wait`` is False (exit 3).
            OSError: the data directory or the lock file cannot be opened.
        """
        if self._fds:  # held already by this object
            return self
        fds: list[int] = []
        try:
            told = False
            for path, flags in ((self.data_dir, os.O_RDONLY | os.O_DIRECTORY), (self._path, os.O_RDWR | os.O_CREAT)):
                fds.append(os.open(path, flags | os.O_CLOEXEC, 0o600))
                try:
                    fcntl.flock(fds[-1], fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    if not self.wait:
                        raise
                    if self.waiting is not None and not told:  # a person waiting is told for whom (--wait)
                        told = True
                        self.waiting(self._holder_named())
                    fcntl.flock(fds[-1], fcntl.LOCK_EX)
        except BlockingIOError:
            for fd in fds:  # closing it releases what it held
                os.close(fd)
            h = self._holder_named()
            raise SchedulerBusyError(
                f"another scheduler holds {self.data_dir}: pid {h.get('pid', '?')} "
                f"(`{h.get('command', '?')}`, since {h.get('since', '?')}); wait for it or use --wait") from None
        except BaseException:  # interrupted while waiting (Ctrl-C): nothing is held
            for fd in fds:
                os.close(fd)
            raise
        self._fds = fds
        note = {"pid": os.getpid(), "command": " ".join(["workrun", *sys.argv[1:]]),
                "since": datetime.now(UTC).isoformat(timespec="seconds"), "at": time.time()}
        tmp = self._note.with_suffix(".tmp")
        tmp.write_text(json.dumps(note))
        os.replace(tmp, self._note)
        return self

    def _holder_named(self, wait: float = 1.0) -> dict[str, object]:
        """The holder's note for a refusal: a holder that took the lock a moment ago writes its note just after,
        so a note naming no live process is looked at again for up to ``wait`` seconds (SPEC §10: the refusal
        names the holder's pid)."""
        end = time.monotonic() + wait
        note = self.holder()
        while not _alive(note.get("pid")) and time.monotonic() < end:
            time.sleep(0.02)
            note = self.holder()
        return note

    def release(self) -> None:
        """Release the lock (nothing when it is not held)."""
        fds, self._fds = self._fds, []
        for fd in reversed(fds):
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)

    def __enter__(self) -> SchedulerLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def _alive(pid: object) -> bool:
    """True when ``pid`` is a live process's (``kill(pid, 0)``)."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except PermissionError:
        return True
    except (OSError, OverflowError):
        return False
    return True
