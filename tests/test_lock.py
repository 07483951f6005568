"""The scheduler lock (R-J3): one scheduler per data directory, whatever happens to its files; a refusal names
the live holder (SPEC §10). Found by a hostile test: removing ``scheduler.lock`` let a second scheduler in."""

from __future__ import annotations

import json
import os
import threading
import time

import pytest

from workrun.core.errors import SchedulerBusyError
from workrun.core.lock import SchedulerLock


def test_removing_the_lock_file_lets_no_second_scheduler_in(tmp_path):
    first = SchedulerLock(tmp_path).acquire()
    try:
        (tmp_path / "scheduler.lock").unlink()
        with pytest.raises(SchedulerBusyError, match=f"pid {os.getpid()} "):
            SchedulerLock(tmp_path).acquire()
    finally:
        first.release()
    second = SchedulerLock(tmp_path).acquire()  # released: taken at once
    second.release()


def test_the_lock_file_alone_still_keeps_a_second_scheduler_out(tmp_path):
    """``scheduler.lock`` is still locked too: a ``workrun`` from before that locks only the file is kept out."""
    import fcntl

    fd = os.open(tmp_path / "scheduler.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(SchedulerBusyError):
            SchedulerLock(tmp_path).acquire()
        after = SchedulerLock(tmp_path)  # nothing was kept by the refusal: the directory is free again
        fcntl.flock(fd, fcntl.LOCK_UN)
        after.acquire().release()
    finally:
        os.close(fd)


def test_a_refusal_names_the_live_holder_whose_note_comes_a_moment_late(tmp_path):
    holder = SchedulerLock(tmp_path).acquire()
    try:
        note = tmp_path / "scheduler.json"
        theirs = json.loads(note.read_text())
        note.write_text(json.dumps({"pid": 2 ** 22 + 12345, "command": "workrun old", "since": "then"}))  # dead

        def write_late() -> None:
            time.sleep(0.3)
            note.write_text(json.dumps(theirs))

        threading.Thread(target=write_late).start()
        with pytest.raises(SchedulerBusyError, match=f"pid {os.getpid()} "):
            SchedulerLock(tmp_path).acquire()
    finally:
        holder.release()


def test_waiting_takes_the_lock_once_the_holder_releases_it(tmp_path):
    holder = SchedulerLock(tmp_path).acquire()
    threading.Timer(0.3, holder.release).start()
    t0 = time.monotonic()
    SchedulerLock(tmp_path, wait=True).acquire().release()
    assert time.monotonic() - t0 >= 0.25
