"""Crash matrix (issue 3, R-R1..R-R4): SIGKILL the runner at every journal write, then resume twice.

``WORKRUN_FAULT=<point>[@N]`` makes the runner SIGKILL itself right after the
N-th commit of that journal write (workrun/core/faults.py). For every point and
every workflow shape we check, after two ``workrun resume``:

- every App call ran exactly as often as the workflow needs (no call re-sent
  after its outcome could be recovered, none lost from the journal);
- every compensation that should exist is ``succeeded`` (the App processes
  outlive the runner and leave an exit record, so nothing is ``unknown``);
- every compensate script ran at most once per compensation (marker counts).

The matrix runs with the fork server (the default launcher on Linux) for every
shape, and with ``WORKRUN_LAUNCH=spawn`` for the ``chain`` shape (the launchers
share the supervisor; what differs is how the supervisor starts). The fork
server adds its own fault points: the fork server killed mid-call (replaced, the
call goes on), a call's supervisor killed mid-call (outcome unknown, never re-run).
"""

from __future__ import annotations

import json
import signal
import time
from collections import Counter
from pathlib import Path

import pytest

APP = """
[tool.workrun.apps.mark]
kind = "process"
entry = "main.py"
timeout = 60
compensation = { entry = "compensate.py", backoff = 0.05 }
"""

MAIN = """
import json, os, time
from pathlib import Path
from workrun_sdk import process
data = process.input()
name = data["name"]
with open(os.environ["CALL_LOG"], "a") as fh:
    fh.write(name + "\\n")
if data.get("kill") == "server":  # SIGKILL the fork server that forked this call's supervisor
    with open(f"/proc/{os.getppid()}/stat") as fh:
        os.kill(int(fh.read().rsplit(")", 1)[1].split()[1]), 9)
if data.get("kill") == "supervisor":  # SIGKILL this call's supervisor: no exit record can be written
    os.kill(os.getppid(), 9)
if data.get("kill") == "hang":  # say which process group the call is, and wait to be killed with it
    with open(os.environ["CALL_LOG"] + ".pgid", "w") as fh:
        fh.write(str(os.getpgid(0)))
    time.sleep(60)
time.sleep(float(data.get("sleep", 0.1)))
if data.get("flaky"):
    flag = Path(os.environ["CALL_LOG"] + "." + name + ".flag")
    if not flag.exists():
        flag.write_text("1")
        raise SystemExit(3)
if data.get("fail"):
    raise SystemExit(5)
process.result({"name": name})
"""

COMPENSATE = """
import os, time
from workrun_sdk import compensation
ctx = compensation.context()
time.sleep(0.1)
with open(os.environ["COMP_LOG"], "a") as fh:
    fh.write(ctx.compensation_id + " " + ctx.original_result["name"] + "\\n")
compensation.result({"undone": ctx.original_result["name"]})
"""

SHAPES = {
    # nodes: (needs, extra input); the expected succeeded calls per node; App main executions per node
    "chain": ({"a": ([], {}), "b": (["a"], {}), "boom": (["b"], {"fail": True})},
              {"a": 1, "b": 1}, {"a": 1, "b": 1, "boom": 1}),
    "diamond": ({"a": ([], {}), "b": (["a"], {}), "c": (["a"], {}), "boom": (["b", "c"], {"fail": True})},
                {"a": 1, "b": 1, "c": 1}, {"a": 1, "b": 1, "c": 1, "boom": 1}),
    "two_calls": ({"a": ([], {}), "r": (["a"], {"flaky": True}), "boom": (["r"], {"fail": True})},
                  {"a": 1, "r": 1}, {"a": 1, "r": 2, "boom": 1}),
}

POINTS = ["run.created", "node.running", "op.intent", "op.started", "op.finished", "node.finished", "run.failed",
          "attempt.intent", "attempt.started", "attempt.finished", "op.started@2", "attempt.started@2",
          "attempt.finished@2"]


def _workflow(write_workflow, project: Path, shape: str) -> Path:
    nodes, _, _ = SHAPES[shape]
    text = ""
    for key, (needs, extra) in nodes.items():
        inp = {"name": key, **extra}
        inline = ", ".join(f"{k} = {json.dumps(v)}" for k, v in inp.items())
        text += (f'[nodes.{key}]\nproject = "{project}"\napp = "mark"\ninput = {{ {inline} }}\n'
                 f"needs = {json.dumps(needs)}\n")
        if extra.get("flaky"):
            text += "on_failure = { retry = { attempts = 2, backoff = 0 } }\n"
        text += "\n"
    return write_workflow(shape, text)


@pytest.fixture(scope="module")
def crash_project(tmp_path_factory):
    import subprocess
    import textwrap

    import uv

    project = tmp_path_factory.mktemp("crash") / "crashy"
    project.mkdir()
    (project / "pyproject.toml").write_text('[project]\nname = "crashy"\nversion = "0.1.0"\n'
                                            'requires-python = ">=3.11"\ndependencies = []\n' + APP)
    (project / "main.py").write_text(textwrap.dedent(MAIN))
    (project / "compensate.py").write_text(textwrap.dedent(COMPENSATE))
    subprocess.run([uv.find_uv_bin(), "lock", "--quiet"], cwd=project, check=True)
    return project


MATRIX = [pytest.param("fork", shape, id=f"fork-{shape}") for shape in sorted(SHAPES)] + [
    pytest.param("spawn", "chain", id="spawn-chain")]


@pytest.mark.parametrize(("launcher", "shape"), MATRIX)
@pytest.mark.parametrize("point", POINTS)
def test_kill_at_point_then_resume(workrun, write_workflow, crash_project, tmp_path, launcher, shape, point):
    _kill_then_resume(workrun, write_workflow, crash_project, tmp_path, shape, point, launcher=launcher)


# a subset of the points (each case waits out a lease): one per phase, plus right after the claim
@pytest.mark.parametrize("point", ["run.created", "op.started", "node.finished", "run.failed", "attempt.started",
                                   "attempt.finished@2", "run.claimed", "call.claimed@2", "call.claimed@5"])
def test_kill_at_point_then_resume_on_postgres(workrun, write_workflow, crash_project, tmp_path, point, pg_url,
                                               monkeypatch):
    """The same on a shared PostgreSQL journal (R-S1, R-S2): the killed runner's run claim passes to
    ``resume`` once its lease has passed (``run.claimed``: killed right after claiming; ``call.claimed``:
    right after its executor claimed a node call / a compensation attempt, before starting it: the
    call provably never started, so it is queued again and runs once)."""
    monkeypatch.setenv("WORKRUN_JOURNAL", pg_url)
    monkeypatch.setenv("WORKRUN_LEASE", "2")
    _kill_then_resume(workrun, write_workflow, crash_project, tmp_path, "diamond", point,
                      after_kill=lambda: time.sleep(2.5))


def _kill_then_resume(workrun, write_workflow, crash_project, tmp_path, shape, point, after_kill=lambda: None,
                      launcher="fork"):
    calls, comps = tmp_path / "calls.log", tmp_path / "comps.log"
    env = {"CALL_LOG": str(calls), "COMP_LOG": str(comps), "WORKRUN_LAUNCH": launcher}
    wf = _workflow(write_workflow, crash_project, shape)
    first = workrun("run", wf, "--json", env={**env, "WORKRUN_FAULT": point})
    assert first.code == -signal.SIGKILL, f"fault point {point} was not reached: {first}"
    after_kill()
    for _ in range(2):
        res = workrun("resume", "--json", env=env)
        assert res.code in (0, 1), res
    runs = workrun("runs", "list", "--json").json()
    if point == "run.created@1" or not runs:
        pytest.fail("the run was lost")
    assert len(runs) == 1
    view = workrun("runs", "show", runs[0]["run_id"], "--json").json()
    assert view["status"] == "failed", view["status"]
    _, expected_ok, expected_calls = SHAPES[shape]
    ok = Counter(o["node_key"] for o in view["operations"] if o["status"] == "succeeded")
    assert dict(ok) == expected_ok
    assert not [o for o in view["operations"] if o["status"] in ("running", "unknown")]
    executed = Counter(calls.read_text().split())
    assert dict(executed) == expected_calls, "an App call ran a different number of times than the workflow needs"
    comp_objs = [o["compensation"] for o in view["operations"] if o["status"] == "succeeded"]
    assert all(c is not None and c["status"] == "succeeded" for c in comp_objs), comp_objs
    lines = comps.read_text().splitlines()
    per_comp = Counter(line.split()[0] for line in lines)
    assert all(n == 1 for n in per_comp.values()), per_comp  # never run twice after success (R-R2, R-R4)
    assert set(per_comp) == {c["compensation_id"] for c in comp_objs}
    assert view["unfinished_compensations"] == []


def _chain_with(write_workflow, project: Path, kill: str) -> Path:
    return write_workflow("killing", f"""
        [nodes.a]
        project = "{project}"
        app = "mark"
        input = {{ name = "a" }}
        [nodes.b]
        project = "{project}"
        app = "mark"
        input = {{ name = "b", kill = "{kill}", sleep = 1.0 }}
        needs = ["a"]
        [nodes.boom]
        project = "{project}"
        app = "mark"
        input = {{ name = "boom", fail = true }}
        needs = ["b"]
    """)


def test_fork_server_killed_mid_call(workrun, write_workflow, crash_project, tmp_path):
    """R-P2: the call whose fork server dies goes on (its supervisor is its own session); the next
    call finds the server dead and is sent to a new one; nothing runs twice."""
    calls, comps = tmp_path / "calls.log", tmp_path / "comps.log"
    env = {"CALL_LOG": str(calls), "COMP_LOG": str(comps), "WORKRUN_LAUNCH": "fork"}
    res = workrun("run", _chain_with(write_workflow, crash_project, "server"), "--json", env=env)
    assert res.code == 1, res
    view = res.json()
    assert view["status"] == "failed"
    status = {o["node_key"]: o["status"] for o in view["operations"]}
    assert status == {"a": "succeeded", "b": "succeeded", "boom": "failed"}, view["operations"]
    assert Counter(calls.read_text().split()) == {"a": 1, "b": 1, "boom": 1}
    comp_objs = [o["compensation"] for o in view["operations"] if o["status"] == "succeeded"]
    assert [c["status"] for c in comp_objs] == ["succeeded", "succeeded"]
    assert Counter(line.split()[0] for line in comps.read_text().splitlines()) == \
        {c["compensation_id"]: 1 for c in comp_objs}


def test_resume_that_settles_a_call_as_unknown_exits_1(workrun, write_workflow, crash_project, tmp_path):
    """R-R3, SPEC §10: the runner killed mid-call, then the call's whole process group (no exit record is ever
    written): ``resume`` settles the call as unknown, never runs it again, compensates what came before it,
    and exits 1, not 0 — an outcome a person must verify is not "everything ended well" (crash review: a job
    running ``resume`` was told exit 0)."""
    import os
    import subprocess
    import sys

    calls, comps = tmp_path / "calls.log", tmp_path / "comps.log"
    env = {"CALL_LOG": str(calls), "COMP_LOG": str(comps)}
    pgid = Path(f"{calls}.pgid")
    proc = subprocess.Popen([sys.executable, "-m", "workrun", "run", str(_chain_with(write_workflow, crash_project,
                                                                                      "hang"))],
                            env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not (pgid.exists() and pgid.read_text()):
            assert proc.poll() is None and time.monotonic() < deadline, "the call never started"
            time.sleep(0.05)
    finally:
        proc.kill()
        proc.wait()
    os.killpg(int(pgid.read_text()), signal.SIGKILL)
    res = workrun("resume", "--json", env=env)
    assert res.code == 1, res
    [view] = res.json()["runs"]
    status = {o["node_key"]: o["status"] for o in view["operations"]}
    assert status == {"a": "succeeded", "b": "unknown"}, view["operations"]
    assert next(o for o in view["operations"] if o["node_key"] == "a")["compensation"]["status"] == "succeeded"
    assert Counter(calls.read_text().split()) == {"a": 1, "b": 1}  # b never runs again
    assert workrun("resume", "--json", env=env).code == 0  # nothing left to settle: the next resume is done


@pytest.mark.parametrize("launcher", ["fork", "spawn"])
def test_supervisor_killed_mid_call(workrun, write_workflow, crash_project, tmp_path, launcher):
    """R-R3: a call whose supervisor is killed leaves no exit record: its outcome is unknown (never
    re-run, not guessed), what is left of its process group is ended, and resume re-sends nothing."""
    calls, comps = tmp_path / "calls.log", tmp_path / "comps.log"
    env = {"CALL_LOG": str(calls), "COMP_LOG": str(comps), "WORKRUN_LAUNCH": launcher}
    res = workrun("run", _chain_with(write_workflow, crash_project, "supervisor"), "--json", env=env)
    assert res.code == 1, res
    view = res.json()
    b = next(o for o in view["operations"] if o["node_key"] == "b")
    assert b["status"] == "unknown" and b["result"] is None, b
    assert [o["node_key"] for o in view["operations"]] == ["a", "b"]
    for _ in range(2):
        again = workrun("resume", "--json", env=env)
        assert again.code in (0, 1), again
    assert Counter(calls.read_text().split()) == {"a": 1, "b": 1}  # b is never re-sent
    view = workrun("runs", "show", view["run_id"], "--json").json()
    a = next(o for o in view["operations"] if o["node_key"] == "a")
    assert a["compensation"]["status"] == "succeeded"
    assert len(comps.read_text().splitlines()) == 1
