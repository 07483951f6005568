"""One scheduler per data directory (R-J3): a file lock plus a note naming its holder.

The lock is an OS file lock (``filelock``), released by the kernel when the
holder dies, so a lock left by a killed process is taken over safely. The
holder note (pid, command, since) is only for the refusal message.
"""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from filelock import FileLock, Timeout

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
        self._lock = FileLock(str(data_dir / "scheduler.lock"), thread_local=False)
        self._note = data_dir / "scheduler.json"

    def holder(self) -> dict[str, object]:
        """The last holder's note: ``{pid, command, since}`` (may be stale if nobody holds the lock)."""
        try:
            return json.loads(self._note.read_text())
        except (OSError, ValueError):
            return {}

    def acquire(self) -> SchedulerLock:
        """Take the lock (see class doc)."""
        try:
            self._lock.acquire(timeout=-1 if self.wait else 0)
        except Timeout:
            h = self.holder()
            raise SchedulerBusyError(
                f"another scheduler holds {self.data_dir}: pid {h.get('pid', '?')} "
                f"(`{h.get('command', '?')}`, since {h.get('since', '?')}); wait for it or use --wait") from None
        note = {"pid": os.getpid(), "command": " ".join(["workrun", *sys.argv[1:]]),
                "since": datetime.now(UTC).isoformat(timespec="seconds"), "at": time.time()}
        tmp = self._note.with_suffix(".tmp")
        tmp.write_text(json.dumps(note))
        os.replace(tmp, self._note)
        return self

    def release(self) -> None:
        """Release the lock."""
        if self._lock.is_locked:
            self._lock.release()

    def __enter__(self) -> SchedulerLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
