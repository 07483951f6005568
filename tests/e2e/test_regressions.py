"""Regression tests for bugs found by trying to break Workrun (kill -9, odd Apps, bad input)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from _kit.processes import op_running, spawn_cli, wait_for

STUBBORN = """
[tool.workrun.apps.stubborn]
entry = "main.py"
timeout = 2
compensation = { entry = "compensate.py" }
"""
STUBBORN_MAIN = """
import os, signal, subprocess, sys, time
from workrun_sdk import process
d = process.input()
child = subprocess.Popen([sys.executable, "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"])
open(d["pidfile"], "w").write(str(child.pid))
if d.get("exit_early"):
    process.result({"ok": 1})
    os._exit(0)
time.sleep(float(d.get("sleep", 30)))
process.result({"ok": 1})
"""


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    return state == "Z"


def test_timeout_ends_children_that_ignore_sigterm(workrun, make_project, tmp_path):
    """R-A7: the whole process group ends on timeout, even a child ignoring SIGTERM."""
    proj = make_project("stub", STUBBORN, {"main.py": STUBBORN_MAIN, "compensate.py": "print(1)\n"})
    pidfile = tmp_path / "child.pid"
    res = workrun("app", "run", proj, "stubborn", "--input", f"pidfile={pidfile}", "--json")
    assert res.code == 1
    assert "timed out after 2 s" in res.json()["error"]
    # the App ended by the timeout's SIGTERM: recorded with its signal, as every call's output has it (SPEC §17)
    assert (res.json()["exit_code"], res.json()["signal"]) == (None, signal.SIGTERM), res.json()
    assert _gone(int(pidfile.read_text()))


def test_app_exiting_with_os_exit_is_recovered_after_runner_kill(workrun, write_workflow, make_project, tmp_path):
    """R-R3: the launcher's supervisor records the exit status even for os._exit."""
    proj = make_project("exiter", """
        [tool.workrun.apps.ex]
        entry = "main.py"
        compensation = { entry = "compensate.py" }
    """, {"main.py": """
        import os, time
        from workrun_sdk import process
        time.sleep(1.5)
        process.result({"ok": 1})
        os._exit(0)
    """, "compensate.py": "print('undo')\n"})
    wf = write_workflow("ex", f"""
        [nodes.a]
        project = "{proj}"
        app = "ex"
        [nodes.boom]
        project = "{proj}"
        app = "ex"
        input = {{ x = "{{{{ nodes.a.result.missing }}}}" }}
    """)
    proc = spawn_cli("run", wf, "--json", env={})
    view = wait_for(lambda: op_running(workrun, "a"), what="a to run", proc=proc)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    time.sleep(2.0)
    res = workrun("resume", "--json")
    view = workrun("runs", "show", view["run_id"], "--json").json()
    a = next(o for o in view["operations"] if o["node_key"] == "a")
    assert a["status"] == "succeeded", a
    assert a["compensation"]["status"] == "succeeded"
    assert res.code == 0, res


def test_stop_of_orphaned_run_marks_node_stopped(workrun, write_workflow, make_project, tmp_path):
    proj = make_project("stub", STUBBORN.replace("timeout = 2", "timeout = 60"),
                        {"main.py": STUBBORN_MAIN, "compensate.py": "print(1)\n"})
    pidfile = tmp_path / "child.pid"
    wf = write_workflow("orphan", f"""
        [nodes.long]
        project = "{proj}"
        app = "stubborn"
        input = {{ pidfile = "{pidfile}" }}
    """)
    proc = spawn_cli("run", wf, "--json", env={})
    view = wait_for(lambda: op_running(workrun, "long"), what="long to run", proc=proc)
    # the child that ignores SIGTERM must exist before the runner dies (the App may still be starting)
    wait_for(lambda: pidfile.exists() and pidfile.read_text(), timeout=60, what="the App's child", proc=proc)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    res = workrun("stop", view["run_id"])
    assert res.code == 0, res
    assert "no call had succeeded, nothing to undo" in res.out, res
    view = workrun("runs", "show", view["run_id"], "--json").json()
    assert view["status"] == "stopped"
    assert [n["status"] for n in view["nodes"]] == ["stopped"]
    assert view["operations"][0]["status"] == "failed" and "stopped" in view["operations"][0]["error"]
    wait_for(lambda: _gone(int(pidfile.read_text())), timeout=30, what="child gone")


def test_non_ascii_result_under_limit_is_accepted(workrun, make_project):
    proj = make_project("wide", """
        [tool.workrun.apps.w]
        entry = "main.py"
    """, {"main.py": "from workrun_sdk import process\nprocess.result({'x': '中' * 200000})\n"})
    res = workrun("app", "run", proj, "w", "--json")
    assert res.code == 0, res
    assert len(res.json()["result"]["x"]) == 200000


def test_closed_stdout_does_not_abort_the_run(tmp_path, marker_project, write_workflow):
    wf = write_workflow("pipe", f"""
        [nodes.a]
        project = "{marker_project}"
        app = "mark"
        input = {{ name = "a", sleep = 0.3 }}
        [nodes.b]
        project = "{marker_project}"
        app = "mark"
        input = {{ name = "b", fail = true }}
        needs = ["a"]
    """)
    proc = subprocess.Popen([sys.executable, "-m", "workrun", "run", str(wf)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=os.environ.copy())
    proc.stdout.readline()
    proc.stdout.close()  # like `| head -1`
    proc.wait(timeout=180)
    runs = json.loads(subprocess.run([sys.executable, "-m", "workrun", "runs", "list", "--json"],
                                     capture_output=True, text=True).stdout)
    assert runs[0]["status"] == "failed"  # the run finished (and compensated) instead of dying mid-way
    view = json.loads(subprocess.run([sys.executable, "-m", "workrun", "runs", "show", runs[0]["run_id"], "--json"],
                                     capture_output=True, text=True).stdout)
    assert view["unfinished_compensations"] == []


def test_bad_status_filter_and_missing_project_dir(workrun, write_workflow, tmp_path):
    res = workrun("compensations", "list", "--status", "bogus")
    assert res.code == 2 and "--status" in res.err
    wf = write_workflow("missing", """
        [nodes.a]
        project = "../nonexist"
        app = "x"
    """)
    res = workrun("run", wf)
    assert res.code == 2 and res.err.startswith(f"error: {wf}: nodes.a.project: ")


def test_leftover_attempt_directory_from_a_crash_does_not_wedge_resume(workrun, isolated_env):
    """A runner killed after making an attempt's directory but before journaling its intent
    (found by the crash matrix under load): resume must still run that compensation."""
    root = Path(__file__).resolve().parents[2]
    res = workrun("run", root / "demo_apps/workflows/tutorial.toml", "--json", env={"WORKRUN_FAULT": "run.failed"})
    assert res.code == -signal.SIGKILL
    run_id = workrun("runs", "list", "--json").json()[0]["run_id"]
    view = workrun("runs", "show", run_id, "--json").json()
    cid = next(o for o in view["operations"] if o["node_key"] == "create")["compensation"]["compensation_id"]
    (isolated_env / "calls" / f"{cid}-1").mkdir(parents=True)
    res = workrun("resume", "--json")
    assert res.code == 0, res
    comp = next(o for o in res.json()["runs"][0]["operations"] if o["node_key"] == "create")["compensation"]
    assert comp["status"] == "succeeded" and len(comp["attempts"]) == 1


def test_compensate_of_stopped_run_with_nothing_to_undo_is_finished(workrun, write_workflow, marker_project):
    """A stopped run with no succeeded call, compensated on request, must not be 'resumed' forever."""
    wf = write_workflow("stopearly", f"""
        [nodes.a]
        project = "{marker_project}"
        app = "mark"
        input = {{ name = "a", sleep = 30 }}
    """)
    proc = spawn_cli("run", wf, "--json", env={})
    view = wait_for(lambda: op_running(workrun, "a"), what="a to run", proc=proc)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 130
    assert any("nothing to undo" in m["text"] for m in json.loads(out)["messages"])
    res = workrun("compensate", view["run_id"])
    assert res.code == 0, res
    res = workrun("resume")
    assert res.code == 0 and "nothing to resume" in res.out


def test_app_exits_like_python_threads_and_atexit(workrun, make_project):
    """The launcher skips module teardown for speed but still joins non-daemon threads and runs atexit."""
    proj = make_project("threads", """
        [tool.workrun.apps.t]
        entry = "main.py"
    """, {"main.py": """
        import atexit, sys, threading, time
        from workrun_sdk import process
        def later():
            time.sleep(0.3)
            process.result({"from": "thread"})
        threading.Thread(target=later).start()
        atexit.register(lambda: print("atexit ran", flush=True))
        print("main done")
    """})
    res = workrun("app", "run", proj, "t", "--json")
    assert res.code == 0, res
    out = res.json()
    assert out["result"] == {"from": "thread"}
    assert out["stdout_tail"].splitlines() == ["main done", "atexit ran"]


def test_snapshot_over_the_bound_fails_the_call_before_it_starts(workrun, make_project, write_workflow, tmp_path):
    proj = make_project("snap", """
        [tool.workrun.apps.s]
        entry = "main.py"
        compensation = { entry = "compensate.py", code = "snapshot" }
    """, {"main.py": "open(__import__('os').environ['MARK'], 'w').write('ran')\n", "compensate.py": "print(1)\n"})
    wf = write_workflow("snap", f"""
        [nodes.s]
        project = "{proj}"
        app = "s"
    """)
    mark = tmp_path / "ran"
    res = workrun("run", wf, "--json", env={"WORKRUN_SNAPSHOT_MAX_BYTES": "10", "MARK": str(mark)})
    assert res.code == 1, res
    op = res.json()["operations"][0]
    assert op["status"] == "failed" and "over the 10-byte bound" in op["error"]
    assert not mark.exists()
    res = workrun("run", wf, "--json", env={"MARK": str(mark)})
    assert res.code == 0 and mark.exists()


def test_context_is_immutable_with_resources_as_a_list(workrun, write_workflow, make_project, tmp_path):
    """SPEC §10: context() is an immutable object with attributes; resources is a list of {kind, id, ...}."""
    report = tmp_path / "ctx.json"
    proj = make_project("ctx", """
        [tool.workrun.apps.c]
        entry = "main.py"
        compensation = { entry = "compensate.py" }
    """, {"main.py": """
        from workrun_sdk import process
        process.resource("file", "/tmp/a", size=3)
        process.resource("upload", "u-1")
        process.result({"ok": True})
    """, "compensate.py": f"""
        import json
        from workrun_sdk import compensation
        ctx = compensation.context()
        try:
            ctx.compensation_id = "x"
            mutable = True
        except AttributeError:
            mutable = False
        json.dump({{"resources": ctx.resources, "is_list": isinstance(ctx.resources, list), "mutable": mutable,
                   "ids": [ctx.original_operation_id, ctx.compensation_id]}}, open({str(report)!r}, "w"))
    """})
    wf = write_workflow("ctx", f"""
        [nodes.c]
        project = "{proj}"
        app = "c"
        [nodes.boom]
        project = "{proj}"
        app = "c"
        input = {{ x = "{{{{ nodes.c.result.missing }}}}" }}
    """)
    res = workrun("run", wf, "--json")
    assert res.code == 1, res
    got = json.loads(report.read_text())
    assert got["resources"] == [{"kind": "file", "id": "/tmp/a", "size": 3}, {"kind": "upload", "id": "u-1"}]
    assert got["is_list"] is True and got["mutable"] is False
    op = next(o for o in res.json()["operations"] if o["node_key"] == "c")
    assert got["ids"] == [op["operation_id"], op["compensation"]["compensation_id"]]


def test_debug_keeps_exit_code_and_error_line(workrun):
    res = workrun("--debug", "runs", "show", "run_nope")
    assert res.code == 2
    assert "Traceback" in res.err and res.err.strip().splitlines()[-1] == "error: RUN: no run matches 'run_nope'"


def test_backoff_is_capped_at_60_seconds_after_jitter():
    from workrun.core.backoff import backoff_delay

    assert all(backoff_delay(40, n) <= 60.0 for n in range(1, 8) for _ in range(200))
    assert 0.75 <= backoff_delay(1, 1) <= 1.25 and backoff_delay(0, 3) == 0.0


def test_unknown_id_is_exit_2_even_while_a_scheduler_runs(workrun, write_workflow, marker_project):
    wf = write_workflow("busy", f"""
        [nodes.a]
        project = "{marker_project}"
        app = "mark"
        input = {{ name = "a", sleep = 20 }}
    """)
    proc = spawn_cli("run", wf, "--json", env={})
    wait_for(lambda: op_running(workrun, "a"), what="a to run", proc=proc)
    try:
        assert workrun("compensations", "retry", "cmp_nope").code == 2
        assert workrun("compensate", "run_nope").code == 2
        assert workrun("resume").code == 3
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)


# --- found by the break-it pass on the fork server's spares and the prestart (issue 14) -----------------------


def test_nothing_of_a_refused_data_dir_runs_ahead_of_its_check(workrun, write_workflow, marker_project,
                                                                isolated_env, tmp_path):
    """The fork server ``workrun run`` prestarts comes from the data dir's SDK copy: a data dir that group or
    others can write to is refused (exit 2) before anything of it runs, prestart included."""
    wf = write_workflow("one", f'[nodes.a]\nproject = "{marker_project}"\napp = "mark"\n')
    env = {"TEST_LOG": str(tmp_path / "log.jsonl")}
    assert workrun("run", wf, "--json", env=env).code == 0  # syncs the environment, copies the SDK
    planted = tmp_path / "planted"
    (server,) = isolated_env.glob("sdk/*/workrun_sdk/_forkserver.py")
    server.write_text(server.read_text().replace(
        "from __future__ import annotations\n",
        f"from __future__ import annotations\nopen({str(planted)!r}, 'a').write('ran')\n", 1))
    os.chmod(isolated_env, 0o777)
    try:
        res = workrun("run", wf, "--json", env=env)
    finally:
        os.chmod(isolated_env, 0o700)
    assert res.code == 2 and "writable by group or others" in res.err, res
    time.sleep(0.5)  # a prestarted server would have run by now
    assert not planted.exists()


def test_a_stop_signal_whose_message_cannot_be_printed_still_stops(isolated_env):
    """Ctrl-C while the main thread is importing what printing needs made the signal handler raise (an internal
    error, the run left running): saying that a stop was asked can fail, the stop itself cannot."""
    from workrun.cli.session import scheduling

    class Broken:
        def __getattr__(self, name):
            def fail(*args, **kwargs):
                raise ImportError("cannot import name from partially initialized module")
            return fail

    with scheduling(json_mode=True, wait=False) as svc:
        svc.reporter = Broken()
        signal.raise_signal(signal.SIGINT)
        assert svc.stopping()


def test_input_that_is_not_utf8_is_refused_in_one_line(isolated_env, write_workflow, marker_project):
    wf = write_workflow("one", f'[inputs]\ntag = "x"\n[nodes.a]\nproject = "{marker_project}"\napp = "mark"\n')
    proc = subprocess.run([sys.executable, "-m", "workrun", "run", str(wf).encode(), b"-i", b"tag=\xff"],
                          capture_output=True, timeout=120)
    assert proc.returncode == 2, proc
    assert proc.stderr.count(b"\n") == 1 and b"--input" in proc.stderr and b"Traceback" not in proc.stderr


def test_an_empty_data_directory_nobody_may_write_is_exit_2_naming_it(tmp_path, workrun):
    """Issue 26 item 4 (SPEC §17): ``WORKRUN_HOME`` an existing empty directory this user cannot write
    (immutable, so root too is refused): a read command exits 2 naming it, not 1."""
    import shutil

    home = tmp_path / "frozen-home"
    home.mkdir(mode=0o700)
    chattr = shutil.which("chattr")
    if chattr is None or subprocess.run([chattr, "+i", str(home)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not available on this file system (needs e2fsprogs and root)")
    try:
        for args in (["runs", "list", "--json"], ["runs", "list"], ["compensations", "list"]):
            res = workrun(*args, env={"WORKRUN_HOME": str(home)})
            assert res.code == 2, res
            assert "WORKRUN_HOME" in res.err and str(home) in res.err and "Traceback" not in res.err
        assert list(home.iterdir()) == []
    finally:
        subprocess.run([chattr, "-i", str(home)], check=True)


# --- found by the hostile review of issue 33's third pass ---------------------------------------------------------


def test_a_project_path_no_system_call_takes_is_one_error_line_not_an_internal_error(cli, write_workflow, tmp_path):
    """A NUL in ``project`` and a symlink loop: exit 2 naming the field (SPEC §10), not ``internal error``."""
    (tmp_path / "loop1").symlink_to(tmp_path / "loop2")
    (tmp_path / "loop2").symlink_to(tmp_path / "loop1")
    nul = cli("check", write_workflow("nul", '[nodes.a]\nproject = "a\\u0000b"\napp = "x"\n'))
    assert nul.code == 2 and "nodes.a.project: not a usable path" in nul.err and "internal" not in nul.err, nul
    loop = cli("check", write_workflow("loop", f'[nodes.a]\nproject = "{tmp_path / "loop1"}"\napp = "x"\n'
                                               f'[nodes.b]\nkind = "agent"\ntools = [{{ project = '
                                               f'"{tmp_path / "loop2"}", app = "t" }}]\n'))
    assert loop.code == 2 and "internal" not in loop.err, loop
    assert [ln.split(": ")[2] for ln in loop.err.strip().splitlines()] == ["nodes.a.project",
                                                                          "nodes.b.tools[0].project"], loop


def test_ctrl_c_that_code_below_wraps_in_its_own_error_is_still_interrupted_exit_130():
    """pydantic catches a KeyboardInterrupt while it builds a model and raises an error of its own: the command
    reports what the person did (``interrupted``, 130), not an internal error (exit 1)."""
    probe = ("import os, signal, sys\nfrom workrun.cli import entry\nentry._note_interrupts()\n"
             "try:\n    try:\n        os.kill(os.getpid(), signal.SIGINT)\n        signal.pause()\n"
             "    except KeyboardInterrupt as exc:\n        raise RuntimeError('Error calling __set_name__') from exc\n"
             "except RuntimeError as exc:\n    code = entry._failed(exc, False)\nprint(code)\n"
             "print(entry._failed(RuntimeError('no interrupt here'), False) if not entry._INTERRUPTED else 'noted')\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["130", "noted"], out
    assert out.stderr.strip() == "error: interrupted", out
    plain = subprocess.run([sys.executable, "-c", "from workrun.cli import entry\n"
                            "print(entry._failed(RuntimeError('boom'), False))\n"],
                           capture_output=True, text=True, timeout=60)
    assert plain.stdout.strip() == "1" and "internal error: RuntimeError: boom" in plain.stderr, plain


def test_a_run_that_cannot_be_resumed_does_not_stop_every_later_command(cli, write_workflow, isolated_env,
                                                                         monkeypatch):
    """Hostile review: a run whose driving fails with an internal error (a bug) was resumed first by every later
    ``run``, which failed the same way until ``workrun stop``. Now it is reported and left as it is, the new run
    runs; ``workrun resume`` itself still shows the error."""
    import sqlite3 as sq

    from workrun.engine import recovery

    wf = write_workflow("h", 'http_allow = ["127.0.0.1"]\n[nodes.a]\nkind = "http"\nmethod = "GET"\n'
                             'url = "http://127.0.0.1:9/x"\n')
    first = cli("run", wf, "--json")
    assert first.code == 1, first.err
    old = json.loads(first.out)["run_id"]
    db = sq.connect(isolated_env / "journal.sqlite3")
    db.execute("UPDATE runs SET status = 'running', ended_at = NULL WHERE run_id = ?", (old,))
    db.commit()
    db.close()
    real = recovery.drive

    def broken(svc, run_id, executors):
        if run_id == old:
            raise RuntimeError("boom")
        return real(svc, run_id, executors)

    monkeypatch.setattr(recovery, "drive", broken)
    second = cli("run", wf)
    said = f"run {old} could not be resumed: internal error: RuntimeError: boom"
    assert second.code == 1 and said in second.out and "run failed" in second.out, second.out + second.err
    runs = json.loads(cli("runs", "list", "--json").out)
    assert len(runs) == 2 and {r["run_id"] for r in runs} - {old}
    shown = json.loads(cli("runs", "show", old, "--json").out)
    assert shown["status"] == "running" and any(said in m["text"] for m in shown["messages"])
    resumed = cli("resume")
    assert resumed.code == 1 and "internal error" in resumed.err and "RuntimeError" in resumed.err
