"""How App processes end and what they leave behind (issue 16.1, 16.6; SPEC §17; R-A7).

Real uv App projects, real signals, real escaped daemons; every test runs under both launchers
(the fork server and ``WORKRUN_LAUNCH=spawn``).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

LAUNCHERS = ["fork", "spawn"]

APPS = """
[tool.workrun.apps.step]
kind = "process"
entry = "main.py"
timeout = 60

[tool.workrun.apps.die]
kind = "process"
entry = "die.py"
timeout = 60

[tool.workrun.apps.escape]
kind = "process"
entry = "escape.py"
timeout = 3

[tool.workrun.apps.escape_long]
kind = "process"
entry = "escape.py"
timeout = 120
"""

STEP = """
from workrun_sdk import process
process.result({"ok": process.input().get("name", "x")})
"""

DIE = """
import ctypes, os, signal
from workrun_sdk import process
how = process.input()["how"]
if how == "SIGABRT":
    os.abort()
elif how == "SIGSEGV":
    ctypes.string_at(0)  # a real segmentation fault
else:
    os.kill(os.getpid(), getattr(signal, how))
process.result({"survived": True})
"""

# The App forks a child that calls setsid() and forks again: the grandchild leaves the App's
# process group and session (a daemon). It ignores SIGTERM, so only SIGKILL ends it.
ESCAPE = """
import os, signal, sys, time
from workrun_sdk import process
data = process.input()
r, w = os.pipe()
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        os.write(w, f"{os.getpid()}\\n".encode())
        while True:
            time.sleep(1)
    os._exit(0)
os.close(w)
daemon = int(os.read(r, 64))
with open(data["pids"], "w") as fh:
    fh.write(f"{daemon}\\n")
if data["mode"] == "hang":
    time.sleep(600)
process.result({"daemon": daemon})
"""


def alive(pid: int) -> bool:
    """True when ``pid`` is a live process (a zombie counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


@pytest.fixture(params=LAUNCHERS)
def launcher(request, monkeypatch) -> str:
    monkeypatch.setenv("WORKRUN_LAUNCH", request.param)
    return request.param


@pytest.fixture
def procs(make_project) -> Path:
    return make_project("procs", APPS, {"main.py": STEP, "die.py": DIE, "escape.py": ESCAPE})


@pytest.mark.parametrize("how", ["SIGKILL", "SIGTERM", "SIGSEGV", "SIGABRT"])
def test_app_killed_by_signal_is_recorded_with_that_signal(workrun, write_workflow, procs, launcher, how):
    """SPEC §17: signal N, exit_code null, "killed by signal N (NAME)", no launcher traceback."""
    wf = write_workflow("sig", f"""
        [nodes.a]
        project = "{procs}"
        app = "step"
        [nodes.b]
        project = "{procs}"
        app = "die"
        input = {{ how = "{how}" }}
        needs = ["a"]
        [nodes.c]
        project = "{procs}"
        app = "step"
        needs = ["b"]
    """)
    res = workrun("run", wf, "--json")
    assert res.code == 1, res
    view = res.json()
    (b,) = [o for o in view["operations"] if o["node_key"] == "b"]
    number = getattr(signal, how)
    assert b["status"] == "failed"
    assert b["signal"] == number and b["exit_code"] is None, b
    assert b["error"].startswith(f"killed by signal {number} ({how})"), b["error"]
    assert "Traceback" not in b["stderr_tail"] and "_launch" not in b["stderr_tail"], b["stderr_tail"]
    assert [o["node_key"] for o in view["operations"]] == ["a", "b"]
