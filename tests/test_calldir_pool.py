"""Reusing a finished call's files (issue 14): emptied first, taken at most once, never a stale byte."""

from __future__ import annotations

import json
import os
from pathlib import Path

from workrun.runner import calldir
from workrun.services import Services


def _finished(calls: Path, name: str) -> Path:
    d = calls / ".trash" / name
    d.mkdir(parents=True)
    for f in ("stdout", "stderr", "input.json", "claim", "result.json"):
        (d / f).write_text(f"old {f} of {name}\n")
    return d


def _pooled_files(calls: Path) -> list[str]:
    return [n for n in os.listdir(calls / ".pool") if not n.startswith("d-")]


def _new_call(calls: Path, name: str) -> Path:
    d = calls / name
    d.mkdir()
    return d


def test_recycled_files_come_back_empty_and_the_input_is_the_new_one(tmp_path):
    calls = tmp_path / "calls"
    calls.mkdir()
    old = _finished(calls, "op_old")
    inodes = {os.stat(old / f).st_ino for f in ("stdout", "stderr", "input.json")}
    calldir.recycle(old, calls)
    assert not old.exists()  # the rest removed, the directory pooled too
    new = _new_call(calls, "op_new")
    calldir.place_outputs(new)
    calldir.write_input(new, {"kind": "process", "input": {"n": 1}})
    assert (new / "stdout").read_bytes() == b"" and (new / "stderr").read_bytes() == b""
    assert json.loads((new / "input.json").read_text()) == {"v": 1, "kind": "process", "input": {"n": 1}}
    assert {os.stat(new / f).st_ino for f in ("stdout", "stderr", "input.json")} == inodes
    assert sorted(os.listdir(new)) == ["input.json", "stderr", "stdout"]
    # the pool is empty now: the next call's files are new ones
    other = _new_call(calls, "op_other")
    calldir.place_outputs(other)
    calldir.write_input(other, {"kind": "process", "input": {}})
    assert sorted(os.listdir(other)) == ["input.json"]


def test_the_pool_is_bounded_and_shared_with_a_later_process(tmp_path, monkeypatch):
    calls = tmp_path / "calls"
    calls.mkdir()
    monkeypatch.setattr(calldir, "POOL_FILES", 4)
    for i in range(3):
        calldir.recycle(_finished(calls, f"op_{i}"), calls)
    assert len(_pooled_files(calls)) == 4
    assert all(os.path.getsize(calls / ".pool" / f) == 0 for f in _pooled_files(calls))
    monkeypatch.setattr(calldir, "_POOLS", {})  # a new runner process finds what the last one left
    for i in range(2):
        calldir.place_outputs(_new_call(calls, f"op_new{i}"))
    assert _pooled_files(calls) == []


def test_a_file_taken_by_another_process_is_skipped(tmp_path):
    calls = tmp_path / "calls"
    calls.mkdir()
    calldir.recycle(_finished(calls, "op_old"), calls)
    for name in _pooled_files(calls)[:2]:  # another runner took two of them meanwhile
        os.rename(calls / ".pool" / name, tmp_path / name)
    new = _new_call(calls, "op_new")
    calldir.place_outputs(new)
    assert sorted(os.listdir(new)) == ["stdout"]  # one left for stdout, stderr will be created by the launcher


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
    assert len(_pooled_files(calls)) == 2  # op_b's stdout and input.json; none of op_a's
    assert os.listdir(calls / ".trash") == []


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
    assert len(_pooled_files(calls)) == 1  # op_new's stdout, recycled
    assert sorted(n for n in os.listdir(calls) if n.startswith(".trash")) == [".trash"]


def test_a_finished_directory_is_emptied_and_reused_but_never_replaces_an_existing_one(tmp_path):
    calls = tmp_path / "calls"
    calls.mkdir()
    old = _finished(calls, "op_old")
    ino = os.stat(old).st_ino
    calldir.recycle(old, calls)
    assert not old.exists()
    (calls / "op_taken").mkdir()
    assert not calldir.take_dir(calls / "op_taken")  # exists: the caller's mkdir fails as it should
    assert calldir.take_dir(calls / "op_new") and os.stat(calls / "op_new").st_ino == ino
    assert os.listdir(calls / "op_new") == []
    assert not calldir.take_dir(calls / "op_other")  # the pool had one


def test_a_call_file_swapped_for_a_symlink_is_never_followed(tmp_path):
    """An App that replaced its input.json (or an output file) by a symlink to another file: recycling removes
    the link and never empties, pools or writes through what it points at."""
    calls = tmp_path / "calls"
    calls.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    old = _finished(calls, "op_evil")
    for name in ("input.json", "stdout"):
        (old / name).unlink()
        (old / name).symlink_to(victim)
    calldir.recycle(old, calls)
    assert victim.read_text() == "precious\n"
    assert not old.exists()
    assert len(_pooled_files(calls)) == 1  # stderr only
    new = _new_call(calls, "op_next")
    calldir.place_outputs(new)
    calldir.write_input(new, {"kind": "process", "input": {}})
    assert victim.read_text() == "precious\n"
    assert not any((new / f).is_symlink() for f in os.listdir(new))
