"""Standalone calls next to each other (issue 10, item 8): recovery settles only calls whose owner is gone.

Two ``workrun app run`` at once on one data dir, and ``workrun resume`` during an ``app run``, all succeed,
and each App runs exactly once (marker files)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

SLOW_APP = """
[tool.workrun.apps.slow]
entry = "main.py"
timeout = 120
"""
SLOW_MAIN = """
import os, time
from pathlib import Path
from workrun_sdk import process
data = process.input()
Path(data["started"]).write_text(str(os.getpid()))
time.sleep(float(data["sleep"]))
with open(data["marker"], "a") as fh:
    fh.write(data["tag"] + "\\n")
process.result({"tag": data["tag"]})
"""


def _spawn(*args: object) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "workrun", *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=dict(os.environ))


def _wait_for(path: Path, proc: subprocess.Popen[str], timeout: float = 120) -> None:
    end = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"exited {proc.returncode} before {path.name}: {proc.communicate()}")
        if time.monotonic() > end:
            raise AssertionError(f"{path.name} never appeared")
        time.sleep(0.05)


@pytest.fixture
def slow(make_project):
    return make_project("slow", SLOW_APP, {"main.py": SLOW_MAIN})


def _call(slow: Path, tmp_path: Path, tag: str, sleep: float) -> subprocess.Popen[str]:
    return _spawn("app", "run", slow, "slow", "--json", "--input", f"tag={tag}", "--input", f"sleep={sleep}",
                  "--input", f"marker={tmp_path / 'marker'}", "--input", f"started={tmp_path / ('started-' + tag)}")


@pytest.mark.parametrize("second", ["app run", "resume"])
def test_a_second_command_leaves_a_live_standalone_call_alone(workrun, slow, tmp_path, second):
    first = _call(slow, tmp_path, "one", 12)  # outlives the second command even on a loaded machine
    _wait_for(tmp_path / "started-one", first)
    if second == "app run":
        other = _call(slow, tmp_path, "two", 0)
    else:
        other = _spawn("resume", "--json")
    out, err = other.communicate(timeout=180)
    assert other.returncode == 0, (out, err)
    assert first.poll() is None, "the second command ended before the first call: it did not wait on it"
    out1, err1 = first.communicate(timeout=180)
    assert first.returncode == 0, (out1, err1)
    assert json.loads(out1)["status"] == "succeeded"
    assert json.loads(out1)["result"] == {"tag": "one"}
    if second == "app run":
        assert json.loads(out)["result"] == {"tag": "two"}
        assert sorted((tmp_path / "marker").read_text().split()) == ["one", "two"]
    else:
        assert json.loads(out) == {"runs": []}
        assert (tmp_path / "marker").read_text().split() == ["one"]


def test_a_call_whose_owner_was_killed_is_still_settled(workrun, slow, tmp_path):
    """R-R3 unchanged: ``kill -9`` of the ``app run`` leaves its App running; the next command settles the
    call once the App has ended (its owner is gone)."""
    first = _call(slow, tmp_path, "one", 2)
    _wait_for(tmp_path / "started-one", first)
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    res = workrun("app", "run", slow, "slow", "--json", "--input", "tag=two", "--input", "sleep=0",
                  "--input", f"marker={tmp_path / 'marker'}", "--input", f"started={tmp_path / 'started-two'}")
    assert res.code == 0, res
    assert sorted((tmp_path / "marker").read_text().split()) == ["one", "two"]
    with sqlite3.connect(Path(os.environ["WORKRUN_HOME"]) / "journal.sqlite3") as db:
        rows = db.execute("SELECT status, result FROM operations WHERE run_id IS NULL").fetchall()
    assert sorted((status, json.loads(result)["tag"]) for status, result in rows) == [
        ("succeeded", "one"), ("succeeded", "two")]
