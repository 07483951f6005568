"""How App processes end and what they leave behind (issue 16.1, 16.6; SPEC §17; R-A7).

Real uv App projects, real signals, real escaped daemons; every test runs under both launchers
(the fork server and ``WORKRUN_LAUNCH=spawn``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
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
# DAEMON: the App's code up to its daemon's pid (``daemon``); the daemon runs LOOP (indented 8).
DAEMON = """
import os, signal, sys, time
from workrun_sdk import process
data = process.input()
r, w = os.pipe()
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        os.write(w, f"{os.getpid()}\\n".encode())
LOOP
        os._exit(0)
    os._exit(0)
os.close(w)
daemon = int(os.read(r, 64))
"""

ESCAPE = DAEMON.replace("LOOP", "        while True:\n            time.sleep(1)") + """
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
def _daemon(pids: Path) -> int:
    end = time.monotonic() + 120  # the runner syncs the App's environment first
    while time.monotonic() < end:
        if pids.exists() and pids.read_text().strip():
            return int(pids.read_text())
        time.sleep(0.05)
    raise AssertionError("the App never reported its daemon's pid")


def _gone(pid: int, within: float = 30.0) -> bool:
    end = time.monotonic() + within
    while time.monotonic() < end:
        if not alive(pid):
            return True
        time.sleep(0.05)
    return False


def _escape_workflow(write_workflow, procs: Path, pids: Path, mode: str) -> Path:
    return write_workflow("escape", f"""
        [nodes.e]
        project = "{procs}"
        app = "escape"
        input = {{ mode = "{mode}", pids = "{pids}" }}
    """)


def test_a_call_stopped_as_it_starts_is_stopped_not_unknown(make_project, tmp_path, launcher):
    """R-C9, SPEC §17: a stop that reaches a call just after it started (before its forked supervisor leads
    its own group, or between its claim and its exit record) ends it as stopped, never as unknown."""
    from workrun.core.outcomes import Failure
    from workrun.runner.local import LocalRunner

    project = make_project("sleeper", "", {"main.py": "import time\ntime.sleep(60)\n"})
    runner = LocalRunner(tmp_path / "data", grace=1.0, launch=launcher)
    python = runner.prepare(project)
    runner.stop_all()  # every call started from now on is ended as soon as it is watched
    try:
        for i in range(12):  # the stop lands at a different point of the start-up each time
            call_dir = tmp_path / "data" / "calls" / f"call{i}"
            call_dir.mkdir(parents=True)
            started = runner.start(python, project, project / "main.py", call_dir,
                                   {"kind": "process", "input": {}, "context": None, "tool": None,
                                    "operation_id": f"op_{i}"})
            time.sleep(i * 0.005)
            outcome = runner.wait(started, time.time() + 60)
            stderr = call_dir / "stderr"
            assert outcome.failure is Failure.STOPPED, (i, outcome, stderr.exists() and stderr.read_text())
            assert outcome.signal == signal.SIGTERM and outcome.exit_code is None, (i, outcome)
    finally:
        runner.close()


def test_a_left_behind_call_past_its_deadline_is_recorded_as_it_ended(make_project, tmp_path, launcher):
    """R-R3, SPEC §17 (conformance review): a call left behind by a runner that died, past its deadline, is ended
    by the runner that recovers it; an App that ignores SIGTERM is SIGKILLed after the grace, and the outcome says
    so from the call's exit record (it said SIGTERM, whatever had ended the App)."""
    from workrun.runner.local import LocalRunner

    project = make_project("stubborn", "", {"main.py": "import signal, time\n"
                                                       "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                                                       "time.sleep(60)\n"})
    dead = LocalRunner(tmp_path / "data", grace=1.0, launch=launcher)  # its runner "dies": nothing waits for it
    later = LocalRunner(tmp_path / "data", grace=1.0, launch=launcher)
    try:
        call_dir = tmp_path / "data" / "calls" / "call"
        call_dir.mkdir(parents=True)
        started = dead.start(dead.prepare(project), project, project / "main.py", call_dir,
                             {"kind": "process", "input": {}, "context": None, "tool": None, "operation_id": "op_1"})
        time.sleep(0.5)  # the App has set its handler
        outcome = later.recover(started.pid, started.proc_start, call_dir, time.time() + 0.5)
        assert outcome.timed_out and outcome.signal == signal.SIGKILL and outcome.exit_code is None, outcome
    finally:
        later.close()
        dead.close()


def test_escaped_daemon_is_ended_after_normal_exit(workrun, write_workflow, procs, launcher, tmp_path):
    """SPEC §17: a call owns every process it starts, also one that left by setsid + double fork."""
    pids = tmp_path / "daemon.pid"
    res = workrun("run", _escape_workflow(write_workflow, procs, pids, "exit"), "--json")
    assert res.code == 0, res
    daemon = int(pids.read_text())
    (op,) = res.json()["operations"]
    assert op["result"] == {"daemon": daemon}
    assert not alive(daemon), f"escaped daemon {daemon} outlived its call"


def test_escaped_daemon_is_ended_after_timeout(workrun, write_workflow, procs, launcher, tmp_path):
    pids = tmp_path / "daemon.pid"
    res = workrun("run", _escape_workflow(write_workflow, procs, pids, "hang"), "--json")
    assert res.code == 1, res
    (op,) = res.json()["operations"]
    assert op["status"] == "failed" and op["error"].startswith("timed out after 3 s"), op
    # ended by the SIGTERM: said as SPEC §17 says it for every signal (conformance review)
    assert op["signal"] == 15 and op["exit_code"] is None and op["error"].endswith("killed by signal 15 (SIGTERM)")
    daemon = int(pids.read_text())
    assert not alive(daemon), f"escaped daemon {daemon} outlived its timed-out call"


def test_escaped_daemon_is_ended_after_stop(workrun, write_workflow, procs, launcher, tmp_path):
    import subprocess
    import sys

    pids = tmp_path / "daemon.pid"
    wf = write_workflow("escape", f"""
        [nodes.e]
        project = "{procs}"
        app = "escape_long"
        input = {{ mode = "hang", pids = "{pids}" }}
    """)
    runner = subprocess.Popen([sys.executable, "-m", "workrun", "run", str(wf), "--json"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        daemon = _daemon(pids)
        runs = workrun("runs", "list", "--json").json()
        res = workrun("stop", runs[0]["run_id"])
        assert res.code == 0, res
        out, err = runner.communicate(timeout=60)
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()
    assert runner.returncode == 130, (out, err)
    assert _gone(daemon), f"escaped daemon {daemon} outlived its stopped call"


def test_escaped_daemon_is_ended_when_runner_was_killed(workrun, write_workflow, procs, launcher, tmp_path):
    """Kill -9 of the runner: the call still runs to its end (R-R3), and then its daemon is ended."""
    pids = tmp_path / "daemon.pid"
    wf = _escape_workflow(write_workflow, procs, pids, "exit")
    res = workrun("run", wf, "--json", env={"WORKRUN_FAULT": "op.started"})
    assert res.code == -signal.SIGKILL, res
    daemon = _daemon(pids)
    assert _gone(daemon), f"escaped daemon {daemon} outlived its call after the runner died"
    res = workrun("resume", "--json")
    assert res.code == 0, res
    (run,) = res.json()["runs"]
    (op,) = run["operations"]
    assert op["status"] == "succeeded" and op["result"] == {"daemon": daemon}, op


WHO = """
import os, sys
from workrun_sdk import process
supervisor = os.getppid()
with open(f"/proc/{supervisor}/stat") as fh:
    server = int(fh.read().rsplit(")", 1)[1].split()[1])
with open(f"/proc/{server}/cmdline", "rb") as fh:
    parent = fh.read().split(b"\\0")
process.result({
    "parent": [os.path.basename(p.decode()) for p in parent if p.endswith(b".py")],
    "in_supervisor_group": os.getsid(0) == supervisor and os.getpgid(0) == supervisor,
    "cwd": os.getcwd(), "path0": sys.path[0], "argv": sys.argv, "name": __name__,
    "stdin": sys.stdin.read(), "env": os.environ.get("WHO_MARK"), "call_dir": "WORKRUN_CALL_DIR" in os.environ,
})
print("to stdout")
"""


def test_a_forked_call_is_like_a_spawned_one(workrun, write_workflow, make_project, launcher):
    """R-P1: same session/group, cwd, sys.path[0], argv, __main__, stdin, environment; by the launcher asked."""
    project = make_project("who", '[tool.workrun.apps.who]\nentry = "who.py"\n', {"who.py": WHO})
    wf = write_workflow("who", f'[nodes.w]\nproject = "{project}"\napp = "who"\n')
    res = workrun("run", wf, "--json", env={"WHO_MARK": "seen"})
    assert res.code == 0, res
    (op,) = res.json()["operations"]
    got = op["result"]
    assert got["parent"] == (["_forkserver.py"] if launcher == "fork" else []), got
    assert got["in_supervisor_group"] is True  # the supervisor leads the call's session and group
    assert got["cwd"] == str(project) and got["path0"] == str(project)
    assert got["argv"] == [str(project / "who.py")] and got["name"] == "__main__"
    assert got["stdin"] == "" and got["env"] == "seen" and got["call_dir"] is True
    assert op["stdout_tail"] == "to stdout\n"


# An App that writes a file named ``ended`` into its call directory (the launcher's marker that every process of
# the call has ended) and leaves a daemon that ignores SIGTERM and keeps writing to the stdout it inherited.
FORGE = """
import os
open(os.path.join(os.environ["WORKRUN_CALL_DIR"], "ended"), "w").close()
""" + DAEMON.replace("LOOP", """        for _ in range(3000):
            os.write(1, b"DAEMON OF AN EARLIER CALL\\n")
            time.sleep(0.01)""") + """
with open(data["pids"], "w") as fh:
    fh.write(f"{daemon} {os.getppid()}\\n")
process.result({"daemon": daemon})
"""

SLOW = """
import time
from workrun_sdk import process
time.sleep(0.15)
process.result({"ok": process.input()["name"]})
"""


def test_an_ended_file_written_by_the_app_is_not_believed(make_project, write_workflow, tmp_path, launcher,
                                                          monkeypatch):
    """Break-it finding: the App wrote ``ended`` and its supervisor was killed while it waited for the App's
    daemon. The runner believed the App's file and reused the call's directory: the daemon's output showed up in
    later calls' stdout. Only the supervisor's own word (the done pipe; a spawned one's exit) counts now."""
    monkeypatch.setenv("WORKRUN_GRACE", "30")  # the supervisor waits long for the daemon: it is killed meanwhile
    project = make_project("forge", """
        [tool.workrun.apps.forge]
        entry = "forge.py"
        [tool.workrun.apps.slow]
        entry = "slow.py"
    """, {"forge.py": FORGE, "slow.py": SLOW})
    pids = tmp_path / "pids"
    text = f'[nodes.d]\nproject = "{project}"\napp = "forge"\ninput = {{ pids = "{pids}" }}\n'
    for i in range(4):
        text += (f'[nodes.s{i}]\nproject = "{project}"\napp = "slow"\ninput = {{ name = "s{i}" }}\n'
                 f'needs = ["{"d" if i == 0 else f"s{i - 1}"}"]\n')
    wf = write_workflow("forge", text)
    runner = subprocess.Popen([sys.executable, "-m", "workrun", "run", str(wf), "--json"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    daemon = 0
    try:
        end = time.monotonic() + 120
        while not (pids.exists() and len(pids.read_text().split()) == 2) and time.monotonic() < end:
            time.sleep(0.05)
        daemon, supervisor = (int(x) for x in pids.read_text().split())
        time.sleep(0.5)  # the App has exited; its supervisor is ending the daemon (which ignores SIGTERM)
        os.kill(supervisor, signal.SIGKILL)
        out, err = runner.communicate(timeout=120)
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()
        if daemon and alive(daemon):
            os.kill(daemon, signal.SIGKILL)
    assert runner.returncode == 0, err
    ops = {o["node_key"]: o for o in json.loads(out)["operations"]}
    assert ops["d"]["status"] == "succeeded", ops["d"]
    for key in ("s0", "s1", "s2", "s3"):
        assert ops[key]["status"] == "succeeded" and "DAEMON" not in (ops[key]["stdout_tail"] or ""), ops[key]
