"""Kill -9 from outside, stop, single scheduler, re-run and eval runs (issue 3: R-R1..R-R3, R-C9, R-J3, R-W5, R-W6)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import time
from pathlib import Path

import pytest

from _kit.processes import current_view, op_running, spawn_cli, wait_for

ROOT = Path(__file__).resolve().parents[2]

SLOW_APP = """
[tool.workrun.apps.slow]
kind = "process"
entry = "main.py"
timeout = 60
compensation = { entry = "compensate.py", backoff = 0.05 }
"""

SLOW_MAIN = """
import os, signal, sys, time
from workrun_sdk import process
data = process.input()
if data.get("trap"):
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(1))
with open(os.environ["CALL_LOG"], "a") as fh:
    fh.write(data["name"] + "\\n")
time.sleep(float(data.get("sleep", 0)))
if data.get("fail"):
    raise SystemExit(2)
process.result({"name": data["name"], "slept": float(data.get("sleep", 0))})
"""

SLOW_COMPENSATE = """
import os, time
from workrun_sdk import compensation
ctx = compensation.context()
slept = os.environ["COMP_LOG"] + "." + ctx.compensation_id + ".slept"
if not os.path.exists(slept):  # only its first attempt is slow: the one a test stops
    open(slept, "w").close()
    time.sleep(float(ctx.original_input.get("comp_sleep", 0)))
with open(os.environ["COMP_LOG"], "a") as fh:
    fh.write(ctx.compensation_id + "\\n")
compensation.result({"undone": ctx.original_result["name"]})
"""


@pytest.fixture
def slow_project(make_project):
    return make_project("slow", SLOW_APP, {"main.py": SLOW_MAIN, "compensate.py": SLOW_COMPENSATE})


@pytest.fixture
def logs(tmp_path):
    calls, comps = tmp_path / "calls.log", tmp_path / "comps.log"
    calls.touch()
    comps.touch()
    return {"CALL_LOG": str(calls), "COMP_LOG": str(comps)}


def lease_passes(journal_backend):
    """On a shared journal a killed runner's run claim is taken over only once its lease passed (R-S2)."""
    if journal_backend == "postgres":
        time.sleep(float(os.environ["WORKRUN_LEASE"]) + 0.5)


def two_node_workflow(write_workflow, project, *, sleep=2.0, trap=False, comp_sleep=0.0):
    return write_workflow("two", f"""
        [nodes.first]
        project = "{project}"
        app = "slow"
        input = {{ name = "first", comp_sleep = {comp_sleep} }}
        [nodes.second]
        project = "{project}"
        app = "slow"
        input = {{ name = "second", sleep = {sleep}, trap = {str(trap).lower()} }}
        needs = ["first"]
        [nodes.boom]
        project = "{project}"
        app = "slow"
        input = {{ name = "boom", fail = true }}
        needs = ["second"]
    """)


def test_kill_runner_app_finishes_while_down_resume_recovers(workrun, write_workflow, slow_project, logs,
                                                            journal_backend):
    """R-R3: the App outlives the runner; its result is recovered on resume, not marked unknown."""
    sleep = 3.0  # the runner is killed while the App still runs, even when the test is slow to see it
    wf = two_node_workflow(write_workflow, slow_project, sleep=sleep)
    proc = spawn_cli("run", wf, "--json", env=logs)
    view = wait_for(lambda: op_running(workrun, "second"), what="second to run", proc=proc)
    # its App has started (on a shared journal `running` means handed to an executor, which starts it next)
    wait_for(lambda: "second" in Path(logs["CALL_LOG"]).read_text().split(), what="second's App to start", proc=proc)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    # the App finishes while no runner is alive: its supervisor's exit record is the only call directory left
    calls = Path(os.environ["WORKRUN_HOME"]) / "calls"
    wait_for(lambda: list(calls.glob("*/exit.json")), timeout=60, what="second to finish without a runner")
    lease_passes(journal_backend)
    assert Path(logs["CALL_LOG"]).read_text().split() == ["first", "second"]
    res = workrun("resume", "--json", env=logs)
    assert res.code == 0, res
    view = workrun("runs", "show", view["run_id"], "--json").json()
    second = next(o for o in view["operations"] if o["node_key"] == "second")
    assert second["status"] == "succeeded" and second["result"] == {"name": "second", "slept": sleep}
    assert view["status"] == "failed"
    assert [o["compensation"]["status"] for o in view["operations"] if o["status"] == "succeeded"] == \
        ["succeeded", "succeeded"]
    assert Path(logs["CALL_LOG"]).read_text().split() == ["first", "second", "boom"]  # nothing re-sent
    assert len(Path(logs["COMP_LOG"]).read_text().split()) == 2


def test_resume_waits_for_live_orphan(workrun, write_workflow, slow_project, logs, journal_backend):
    """SPEC §10: a live orphaned process group is waited for before its outcome is decided."""
    # on a shared journal the App must outlive the killed runner's lease too
    wf = two_node_workflow(write_workflow, slow_project, sleep=2.5 if journal_backend == "sqlite" else 6)
    proc = spawn_cli("run", wf, "--json", env=logs)
    view = wait_for(lambda: op_running(workrun, "second"), what="second to run", proc=proc)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    lease_passes(journal_backend)
    res = workrun("resume", "--json", env=logs)  # starts while the App still runs
    assert res.code == 0, res
    view = workrun("runs", "show", view["run_id"], "--json").json()
    assert next(o for o in view["operations"] if o["node_key"] == "second")["status"] == "succeeded"


@pytest.mark.parametrize("how", ["sigint", "stop-command"])
@pytest.mark.parametrize("trap", [False, True])
def test_stop_ends_app_marks_stopped_no_compensation(workrun, write_workflow, slow_project, logs, how, trap):
    """R-C9: stop ends the App's process group; the run is stopped (exit 130), nothing compensated,
    even when the App traps SIGTERM and exits 1."""
    wf = two_node_workflow(write_workflow, slow_project, sleep=30, trap=trap)
    proc = spawn_cli("run", wf, "--json", env=logs)
    view = wait_for(lambda: op_running(workrun, "second"), what="second to run", proc=proc)
    t0 = time.monotonic()
    if how == "sigint":
        proc.send_signal(signal.SIGINT)
    else:
        res = workrun("stop", view["run_id"])
        assert res.code == 0, res
    out, err = proc.communicate(timeout=60)
    assert time.monotonic() - t0 < 20  # the App (30 s) was ended, not waited for
    assert proc.returncode == 130, (out, err)
    final = json.loads(out)
    assert final["status"] == "stopped"
    nodes = {n["node_key"]: n["status"] for n in final["nodes"]}
    assert nodes == {"first": "succeeded", "second": "stopped", "boom": "skipped"}
    assert all(o["compensation"] is None for o in final["operations"])
    assert any("NOT undone" in m["text"] for m in final["messages"])
    assert Path(logs["COMP_LOG"]).read_text() == ""
    # R-L6: what was not undone says so wherever the run is shown
    rid = final["run_id"]
    assert (final["compensation"], final["compensation_counts"]) == ("not_undone", {"calls": 1})
    listed = workrun("runs", "list", "--json").json()
    assert [(r["compensation"], r["compensation_counts"]) for r in listed] == [("not_undone", {"calls": 1})]
    line = f"not undone: 1 calls — workrun compensate {rid}"
    assert line in workrun("runs", "list").out and line in workrun("runs", "show", rid).out
    if how != "sigint":
        assert f"run {rid}: stopped; {line}" in res.out, res  # `stop` says it too
    # the App's process group is gone
    second = next(o for o in final["operations"] if o["node_key"] == "second")
    assert second["status"] == "failed" and "stopped by the user" in second["error"]
    # an operator may still ask explicitly (R-C9)
    res = workrun("compensate", rid, "--json", env=logs)
    assert res.code == 0, res
    comps = [o["compensation"] for o in res.json()["operations"] if o["compensation"]]
    assert [c["status"] for c in comps] == ["succeeded"]
    assert len(Path(logs["COMP_LOG"]).read_text().split()) == 1
    assert workrun("runs", "show", rid, "--json").json()["compensation"] == "complete"
    # compensate --json says the roll-up as runs show does (conformance review: it had none)
    assert res.json()["compensation"] == "complete" and res.json()["compensation_counts"]["succeeded"] == 1


def test_stop_reaches_an_orphan_that_resume_waits_for(workrun, write_workflow, slow_project, logs):
    """R-C9 (break-it finding): `workrun stop` while `resume` waits for a call a killed runner left running ends
    that call's process group at once (it is recorded stopped) instead of waiting for it to finish."""
    wf = two_node_workflow(write_workflow, slow_project, sleep=60)
    proc = spawn_cli("run", wf, "--json", env=logs)
    view = wait_for(lambda: op_running(workrun, "second"), what="second to run", proc=proc)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    resume = spawn_cli("resume", "--json", env=logs)
    journal = Path(os.environ["WORKRUN_HOME"]) / "journal.sqlite3"

    def adopted() -> int | None:  # resume took the call over and now waits for it: the call's pid
        with sqlite3.connect(f"file:{journal}?mode=ro", uri=True) as db:
            row = db.execute("SELECT owner_pid, pid FROM operations WHERE node_key = 'second'").fetchone()
        return row[1] if row and row[0] == resume.pid else None

    pid = wait_for(adopted, timeout=60, what="resume to wait for the orphan", proc=resume)
    t0 = time.monotonic()
    res = workrun("stop", view["run_id"])
    assert res.code == 0, res
    out, err = resume.communicate(timeout=60)
    assert time.monotonic() - t0 < 20, (out, err)  # not the 60 s the App would take
    assert resume.returncode == 130, (out, err)
    final = workrun("runs", "show", view["run_id"], "--json").json()
    second = next(o for o in final["operations"] if o["node_key"] == "second")
    assert final["status"] == "stopped" and second["status"] == "failed", second
    assert "stopped by the user" in second["error"] and second["compensation"] is None
    with pytest.raises(ProcessLookupError):
        os.killpg(pid, 0)  # its process group is gone


def test_stop_during_compensation_keeps_it_pending_for_resume(workrun, write_workflow, slow_project, logs):
    wf = two_node_workflow(write_workflow, slow_project, sleep=0, comp_sleep=20)
    proc = spawn_cli("run", wf, "--json", env=logs)

    def comp_running():
        view = current_view(workrun)
        return view if view and any(o["compensation"] and o["compensation"]["status"] == "running"
                                    and o["node_key"] == "first" for o in view["operations"]) else None

    wait_for(comp_running, timeout=120, what="compensation of first to run", proc=proc)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130
    view = json.loads(out)
    assert view["status"] == "failed"  # the run keeps its failure; the compensation waits (R-C6)
    first = next(o for o in view["operations"] if o["node_key"] == "first")["compensation"]
    assert first["status"] == "pending" and first["attempts"][-1]["status"] == "stopped"
    assert first["compensation_id"] not in Path(logs["COMP_LOG"]).read_text()
    res = workrun("resume", "--json", env={**logs})
    assert res.code == 0, res
    after = next(o for o in res.json()["runs"][0]["operations"] if o["node_key"] == "first")["compensation"]
    assert after["status"] == "succeeded" and [a["status"] for a in after["attempts"]] == ["stopped", "succeeded"]
    assert Path(logs["COMP_LOG"]).read_text().split().count(first["compensation_id"]) == 1


def test_second_scheduler_exits_3_or_waits(workrun, write_workflow, slow_project, logs, tmp_path):
    """R-J3: a second scheduling command refuses at once (exit 3, naming the holder's pid) or waits."""
    # second runs long enough for the next CLI to start while the first still holds the lock, even when loaded
    wf = two_node_workflow(write_workflow, slow_project, sleep=8.0)
    proc = spawn_cli("run", wf, "--json", env=logs)
    wait_for(lambda: op_running(workrun, "second"), what="second to run", proc=proc)
    res = workrun("run", ROOT / "demo_apps/workflows/tutorial.toml", env=logs)
    assert res.code == 3
    assert res.err.count("\n") == 1 and f"pid {proc.pid}" in res.err
    assert workrun("runs", "list", "--json").code == 0  # readers still work
    assert workrun("gc", "--dry-run").code == 0  # and so does a gc that removes nothing (hostile review)
    busy = workrun("gc")
    assert busy.code == 3 and "use --wait" in busy.err, busy  # which gc (and verify) now take
    waited = workrun("resume", "--wait", env=logs)
    assert proc.wait(timeout=60) == 1
    assert waited.code == 0, waited
    assert f"waiting for another scheduler: pid {proc.pid} (`workrun run {wf} --json`" in waited.out, waited  # told
    calls = Path(logs["CALL_LOG"]).read_text().split()
    assert sorted(calls) == ["boom", "first", "second"]
    comps = Path(logs["COMP_LOG"]).read_text().split()
    assert len(comps) == len(set(comps)) == 2


def test_lock_of_dead_scheduler_is_taken_over(workrun, write_workflow, slow_project, logs):
    wf = two_node_workflow(write_workflow, slow_project, sleep=1.0)
    proc = spawn_cli("run", wf, "--json", env=logs)
    wait_for(lambda: op_running(workrun, "second"), what="second to run", proc=proc)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    res = workrun("resume", env=logs)
    assert res.code == 0, res
    assert "compensated: 2 of 2" in res.out, res.out  # each run as `run` prints it, roll-up too (new-user review)


def test_rerun_creates_new_run_and_keeps_old_record(workrun):
    first = workrun("run", ROOT / "demo_apps/workflows/tutorial.toml", "--json", "--input", "note=again")
    assert first.code == 1
    old = first.json()
    before = workrun("runs", "show", old["run_id"], "--json").json()
    second = workrun("rerun", old["run_id"], "--json")
    assert second.code == 1
    new = second.json()
    assert new["run_id"] != old["run_id"] and new["rerun_of"] == old["run_id"]
    assert new["inputs"] == old["inputs"] == {"note": "again"}
    new_create = next(o for o in new["operations"] if o["node_key"] == "create")
    old_create = next(o for o in old["operations"] if o["node_key"] == "create")
    assert new_create["operation_id"] != old_create["operation_id"]
    assert new_create["result"]["file_path"] != old_create["result"]["file_path"]  # nothing reused (R-W5)
    assert workrun("runs", "show", old["run_id"], "--json").json() == before


def test_eval_run_never_compensates(workrun):
    res = workrun("run", ROOT / "demo_apps/workflows/tutorial.toml", "--eval", "--json")
    assert res.code == 1
    view = res.json()
    assert view["status"] == "failed" and view["eval"] is True
    assert all(o["compensation"] is None for o in view["operations"])
    path = Path(next(o for o in view["operations"] if o["node_key"] == "create")["result"]["file_path"])
    assert path.exists()
    assert workrun("compensations", "list", "--json").json() == []
    (line,) = [ln for ln in workrun("runs", "list").out.splitlines() if ln.startswith(view["run_id"])]
    assert f"{view['run_id']}  cleanup-tutorial (eval)  failed" in line, line  # told apart from a real run
    refused = workrun("compensate", view["run_id"])
    assert refused.code == 2 and "evaluation" in refused.err
    path.unlink()


def test_gc_removes_call_directories_killed_runners_left_and_keeps_those_in_flight(workrun, write_workflow,
                                                                                  slow_project, logs, isolated_env):
    """Break-it finding: a runner killed just after journaling a call's outcome left its directory for good, and
    ``workrun gc`` did not remove it. It does now, once the directory is stale; never one whose call is still in
    flight (its outcome is decided from its files on resume)."""
    calls = isolated_env / "calls"
    wf = write_workflow("one", f'[nodes.a]\nproject = "{slow_project}"\napp = "slow"\ninput = {{ name = "a" }}\n')
    res = workrun("run", wf, "--json", env={**logs, "WORKRUN_FAULT": "op.finished"})  # the outcome is journaled
    assert res.code == -signal.SIGKILL, res
    (done,) = [p for p in calls.iterdir() if not p.name.startswith(".")]
    res = workrun("resume", "--json", env=logs)  # the run is finished; nothing names that directory any more
    assert res.code == 0, res
    slow = write_workflow("slow", f'[nodes.a]\nproject = "{slow_project}"\napp = "slow"\n'
                                  f'input = {{ name = "a", sleep = 1 }}\n')
    res = workrun("run", slow, "--json", env={**logs, "WORKRUN_FAULT": "op.started"})  # killed, its call in flight
    assert res.code == -signal.SIGKILL, res
    (flying,) = [p for p in calls.iterdir() if not p.name.startswith(".") and p != done]
    wait_for(lambda: (flying / "exit.json").exists(), what="the call to end without its runner")
    (calls / ".trash" / "op_left.1234").mkdir(parents=True)  # one a killed runner was removing
    (calls / "exec-worker-call").mkdir()  # a worker's (it removes its own)
    old = time.time() - 3600
    for path in (done, flying, calls / "exec-worker-call"):
        os.utime(path, (old, old))
    fresh = calls / "op_just_made"  # one a runner made a moment ago, before journaling its call
    fresh.mkdir()
    dry = workrun("gc", "--dry-run")
    assert dry.code == 0 and "would remove 2 stale call directory(ies); kept 2" in dry.out, dry
    named = sorted(line.removeprefix("  call directory ") for line in dry.out.splitlines()
                   if line.startswith("  call directory "))
    assert named == sorted([str(done), str(calls / ".trash")]), dry  # each one it would remove, by path
    assert done.exists() and (calls / ".trash" / "op_left.1234").exists()
    res = workrun("gc")
    assert res.code == 0 and "removed 2 stale call directory(ies); kept 2" in res.out, res
    assert not done.exists() and not (calls / ".trash" / "op_left.1234").exists()
    assert flying.exists() and fresh.exists() and (calls / "exec-worker-call").exists()
    res = workrun("resume", "--json", env=logs)  # the call in flight is recovered from its files
    assert res.code == 0, res
    (run,) = res.json()["runs"]
    (op,) = run["operations"]
    assert op["status"] == "succeeded" and op["result"] == {"name": "a", "slept": 1.0}, op
    said = [m["text"] for n in run["nodes"] for m in n["messages"]]  # why resume may wait: said before it does
    assert f"operation {op['operation_id']} was in flight when the runner stopped: its outcome is decided from its " \
           "process and exit record (while its process runs, up to its deadline, this waits)" in said, said
    assert Path(logs["CALL_LOG"]).read_text().split() == ["a", "a"]


def test_gc_never_removes_the_directory_of_a_standalone_call_waiting_for_its_environment(workrun, slow_project,
                                                                                         logs, isolated_env):
    """Break-it finding: ``workrun app run`` (no scheduler lock) took a pooled directory, with the pool's old time,
    before waiting for its environment (another process syncing it) and journaling its call; ``gc`` removed it and
    the call crashed. The directory is made just before the call's intent is journaled now, and a pooled one
    gets a new time when taken."""
    import subprocess
    import sys

    from filelock import FileLock

    assert workrun("app", "run", slow_project, "slow", "--input", "name=a", env=logs).code == 0
    calls = isolated_env / "calls"
    pool = calls / ".pool"  # the finished call's directory, when its runner pooled it before it ended (load-dependent)
    for pooled in pool.iterdir() if pool.is_dir() else ():  # the last call was an hour ago
        old = time.time() - 3600
        os.utime(pooled, (old, old))
    (marker,) = (isolated_env / "envs").glob("*.json")
    with FileLock(str(marker) + ".lock"):  # another process is syncing the environment
        app = subprocess.Popen([sys.executable, "-m", "workrun", "app", "run", str(slow_project), "slow", "--input",
                                "name=b", "--json"], env={**os.environ, **logs}, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
        time.sleep(2.0)  # it waits for the environment
        res = workrun("gc")
        assert res.code == 0, res
    out, err = app.communicate(timeout=120)
    assert app.returncode == 0, err
    assert json.loads(out)["status"] == "succeeded"
    assert Path(logs["CALL_LOG"]).read_text().split() == ["a", "b"]


def test_gc_does_not_count_a_directory_it_cannot_remove(workrun, isolated_env, monkeypatch):
    """A directory gc cannot remove is returned, not counted as removed; the others go."""
    from workrun.effects import operations
    from workrun.runner.services import Services

    calls = isolated_env / "calls"
    (calls / ".trash").mkdir(parents=True)  # empty, as every run leaves it: nothing to remove there
    for name in ("op_stuck", "op_gone"):
        (calls / name).mkdir(parents=True)
        old = time.time() - 3600
        os.utime(calls / name, (old, old))
    real = operations.remove_tree

    def remove_tree(path, *args, **kwargs):
        if Path(path).name == "op_stuck":
            raise PermissionError(13, "Operation not permitted", str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(operations, "remove_tree", remove_tree)
    svc = Services(isolated_env, check=False)
    try:
        named: list[Path] = []
        assert operations.gc_call_dirs(svc, dry_run=True, named=named) == (2, 0, [])
        assert named == [calls / "op_gone", calls / "op_stuck"]
        assert operations.gc_call_dirs(svc) == (1, 0, [calls / "op_stuck"])
    finally:
        svc.close()
    assert sorted(p.name for p in calls.iterdir()) == [".trash", "op_stuck"]


def test_gc_exits_1_naming_a_directory_it_cannot_remove(workrun, isolated_env):
    """The CLI side of the above, with a file the file system refuses to remove (``chattr +i``)."""
    import shutil
    import subprocess

    calls = isolated_env / "calls"
    stuck = calls / "op_stuck"
    stuck.mkdir(parents=True)
    (stuck / "f").write_text("x")
    if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(stuck / "f")],
                                                        capture_output=True).returncode != 0:
        pytest.skip("needs chattr +i (root on a file system with immutable files, e.g. ext4)")
    try:
        old = time.time() - 3600
        os.utime(stuck, (old, old))
        res = workrun("gc")
        assert res.code == 1, res
        assert "removed 0 stale call directory(ies); kept 0" in res.out, res
        assert res.err == f"error: {stuck}: cannot be removed\n", res.err
    finally:
        subprocess.run(["chattr", "-i", str(stuck / "f")], check=True)


def test_a_kill_right_after_a_failure_is_journaled_starts_nothing_new_on_resume(workrun, write_workflow,
                                                                                  slow_project, logs):
    """Found by a hostile test (R-W3): x fails while y, independent of it, has not started; the runner is killed
    right after x's failure is journaled. ``resume`` must end the run as the run without the crash would: y
    skipped and never called, a (the one succeeded call) compensated once."""
    wf = write_workflow("indep", f"""
        [nodes.a]
        project = "{slow_project}"
        app = "slow"
        input = {{ name = "a" }}
        [nodes.x]
        project = "{slow_project}"
        app = "slow"
        input = {{ name = "x", fail = true }}
        needs = ["a"]
        [nodes.y]
        project = "{slow_project}"
        app = "slow"
        input = {{ name = "y" }}
        needs = ["a"]
    """)
    env = {**logs, "WORKRUN_CONCURRENCY": "1"}  # x (first in workflow order) runs alone, y waits for a slot
    first = workrun("run", wf, "--json", env={**env, "WORKRUN_FAULT": "node.finished@2"})
    assert first.code == -signal.SIGKILL, first
    assert Path(logs["CALL_LOG"]).read_text().split() == ["a", "x"]
    res = workrun("resume", "--json", env=env)
    assert res.code == 0, res
    (run,) = res.json()["runs"]
    assert run["status"] == "failed"
    view = workrun("runs", "show", run["run_id"], "--json").json()
    assert {n["node_key"]: n["status"] for n in view["nodes"]} == {"a": "succeeded", "x": "failed", "y": "skipped"}
    assert Path(logs["CALL_LOG"]).read_text().split() == ["a", "x"]  # y never called
    assert len(Path(logs["COMP_LOG"]).read_text().split()) == 1  # a's compensation, once
