"""Reusing a finished call's directory (issue 14): emptied first, taken at most once, never a stale byte."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from workrun.runner import calldir
from workrun.runner.services import Services

KEPT = ("stdout", "stderr", "input.json")


def _finished(calls: Path, name: str) -> Path:
    d = calls / ".trash" / name
    d.mkdir(parents=True)
    for f in (*KEPT, "claim", "result.json", "exit.json", "ended"):
        (d / f).write_text(f"old {f} of {name}\n")
    return d


def _pooled(calls: Path) -> list[str]:
    return sorted(os.listdir(calls / ".pool"))


def _new_call(calls: Path, name: str) -> Path:
    d = calls / name
    if not calldir.take_dir(d):
        d.mkdir()
    return d


def test_a_recycled_directory_comes_back_with_empty_outputs_and_the_input_is_the_new_one(tmp_path):
    calls = tmp_path / "calls"
    calls.mkdir()
    old = _finished(calls, "op_old")
    inodes = {f: os.stat(old / f).st_ino for f in (".", *KEPT)}
    assert calldir.recycle(old, calls)
    assert not old.exists()
    new = _new_call(calls, "op_new")
    assert {f: os.stat(new / f).st_ino for f in (".", *KEPT)} == inodes  # no inode allocated
    assert sorted(os.listdir(new)) == ["input.json", "stderr", "stdout"]  # no claim, result or exit record
    assert (new / "stdout").read_bytes() == b"" and (new / "stderr").read_bytes() == b""
    for data in ({"n": 1, "pad": "x" * 100}, {"n": 2}):  # written over what is there, longer or shorter
        calldir.write_input(new, {"kind": "process", "input": data})
        assert json.loads((new / "input.json").read_text()) == {"v": 1, "kind": "process", "input": data}
    assert os.stat(new / "input.json").st_ino == inodes["input.json"]
    # the pool is empty now: the next call's directory is a new one
    other = _new_call(calls, "op_other")
    assert os.listdir(other) == []
    calldir.write_input(other, {"kind": "process", "input": {}})
    assert os.listdir(other) == ["input.json"]


def test_the_pool_is_bounded_and_shared_with_a_later_process(tmp_path, monkeypatch):
    calls = tmp_path / "calls"
    calls.mkdir()
    monkeypatch.setattr(calldir, "POOL_DIRS", 2)
    done = [calldir.recycle(_finished(calls, f"op_{i}"), calls) for i in range(3)]
    assert done == [True, True, False]  # the third stays where it was: its caller removes it
    assert (calls / ".trash" / "op_2").is_dir()
    assert len(_pooled(calls)) == 2
    monkeypatch.setattr(calldir, "_POOLS", {})  # a new runner process finds what the last one left
    assert calldir.take_dir(calls / "op_new0") and calldir.take_dir(calls / "op_new1")
    assert not calldir.take_dir(calls / "op_new2")
    assert _pooled(calls) == []


def test_a_directory_taken_by_another_process_is_skipped(tmp_path):
    calls = tmp_path / "calls"
    calls.mkdir()
    for name in ("op_a", "op_b"):
        calldir.recycle(_finished(calls, name), calls)
    os.rename(calls / ".pool" / _pooled(calls)[0], tmp_path / "elsewhere")  # another runner took one meanwhile
    assert calldir.take_dir(calls / "op_new")
    assert sorted(os.listdir(calls / "op_new")) == ["input.json", "stderr", "stdout"]
    assert not calldir.take_dir(calls / "op_next")


def test_discard_frees_the_name_at_once_and_recycles_only_when_asked(tmp_path):
    svc = Services(tmp_path / "data", check=False)
    try:
        for name, recycle in (("op_a", False), ("op_b", True)):
            d = svc.call_dir(name)
            (d / "stdout").write_text("out\n")
            (d / "input.json").write_text("{}")
            svc.discard(d, recycle=recycle)
            assert not d.exists()
            svc.call_dir(name)  # the name is free again
    finally:
        svc.close()
    calls = tmp_path / "data" / "calls"
    assert len(_pooled(calls)) == 1 and _pooled(calls)[0].startswith("d-op_b.")  # op_b's only
    assert os.listdir(calls / ".trash") == []


def test_tidy_removes_in_the_calling_thread_and_the_janitor_removes_what_tidy_left(tmp_path):
    svc = Services(tmp_path / "data", check=False)
    trash = tmp_path / "data" / "calls" / ".trash"
    try:
        d = svc.call_dir("op_a")
        svc.discard(d, recycle=True)
        assert len(os.listdir(trash)) == 1  # queued: nothing removed on the caller's path
        svc.tidy()
        assert os.listdir(trash) == []  # done by tidy, at once
        svc.discard(svc.call_dir("op_b"), recycle=False)
        end = time.monotonic() + 10
        while os.listdir(trash) and time.monotonic() < end:  # nobody tidies: the janitor's thread does it
            time.sleep(0.05)
        assert os.listdir(trash) == []
    finally:
        svc.close()


def test_what_a_killed_runner_left_in_the_trash_goes_and_new_discards_are_not_caught_in_it(tmp_path):
    svc = Services(tmp_path / "data", check=False)
    calls = tmp_path / "data" / "calls"
    left = _finished(calls, "op_killed")  # in .trash: a runner was killed before removing it
    try:
        d = svc.call_dir("op_new")
        (d / "stdout").write_text("out\n")
        svc.discard(d, recycle=True)
    finally:
        svc.close()
    assert not left.exists()
    assert len(_pooled(calls)) == 1  # op_new's directory, recycled
    assert sorted(n for n in os.listdir(calls) if n.startswith(".trash")) == [".trash"]


def test_a_recycled_directory_never_replaces_an_existing_one(tmp_path):
    calls = tmp_path / "calls"
    calls.mkdir()
    old = _finished(calls, "op_old")
    ino = os.stat(old).st_ino
    calldir.recycle(old, calls)
    (calls / "op_taken").mkdir()
    assert not calldir.take_dir(calls / "op_taken")  # exists: the caller's mkdir fails as it should
    assert calldir.take_dir(calls / "op_new") and os.stat(calls / "op_new").st_ino == ino
    assert not calldir.take_dir(calls / "op_other")  # the pool had one


def test_a_directory_taken_from_the_pool_is_new_by_its_time(tmp_path):
    """``workrun gc`` tells a stale directory by its time: a pooled one becomes a new call's with a new one."""
    calls = tmp_path / "calls"
    calls.mkdir()
    calldir.recycle(_finished(calls, "op_old"), calls)
    (pooled,) = (calls / ".pool").iterdir()
    os.utime(pooled, (time.time() - 3600, time.time() - 3600))
    assert calldir.take_dir(calls / "op_new")
    assert time.time() - os.stat(calls / "op_new").st_mtime < 60


def test_a_call_file_swapped_for_a_symlink_or_linked_elsewhere_is_never_followed_or_emptied(tmp_path):
    """An App that replaced its input.json by a symlink to another file, or hard-linked its stdout elsewhere:
    recycling removes the link and never empties, pools or writes through what it points at."""
    calls = tmp_path / "calls"
    calls.mkdir()
    victim, copy = tmp_path / "victim.txt", tmp_path / "linked.txt"
    victim.write_text("precious\n")
    old = _finished(calls, "op_evil")
    (old / "input.json").unlink()
    (old / "input.json").symlink_to(victim)
    os.link(old / "stdout", copy)
    assert calldir.recycle(old, calls)
    assert victim.read_text() == "precious\n" and copy.read_text() == "old stdout of op_evil\n"
    new = _new_call(calls, "op_next")
    assert os.listdir(new) == ["stderr"]
    calldir.write_input(new, {"kind": "process", "input": {}})
    assert victim.read_text() == "precious\n"
    assert not any((new / f).is_symlink() for f in os.listdir(new))


def test_a_directory_with_a_subdirectory_is_not_pooled(tmp_path):
    calls = tmp_path / "calls"
    calls.mkdir()
    old = _finished(calls, "op_odd")
    (old / "sub").mkdir()
    assert not calldir.recycle(old, calls)
    assert not calldir.take_dir(calls / "op_new")


def test_loose_files_an_earlier_version_pooled_are_removed(tmp_path):
    calls = tmp_path / "calls"
    (calls / ".pool" / "d-0123").mkdir(parents=True)  # an empty directory it pooled: still usable
    (calls / ".pool" / "0abc").write_text("")
    assert calldir.take_dir(calls / "op_new") and os.listdir(calls / "op_new") == []
    assert _pooled(calls) == []


def test_outputs_are_emptied_only_when_they_hold_data(tmp_path):
    """Both launchers open the call's stdout and stderr emptied; an empty one is not truncated again (on ext4
    that makes its next data go to disk at close: see workrun_sdk._wire.open_empty)."""
    from workrun_sdk import _wire

    full, empty = tmp_path / "full", tmp_path / "empty"
    full.write_bytes(b"old output\n")
    empty.write_bytes(b"")
    before = os.stat(empty).st_ctime_ns
    time.sleep(0.02)
    for path in (full, empty):
        os.close(_wire.open_empty(path))
    assert full.read_bytes() == b"" and empty.read_bytes() == b""
    assert os.stat(empty).st_ctime_ns == before  # never truncated
    fd = _wire.open_empty(tmp_path / "new")
    os.close(fd)
    assert (tmp_path / "new").read_bytes() == b"" and (os.stat(tmp_path / "new").st_mode & 0o777) == 0o600


def test_an_exit_record_too_big_or_not_a_file_is_no_record_and_is_not_read(tmp_path):
    """Crash review: a 3 GB ``exit.json`` (the data directory damaged, or an App that wrote it) was read whole by
    ``resume`` (6 GB of memory); a FIFO there would be waited on for ever. Neither is an exit record: the call
    is decided as one without (unknown), and nothing of it is read."""
    import threading
    import tracemalloc

    from workrun.runner.calldir import EXIT_RECORD_BYTES, read_exit

    good = tmp_path / "good"
    good.mkdir()
    (good / "exit.json").write_text(json.dumps({"v": 1, "exit_code": 3, "signal": None}))
    assert read_exit(good).exit_code == 3
    big = tmp_path / "big"
    big.mkdir()
    with open(big / "exit.json", "wb") as fh:  # sparse: 64 MiB of nothing, on no disk
        fh.truncate(64 << 20)
    tracemalloc.start()
    try:
        assert read_exit(big) is None
        assert tracemalloc.get_traced_memory()[1] < EXIT_RECORD_BYTES * 16
    finally:
        tracemalloc.stop()
    fifo = tmp_path / "fifo"
    fifo.mkdir()
    os.mkfifo(fifo / "exit.json")
    got: list[object] = []
    reader = threading.Thread(target=lambda: got.append(read_exit(fifo)), daemon=True)
    reader.start()
    reader.join(10)
    assert got == [None], "a FIFO in place of the exit record was waited on"
