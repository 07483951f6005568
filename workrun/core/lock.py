"""One scheduler per data directory (R-J3): a file lock plus a note naming its holder.

The lock is an OS file lock (``flock(2)`` on ``scheduler.lock``, what
``filelock`` takes on Unix), released by the kernel when the holder dies, so a
lock left by a killed process is taken over safely. The holder note (pid,
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

    def __init__(self, data_dir: Path, *, wait: bool = False) -> None:
        self.data_dir = data_dir
        self.wait = wait
        self._path = data_dir / "scheduler.lock"
        self._fd: int | None = None
        self._note = data_dir / "scheduler.json"

    def holder(self) -> dict[str, object]:
        """The last holder's note: ``{pid, command, since}`` (may be stale if nobody holds the lock)."""
        try:
            return json.loads(self._note.read_text())
        except (OSError, ValueError):
            return {}

    def acquire(self) -> SchedulerLock:
        """Take the lock (see class doc): at once, or blocking until the holder ends with ``wait``.

        Raises:
            SchedulerBusyError: another live process holds it and ``wait`` is False (exit 3).
            OSError: the lock file cannot be opened.
        """
        if self._fd is not None:  # held already by this object
            return self
        fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if self.wait else fcntl.LOCK_NB))
        except BlockingIOError:
            os.close(fd)
            h = self.holder()
            raise SchedulerBusyError(
                f"another scheduler holds {self.data_dir}: pid {h.get('pid', '?')} "
                f"(`{h.get('command', '?')}`, since {h.get('since', '?')}); wait for it or use --wait") from None
        except BaseException:  # interrupted while waiting (Ctrl-C): nothing is held
            os.close(fd)
            raise
        self._fd = fd
        note = {"pid": os.getpid(), "command": " ".join(["workrun", *sys.argv[1:]]),
                "since": datetime.now(UTC).isoformat(timespec="seconds"), "at": time.time()}
        tmp = self._note.with_suffix(".tmp")
        tmp.write_text(json.dumps(note))
        os.replace(tmp, self._note)
        return self

    def release(self) -> None:
        """Release the lock (nothing when it is not held)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)

    def __enter__(self) -> SchedulerLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
