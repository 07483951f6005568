"""The fork server (R-P1, R-P2): warm Tool Apps, replacement, lifetime, WORKRUN_LAUNCH.

Real uv App projects and real fork servers; the agent is the scripted model.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from workrun.runner.env import EnvManager, app_environment, sdk_path
from workrun.runner.forkserver import ForkServerError, ForkServers

TOOLS_APP = """
[tool.workrun.apps.tools]
kind = "tool"
entry = "tools.py"
warm = {warm}
"""

TOOLS = """
import os
from workrun_sdk.tool import tool

IMPORTED_IN = os.getpid()


@tool(name="who", description="Where this module was imported and where the call runs.")
def who(i: int) -> dict:
    return {"i": i, "imported_in": IMPORTED_IN, "pid": os.getpid()}
"""


def _agent(write_workflow, project: Path, calls: int) -> Path:
    steps = ", ".join(f'{{ tool = "who", args = {{ i = {i} }} }}' for i in range(calls))
    return write_workflow("agent", f"""
        [nodes.agent]
        kind = "agent"
        tools = [{{ project = "{project}", app = "tools" }}]
        prompt = "who"
        max_steps = {calls + 1}
        script = [{steps}]
    """)


@pytest.mark.parametrize(("launch", "warm"), [("fork", True), ("fork", False), ("spawn", True)])
def test_warm_tool_module_is_imported_once_and_every_call_still_forks(workrun, write_workflow, make_project,
                                                                       launch, warm):
    """R-P2: ``warm = true`` imports the tool module once in the fork server; each call is its own
    process. Without warm (or with spawn) every call imports the module itself."""
    project = make_project("tools", TOOLS_APP.format(warm=str(warm).lower()), {"tools.py": TOOLS})
    res = workrun("run", _agent(write_workflow, project, 3), "--json", env={"WORKRUN_LAUNCH": launch})
    assert res.code == 0, res
    results = [o["result"] for o in res.json()["operations"]]
    assert [r["i"] for r in results] == [0, 1, 2]
    pids = {r["pid"] for r in results}
    assert len(pids) == 3  # one process per call
    if launch == "fork" and warm:
        assert len({r["imported_in"] for r in results}) == 1
        assert not {r["imported_in"] for r in results} & pids
    else:
        assert all(r["imported_in"] == r["pid"] for r in results)


def test_warm_on_a_process_app_is_a_config_error(workrun, write_workflow, make_project):
    project = make_project("warmproc", '[tool.workrun.apps.p]\nentry = "main.py"\nwarm = true\n',
                           {"main.py": "print('never')\n"})
    wf = write_workflow("p", f'[nodes.p]\nproject = "{project}"\napp = "p"\n')
    res = workrun("run", wf, "--json")
    assert res.code == 2, res
    assert res.err.count("\n") == 1 and "warm" in res.err and "Traceback" not in res.err, res.err


@pytest.mark.parametrize("value", ["forks", "1", "SPAWN"])
def test_invalid_launch_mode_is_one_line_exit_2(workrun, value):
    res = workrun("runs", "list", env={"WORKRUN_LAUNCH": value})
    assert res.code == 2, res
    assert res.err.count("\n") == 1 and "WORKRUN_LAUNCH" in res.err and "Traceback" not in res.err, res.err


@pytest.fixture
def env_of(make_project, tmp_path):
    """A synced Tool App project and what ForkServers.start needs: (project, python, sdk_dir)."""
    project = make_project("tools", TOOLS_APP.format(warm="true"), {"tools.py": TOOLS})
    data = tmp_path / "data"
    data.mkdir()
    python = EnvManager(data).python(project)
    return project, python, sdk_path(data), data


def _start(servers: ForkServers, env_of, name: str, script: str, envelope: dict | str,
           warm: tuple[str, str] | None = None):
    """Start one call of ``script`` (in the project) with ``input.json`` = ``envelope`` (a dict gets ``v``:
    1; a string is written as it is); return ``(process, call directory)``."""
    project, python, sdk_dir, data = env_of
    call_dir = data / "calls" / name
    call_dir.mkdir(parents=True)
    (call_dir / "input.json").write_text(envelope if isinstance(envelope, str) else json.dumps({"v": 1, **envelope}))
    proc = servers.start(python, sdk_dir, project, project / script, call_dir,
                         app_environment(python, sdk_dir, call_dir), warm)
    return proc, call_dir


def _first_call_and_spare(servers: ForkServers, env_of):
    """Make one call, then wait for the spare the server forks once it ended: ``(server, spare pid)``."""
    import time

    _call(servers, env_of, "c1", None)
    (server,) = [s for _, s in servers._servers.values()]
    deadline = time.monotonic() + 10
    while not (spares := _children(server.proc.pid)) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(spares) == 1, spares  # the spare (the first call's supervisor has exited)
    return server, spares[0]


def _call(servers: ForkServers, env_of, name: str, warm: tuple[str, str] | None):
    proc, call_dir = _start(servers, env_of, name, "tools.py",
                            {"kind": "tool", "input": {"i": 1}, "tool": "who", "grace": 1}, warm)
    proc.wait()
    assert json.loads((call_dir / "exit.json").read_text())["exit_code"] == 0, (call_dir / "stderr").read_text()
    _gone(proc.pid)  # wait() returns once the supervisor said the call ended; it exits right after
    return json.loads((call_dir / "result.json").read_text())["result"]


def _gone(pid: int) -> None:
    """Wait until ``pid`` is no live process (a zombie counts as gone)."""
    import time

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                if fh.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return
        except OSError:
            return
        time.sleep(0.005)
    raise AssertionError(f"process {pid} still runs")


def _server_pids(servers: ForkServers) -> list[int]:
    return [server.proc.pid for _, server in servers._servers.values()]


def _dead(pid: int) -> None:
    """Wait until ``pid`` (a child of this process) has died: a zombie, its descriptors closed."""
    import time

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                if fh.read().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                    return
        except OSError:
            return
        time.sleep(0.01)
    raise AssertionError(f"{pid} did not die")


def test_server_replaced_when_fingerprint_changes_or_it_dies_and_ended_on_close(env_of):
    """R-P2: a new fingerprint gets a new warm server (the old one ends); a dead server is replaced
    without failing the call; close() ends every server."""
    project = env_of[0]
    entry = str(project / "tools.py")
    servers = ForkServers()
    try:
        first = _call(servers, env_of, "c1", (entry, "fp1"))
        again = _call(servers, env_of, "c2", (entry, "fp1"))
        assert first["imported_in"] == again["imported_in"]  # the same warm server
        (old,) = _server_pids(servers)
        changed = _call(servers, env_of, "c3", (entry, "fp2"))
        assert changed["imported_in"] != first["imported_in"]
        (new,) = _server_pids(servers)
        assert new != old
        os.kill(new, 9)
        _dead(new)  # (a request sent while it is dying may be taken by its spare, a whole supervisor: fine too)
        replaced = _call(servers, env_of, "c4", (entry, "fp2"))
        assert replaced["imported_in"] not in (changed["imported_in"], first["imported_in"])
        plain = _call(servers, env_of, "c5", None)
        assert plain["imported_in"] == plain["pid"]
        pids = _server_pids(servers)
        assert len(pids) == 2
    finally:
        servers.close()
    for pid in pids:
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)  # exited and reaped by close()


def test_hang_up_ends_the_servers_without_waiting_and_no_call_starts_after_it(env_of):
    """Issue 33: at the end of a run the servers are told to end at once (their exit overlaps the runner's last
    work); close() then only reaps them. A call after the hang-up is refused, never sent to a closed socket."""
    servers = ForkServers()
    try:
        _call(servers, env_of, "c1", None)
        (pid,) = _server_pids(servers)
        servers.hang_up()
        _dead(pid)  # it ends by itself: nobody waited for it
        with pytest.raises(ForkServerError, match="shutting down"):
            _start(servers, env_of, "c2", "tools.py", {"kind": "tool", "input": {"i": 1}, "tool": "who", "grace": 1},
                   None)
    finally:
        servers.close()
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # reaped by close()


def test_a_server_whose_request_pipe_broke_is_not_asked_again(env_of):
    """CI finding: a server killed a moment ago can break its pipe before it can be reaped (poll() still None);
    the retry must go to a new server, not to the same one again."""
    servers = ForkServers()
    try:
        _call(servers, env_of, "c1", None)
        (old,) = [s for _, s in servers._servers.values()]
        r, w = os.pipe()
        os.close(r)
        os.dup2(w, old._req)  # its request pipe now has no reader, the process still runs
        os.close(w)  # (the server may see its old pipe close and exit at once, or still run: both must work)
        assert _call(servers, env_of, "c2", None)["i"] == 1
        (new,) = [s for _, s in servers._servers.values()]
        assert new is not old and old.proc.poll() is not None  # the old one was ended
    finally:
        servers.close()


def _servers_of(home: Path) -> list[int]:
    """Pids of live fork servers started for the data dir ``home`` (their script lives in its SDK copy)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as fh:
                argv = fh.read().split(b"\0")
            with open(f"/proc/{name}/stat") as fh:
                if fh.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue
        except OSError:
            continue
        if any(a.endswith(b"_forkserver.py") and a.startswith(str(home).encode()) for a in argv):
            found.append(int(name))
    return found


def test_servers_end_with_the_runner_also_when_it_is_killed(workrun, write_workflow, make_project,
                                                             isolated_env):
    """R-P2: fork servers end when the runner ends (closed pipes), and when it is SIGKILLed (EOF)."""
    import signal
    import time

    project = make_project("tools", TOOLS_APP.format(warm="true"), {"tools.py": TOOLS})
    res = workrun("run", _agent(write_workflow, project, 2), "--json", env={"WORKRUN_LAUNCH": "fork"})
    assert res.code == 0, res
    assert _servers_of(isolated_env) == []
    res = workrun("run", _agent(write_workflow, project, 2), "--json",  # killed after the first tool call
                  env={"WORKRUN_LAUNCH": "fork", "WORKRUN_FAULT": "op.intent@2"})
    assert res.code == -signal.SIGKILL, res
    end = time.monotonic() + 15
    while _servers_of(isolated_env) and time.monotonic() < end:
        time.sleep(0.05)
    assert _servers_of(isolated_env) == []


@pytest.mark.parametrize("launch", ["fork", "spawn"])
def test_a_call_sees_exactly_its_environment_and_its_input_once_read(make_project, tmp_path, launch):
    """The fork server hands a call exactly the environment the runner built (only the names that differ from
    the server's are changed in the forked supervisor), and the App reads the input the supervisor read."""
    import time

    from workrun.runner.local import LocalRunner

    project = make_project("envapp", '[tool.workrun.apps.envapp]\nentry = "main.py"\n', {"main.py": """
        import os
        from workrun_sdk import process
        process.result({"env": dict(os.environ), "input": process.input()})
    """})
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    runner = LocalRunner(data, grace=1.0, launch=launch)
    try:
        python = runner.prepare(project)
        for i, extra in enumerate(({}, {"WORKRUN_TEST_ONLY_HERE": "x"})):
            call_dir = data / "calls" / f"c{i}"
            call_dir.mkdir(parents=True)
            os.environ.update(extra)  # the next call's environment has one name more than the server's
            try:
                started = runner.start(python, project, project / "main.py", call_dir,
                                       {"kind": "process", "input": {"i": i}, "context": None, "tool": None})
                want = app_environment(python, runner.sdk_dir, call_dir)
            finally:
                for name in extra:
                    del os.environ[name]
            assert runner.wait(started, time.time() + 60).exit_code == 0, (call_dir / "stderr").read_text()
            got = runner.collect(call_dir).result
            assert got["input"] == {"i": i}
            got_env = {k: v for k, v in got["env"].items() if k not in ("PWD", "LC_CTYPE")}
            assert got_env == {k: v for k, v in want.items() if k not in ("PWD", "LC_CTYPE")}
    finally:
        runner.close()


def test_a_prestarted_server_is_taken_over_by_the_first_call_of_its_environment(env_of):
    """The server ``prestart`` starts ahead of time serves the first call whose environment matches (no second
    server); a server started for another environment is not used, and close ends it too."""
    from workrun.runner import forkserver

    project, python, sdk_dir, data = env_of
    env = app_environment(python, sdk_dir, data / "calls" / "x")
    forkserver.prestart(python, sdk_dir, env, project)
    forkserver.prestart(python, sdk_dir, {**env, "WORKRUN_TEST_OTHER": "1"}, project)
    early = [server.proc.pid for server in forkserver._EARLY.values()]
    assert len(early) == 2
    servers = ForkServers()
    try:
        _call(servers, env_of, "c1", None)
        used = _server_pids(servers)
        assert len(used) == 1 and used[0] in early
        assert len(forkserver._EARLY) == 1  # the other environment's server is still waiting
    finally:
        servers.close()
    assert forkserver._EARLY == {}
    for pid in early:
        deadline = __import__("time").monotonic() + 10
        while os.path.exists(f"/proc/{pid}") and __import__("time").monotonic() < deadline:
            with open(f"/proc/{pid}/stat") as fh:
                if fh.read().rsplit(")", 1)[1].split()[0] == "Z":
                    break
            __import__("time").sleep(0.02)
        else:
            assert not os.path.exists(f"/proc/{pid}"), f"server {pid} still runs after close"


def test_workrun_run_starts_the_first_environment_server_once_ahead_of_the_call(workrun, write_workflow,
                                                                              make_project, isolated_env):
    """``workrun run`` starts the first process node's fork server while it loads (issue 14); the call is then
    served by it: during the call exactly one server of this data dir is alive."""
    project = make_project("count", '[tool.workrun.apps.count]\nentry = "main.py"\n', {"main.py": f"""
        import os
        from workrun_sdk import process
        servers = {{}}  # pid -> parent pid of every live process running this data dir's fork server script
        for name in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{{name}}/cmdline", "rb") as fh:
                    argv = fh.read().split(b"\\0")
                with open(f"/proc/{{name}}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z" and any(a.endswith(b"_forkserver.py")
                                        and a.startswith({str(isolated_env).encode()!r}) for a in argv):
                servers[int(name)] = int(fields[1])
        # a supervisor and its App are forks of a server (same command line): count the servers themselves
        mask = os.umask(0o077)
        process.result({{"servers": sum(1 for parent in servers.values() if parent not in servers),
                         "umask": mask}})
    """})
    wf = write_workflow("count", f'[nodes.a]\nproject = "{project}"\napp = "count"\n')
    first = workrun("run", wf, "--json", env={"WORKRUN_LAUNCH": "fork"})  # syncs the environment, copies the SDK
    assert first.code == 0, first
    second = workrun("run", wf, "--json", env={"WORKRUN_LAUNCH": "fork"})
    assert second.code == 0, second
    assert [o["result"] for o in json.loads(first.out)["operations"]] == [{"servers": 1, "umask": 0o077}]
    assert [o["result"] for o in json.loads(second.out)["operations"]] == [{"servers": 1, "umask": 0o077}]
    assert _servers_of(isolated_env) == []


def _children(pid: int) -> list[int]:
    """Live child pids of ``pid`` (from /proc)."""
    found = []
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{name}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[1]) == pid:
            found.append(int(name))
    return found


def test_a_spare_supervisor_serves_the_next_call_and_a_dead_one_is_forked_around(env_of):
    """Between calls a server keeps the next call's supervisor (and its App process) forked ahead; the call is
    handed to it (its pid is the one the server forked before the request); a spare that died is replaced by a
    fork at the call; closing the server ends the spare with it."""
    import signal
    import time

    servers = ForkServers()
    try:
        server, spare = _first_call_and_spare(servers, env_of)
        deadline = time.monotonic() + 10  # the spare forks its App process just after it was forked itself
        while not _children(spare) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(_children(spare)) == 1  # its App process, waiting
        proc, call_dir = _start(servers, env_of, "c2", "tools.py",
                                {"kind": "tool", "input": {"i": 2}, "tool": "who", "grace": 1})
        assert proc.pid == spare
        proc.wait()
        _gone(proc.pid)
        assert json.loads((call_dir / "result.json").read_text())["result"]["i"] == 2
        deadline = time.monotonic() + 10
        while not (spares := [p for p in _children(server.proc.pid) if p != spare]) and time.monotonic() < deadline:
            time.sleep(0.01)
        os.killpg(spares[0], signal.SIGKILL)  # the next spare dies before its call
        deadline = time.monotonic() + 5  # and is reaped at once (no zombie waits for the next request)
        while os.path.exists(f"/proc/{spares[0]}") and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not os.path.exists(f"/proc/{spares[0]}")
        assert _call(servers, env_of, "c3", None)["i"] == 1  # forked at the call instead
    finally:
        servers.close()
    assert _servers_of(env_of[3]) == []


def test_a_call_is_waited_for_until_every_process_it_started_is_gone(env_of):
    """wait() returns when the supervisor tells the runner the call ended (before its own exit, issue 14): only
    after the exit record and after every descendant (here one that left the group and ignores SIGTERM) is gone."""
    import time

    from workrun.runner.forkserver import _done

    project = env_of[0]
    (project / "leaver.py").write_text(
        "import os, signal, time\n"
        "from workrun_sdk import process\n"
        "r, w = os.pipe()\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    os.setsid()\n"
        "    signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "    os.write(w, b'.')\n"
        "    time.sleep(60)\n"
        "    os._exit(0)\n"
        "os.read(r, 1)  # it ignores SIGTERM now\n"
        "process.result({'left': pid})\n")
    servers = ForkServers()
    try:
        for name in ("c1", "c2"):  # the first from a fresh fork, the second from a spare
            proc, call_dir = _start(servers, env_of, name, "leaver.py", {"kind": "process", "input": {}, "grace": 0.5})
            t0 = time.monotonic()
            proc.wait()
            assert time.monotonic() - t0 >= 0.4  # the grace period before the SIGKILL
            assert json.loads((call_dir / "exit.json").read_text())["exit_code"] == 0
            left = json.loads((call_dir / "result.json").read_text())["result"]["left"]
            try:
                with open(f"/proc/{left}/stat") as fh:
                    assert fh.read().rsplit(")", 1)[1].split()[0] == "Z"
            except FileNotFoundError:
                pass
            assert not _done().take(str(call_dir))  # its line was taken by wait()
            _gone(proc.pid)
    finally:
        servers.close()


def test_a_supervisor_killed_while_ending_descendants_leaves_no_reusable_files_and_its_group_is_ended(env_of):
    """Break-it finding: the exit record comes before the descendants are ended; a supervisor killed in between
    must not let the call's files be reused (``ended`` is missing) and what is left of its group is ended."""
    import signal
    import time

    from workrun.runner.process import Watchdog, wait

    project = env_of[0]
    (project / "stayer.py").write_text(
        "import os, signal, time\n"
        "from workrun_sdk import process\n"
        "r, w = os.pipe()\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "    os.write(w, b'.')\n"
        "    time.sleep(60)\n"
        "    os._exit(0)\n"
        "os.read(r, 1)\n"
        "process.result({'stays': pid})\n")
    servers = ForkServers()
    watchdog = Watchdog(grace=0.5)
    try:
        proc, call_dir = _start(servers, env_of, "k", "stayer.py", {"kind": "process", "input": {}, "grace": 30})
        deadline = time.monotonic() + 20
        while not (call_dir / "exit.json").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.1)  # the supervisor now waits out the grace period of the child that ignores SIGTERM
        os.kill(proc.pid, signal.SIGKILL)
        outcome = wait(proc, watchdog, time.time() + 60, call_dir)
        assert outcome.exit_code == 0 and not outcome.ended
        stays = json.loads((call_dir / "result.json").read_text())["result"]["stays"]
        _gone(stays)  # ended with the group by the runner
    finally:
        servers.close()


def test_a_done_line_for_a_call_that_has_not_ended_is_not_believed(env_of):
    """Break-it finding: a line on the done pipe (anyone who can open it may write one) counts only when the call
    really ended (its ``ended`` mark): wait() goes on waiting for the call."""
    import time

    from workrun.runner.forkserver import _done

    project = env_of[0]
    (project / "napper.py").write_text("import time\nfrom workrun_sdk import process\ntime.sleep(1)\n"
                                       "process.result({'slept': 1})\n")
    servers = ForkServers()
    try:
        proc, call_dir = _start(servers, env_of, "n", "napper.py", {"kind": "process", "input": {}, "grace": 1})
        os.write(_done().write_fd, f"{call_dir}\n".encode())  # a forged line, long before the call ends
        t0 = time.monotonic()
        proc.wait()
        assert time.monotonic() - t0 >= 0.5
        assert json.loads((call_dir / "result.json").read_text())["result"] == {"slept": 1}
        assert (call_dir / "ended").exists()
    finally:
        servers.close()


def test_a_claimed_call_whose_input_cannot_be_read_is_recorded_as_exit_70(env_of):
    """Break-it finding: as with the spawn launcher, a supervisor that cannot read input.json after its claim
    records exit code 70 (never an unknown outcome) and runs no App code."""
    servers = ForkServers()
    try:
        proc, call_dir = _start(servers, env_of, "bad", "tools.py", "{not json")
        proc.wait()
        assert json.loads((call_dir / "exit.json").read_text())["exit_code"] == 70
        assert "the call cannot start" in (call_dir / "stderr").read_text()
        assert not (call_dir / "result.json").exists() and (call_dir / "ended").exists()
    finally:
        servers.close()


def test_the_done_pipe_takes_each_line_once_whoever_reads_it():
    """Lines of several supervisors, read in pieces by whichever waiter drains the pipe, are each taken once."""
    from workrun.runner.forkserver import _Done

    done = _Done()
    os.write(done.write_fd, b"/calls/a\n/calls/b")
    assert not done.take("/calls/b")  # not a whole line yet
    os.write(done.write_fd, b"\n/calls/c\n")
    assert done.take("/calls/b") and done.take("/calls/a") and done.take("/calls/c")
    assert not done.take("/calls/a")
    for i in range(_Done._KEEP + 10):  # lines nobody takes are not kept for ever
        os.write(done.write_fd, f"/calls/x{i}\n".encode())
        done.take("none")
    assert len(done._ended) <= _Done._KEEP and not done.take("/calls/x0")


def test_the_next_spare_is_forked_as_a_call_takes_one_and_each_supervisor_is_reaped_as_it_exits(env_of):
    """The spare a call took is replaced at once, while that call runs (issue 14), so the next call finds one;
    the call's supervisor, once it exits, is reaped at once (the server waits on a pidfd per supervisor and has
    no other reason to wake up then), so no zombie holds the call's process group."""
    import signal
    import time

    project = env_of[0]
    (project / "sleeper.py").write_text("import time\ntime.sleep(30)\n")
    servers = ForkServers()
    try:
        server, spare = _first_call_and_spare(servers, env_of)
        proc, call_dir = _start(servers, env_of, "long", "sleeper.py", {"kind": "process", "input": {}, "grace": 1})
        assert proc.pid == spare
        deadline = time.monotonic() + 10
        while not (others := [p for p in _children(server.proc.pid) if p != proc.pid]) and \
                time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(others) == 1 and proc.pid in _children(server.proc.pid)  # a new spare while the call runs
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait()
        assert json.loads((call_dir / "exit.json").read_text())["signal"] == signal.SIGTERM
        deadline = time.monotonic() + 5
        while os.path.exists(f"/proc/{proc.pid}") and time.monotonic() < deadline:  # a zombie is still there
            time.sleep(0.01)
        assert not os.path.exists(f"/proc/{proc.pid}"), "the supervisor was not reaped"
        assert _call(servers, env_of, "c2", None)["i"] == 1
    finally:
        servers.close()
    assert _servers_of(env_of[3]) == []


def test_a_spare_that_took_a_fenced_call_is_reaped_and_the_next_calls_are_served(env_of):
    """A spare tells its server that it took a call only once its App is under way (issue 33); a spare whose
    call was fenced before its claim exits without telling (exit 75, nothing of the App ran). The server reaps
    it, serves the next call itself, and keeps a spare again after it."""
    import time

    from workrun.runner.calldir import fence

    servers = ForkServers()
    try:
        server, spare = _first_call_and_spare(servers, env_of)
        project, python, sdk_dir, data = env_of
        call_dir = data / "calls" / "fenced"
        call_dir.mkdir(parents=True)
        (call_dir / "input.json").write_text(json.dumps({"v": 1, "kind": "tool", "input": {"i": 9}, "tool": "who"}))
        assert fence(call_dir)
        proc = servers.start(python, sdk_dir, project, project / "tools.py", call_dir,
                             app_environment(python, sdk_dir, call_dir))
        assert proc.pid == spare
        proc.wait()
        _gone(proc.pid)
        assert not (call_dir / "result.json").exists() and not (call_dir / "exit.json").exists()
        assert (call_dir / "claim").read_text().split() == ["abandoned"]
        assert "abandoned by the runner" in (call_dir / "stderr").read_text()  # the spare refused it
        assert _call(servers, env_of, "c2", None)["i"] == 1  # served by the server itself
        deadline = time.monotonic() + 10
        while not (spares := _children(server.proc.pid)) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(spares) == 1 and spare not in spares  # a new spare once that call's App was under way
        assert _call(servers, env_of, "c3", None)["i"] == 1
    finally:
        servers.close()
    assert _servers_of(env_of[3]) == []


def test_a_child_reaped_before_it_is_tracked_needs_no_watching():
    """Seen in a fresh-clone CI run: on a loaded machine a quick call's supervisor can exit, and be reaped by the
    server's sweep of exited children, before the server reads its spare's word. Tracking it then found no process:
    that is no reason to look for exited children every 0.2 s for the rest of the server's life (only a kernel
    without pidfds is)."""
    from workrun_sdk import _forkserver

    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)  # reaped: no such process any more
    assert _forkserver._pidfd(pid) == _forkserver._GONE
    live = os.fork()
    if live == 0:
        import time

        time.sleep(5)
        os._exit(0)
    try:
        fd = _forkserver._pidfd(live)
        assert fd >= 0
        os.close(fd)
    finally:
        os.kill(live, 9)
        os.waitpid(live, 0)


def test_a_server_sleeps_while_nothing_ends_even_after_a_call_that_ended_before_it_saw_it_start(env_of):
    """Break-it finding: a call that had ended before the server read its spare's word (the server was slow to
    run) was reaped before it was tracked; the server then looked for exited children every 0.2 s for the rest
    of its life. Here the server is stopped while a call runs and ends; afterwards, with one call that sleeps,
    it must not wake up at all."""
    import signal
    import time

    project = env_of[0]
    (project / "sleeper.py").write_text("import time\ntime.sleep(30)\n")
    servers = ForkServers()
    try:
        server, spare = _first_call_and_spare(servers, env_of)
        os.kill(server.proc.pid, signal.SIGSTOP)
        try:
            quick, _ = _start(servers, env_of, "quick", "tools.py",
                              {"kind": "tool", "input": {"i": 1}, "tool": "who", "grace": 1})
            assert quick.pid == spare
            quick.wait()
            _gone(spare)  # its supervisor has exited: a zombie the stopped server has not seen
        finally:
            os.kill(server.proc.pid, signal.SIGCONT)
        proc, _ = _start(servers, env_of, "long", "sleeper.py", {"kind": "process", "input": {}, "grace": 1})

        def wakeups() -> int:
            with open(f"/proc/{server.proc.pid}/status") as fh:
                return int(next(line for line in fh if line.startswith("voluntary_ctxt_switches")).split()[1])

        # the next spare is forked and waits; the server then waits for an event. On a loaded machine that takes
        # a while: wait until it is still for 0.3 s (a server that looked every 0.2 s never would), then watch
        settled, last = time.monotonic() + 10, wakeups()
        while True:
            time.sleep(0.3)
            now = wakeups()
            if now == last:
                break
            assert time.monotonic() < settled, "the server never stopped waking up"
            last = now
        before = wakeups()
        time.sleep(1.0)
        assert wakeups() - before == 0, "the server woke up while nothing happened"
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait()
        assert not os.path.exists(f"/proc/{spare}")  # the quick call's supervisor was reaped
    finally:
        servers.close()


@pytest.mark.parametrize("launch", ["fork", "spawn"])
def test_an_app_holds_only_its_standard_descriptors(make_project, workrun, write_workflow, launch):
    """An App (from a spare or a fresh fork or a new interpreter) inherits no descriptor of the server's,
    the supervisor's or the runner's: only stdin, stdout and stderr."""
    project = make_project("fds", '[tool.workrun.apps.fds]\nentry = "main.py"\n', {"main.py": """
        import os
        from workrun_sdk import process
        fds = sorted(int(n) for n in os.listdir("/proc/self/fd"))
        process.result({"fds": [n for n in fds if os.path.exists(f"/proc/self/fd/{n}")]})
    """})
    wf = write_workflow("fds", f'[nodes.a]\nproject = "{project}"\napp = "fds"\n'
                               f'[nodes.b]\nproject = "{project}"\napp = "fds"\nneeds = ["a"]\n')
    res = workrun("run", wf, "--json", env={"WORKRUN_LAUNCH": launch})
    assert res.code == 0, res
    assert [o["result"]["fds"] for o in res.json()["operations"]] == [[0, 1, 2], [0, 1, 2]]


@pytest.mark.parametrize("launch", ["fork", "spawn"])
def test_an_apps_output_files_behave_as_under_spawn(make_project, workrun, write_workflow, launch):
    """stdout is the call's file opened write-only from offset 0 under both launchers (no append): an App that
    seeks and overwrites gets the same file either way."""
    project = make_project("seek", '[tool.workrun.apps.seek]\nentry = "main.py"\n', {"main.py": """
        import os
        from workrun_sdk import process
        os.write(1, b"AAAA\\n")
        os.lseek(1, 0, 0)
        os.write(1, b"BB")
        process.result({})
    """})
    wf = write_workflow("seek", f'[nodes.a]\nproject = "{project}"\napp = "seek"\n'
                                f'[nodes.b]\nproject = "{project}"\napp = "seek"\nneeds = ["a"]\n')
    res = workrun("run", wf, "--json", env={"WORKRUN_LAUNCH": launch})
    assert res.code == 0, res
    assert [o["stdout_tail"] for o in res.json()["operations"]] == ["BBAA\n", "BBAA\n"]


def test_a_forked_supervisor_gone_before_its_claim_is_not_started(tmp_path):
    """A forked supervisor (its status is not ours to read) that died before it claimed its call: the call
    directory is fenced and the call is not started (nothing of the App ran), not an unknown outcome."""
    import signal
    import time

    from workrun.runner.forkserver import ForkedProcess
    from workrun.runner.process import Watchdog, wait
    from workrun_sdk._wire import start_time

    call_dir = tmp_path / "call"
    call_dir.mkdir()
    pid = os.fork()
    if pid == 0:  # stands for a supervisor killed before its claim
        time.sleep(30)
        os._exit(0)
    start = start_time(pid)
    os.kill(pid, signal.SIGKILL)
    try:
        outcome = wait(ForkedProcess(pid, start), Watchdog(grace=1.0), time.time() + 60, call_dir)
    finally:
        os.waitpid(pid, 0)
    assert outcome.not_started and not outcome.unknown, outcome
    assert (call_dir / "claim").read_text().split() == ["abandoned"]


def test_a_call_whose_environment_is_too_large_for_a_request_is_spawned(make_project, workrun, write_workflow):
    """A request is one socket message (at most REQUEST_MAX bytes): a call whose environment is larger still
    runs, spawned instead of forked, with its whole environment; the next ordinary call is forked again."""
    from workrun.runner.forkserver import REQUEST_MAX

    project = make_project("big", '[tool.workrun.apps.big]\nentry = "main.py"\n', {"main.py": """
        import os
        from workrun_sdk import process
        with open(f"/proc/{os.getppid()}/cmdline") as fh:  # the supervisor: a fork server's copy, or _launch.py
            forked = "_forkserver.py" in fh.read()
        process.result({"size": len(os.environ.get("BIG", "")), "forked": forked})
    """})
    wf = write_workflow("big", f'[nodes.a]\nproject = "{project}"\napp = "big"\n')
    res = workrun("run", wf, "--json", env={"WORKRUN_LAUNCH": "fork", "BIG": "x" * (REQUEST_MAX + 1)})
    assert res.code == 0, res
    assert res.json()["operations"][0]["result"] == {"size": REQUEST_MAX + 1, "forked": False}
    res = workrun("run", wf, "--json", env={"WORKRUN_LAUNCH": "fork", "BIG": "x" * 100})
    assert res.code == 0, res
    assert res.json()["operations"][0]["result"] == {"size": 100, "forked": True}


SERVER_OF = """
import os, sys


def server_of_this_call() -> dict:
    with open(f"/proc/{os.getppid()}/stat") as fh:  # the supervisor's parent: the fork server
        server = int(fh.read().rsplit(")", 1)[1].split()[1])
    with open(f"/proc/{server}/cmdline", "rb") as fh:
        argv = [a.decode() for a in fh.read().split(b"\\0") if a]
    return {"server": server, "calls": argv[5], "tool_sdk": "workrun_sdk.tool" in sys.modules}
"""

KINDS_APPS = """
[tool.workrun.apps.p]
entry = "main.py"
[tool.workrun.apps.tools]
kind = "tool"
entry = "tools.py"
"""


def test_process_calls_fork_from_a_server_without_the_tool_sdk(workrun, write_workflow, make_project):
    """Issue 14: a server for process (and compensation) calls does not load the tool SDK (every page more in the
    server is a page more to copy and tear down per call); Tool App calls of the same environment use a server
    that does."""
    main = SERVER_OF + "from workrun_sdk import process\nprocess.result(server_of_this_call())\n"
    tools = SERVER_OF + ("from workrun_sdk.tool import tool\n\n\n@tool(name='where', description='Its server.')\n"
                         "def where(i: int) -> dict:\n    return server_of_this_call()\n")
    project = make_project("kinds", KINDS_APPS, {"main.py": main, "tools.py": tools})
    wf = write_workflow("kinds", f"""
        [nodes.p]
        project = "{project}"
        app = "p"
        [nodes.agent]
        kind = "agent"
        needs = ["p"]
        tools = [{{ project = "{project}", app = "tools" }}]
        prompt = "where"
        max_steps = 2
        script = [{{ tool = "where", args = {{ i = 1 }} }}]
    """)
    res = workrun("run", wf, "--json")
    assert res.code == 0, res
    by_node = {o["node_key"]: o["result"] for o in res.json()["operations"]}
    assert by_node["p"]["calls"] == "process" and by_node["p"]["tool_sdk"] is False, by_node
    assert by_node["agent"]["calls"] == "tool" and by_node["agent"]["tool_sdk"] is True, by_node
    assert by_node["p"]["server"] != by_node["agent"]["server"]


def test_a_supervisor_gone_before_it_is_waited_for_is_still_told_ended(tmp_path):
    """A quick call on a busy machine: its supervisor wrote its *done* line and exited (and was reaped) before the
    runner waited; the line still says every process of the call ended (before, only a live supervisor's was
    read: the call's directory was not recycled and its group was ended again)."""
    import os
    import subprocess
    import sys

    from workrun.runner import forkserver
    from workrun_sdk import _wire

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # its pid: no such process any more
    call_dir = tmp_path / "op_0123456789ab"
    call_dir.mkdir()
    (call_dir / _wire.ENDED).write_text("")
    done = forkserver._done()
    os.write(done.write_fd, f"{call_dir}\n".encode())
    proc = forkserver.ForkedProcess(gone.pid, None, str(call_dir))
    assert proc.wait(timeout=5) and proc.told
    other = tmp_path / "op_ba9876543210"  # no line for it: not told, whatever files it holds
    other.mkdir()
    (other / _wire.ENDED).write_text("")
    quiet = forkserver.ForkedProcess(gone.pid, None, str(other))
    assert quiet.wait(timeout=5) and not quiet.told
