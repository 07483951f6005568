"""Workers sharing one PostgreSQL journal (R-S1..R-S4), with real ``workrun worker`` processes.

``TEST_FLEET_RUNS`` sets how many runs the fleet test submits (default 40 here,
to keep the suite fast on a loaded 2-core machine; ``bench/bench_workers.py``
uses 200 by default).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from _kit import fleet
from _kit.processes import wait_for


@pytest.fixture
def shared(pg_url, monkeypatch, tmp_path):
    """A shared journal on the test server, a 3 s lease, the marker log, and a journal handle to look with."""
    from workrun.journal import open_journal

    monkeypatch.setenv("WORKRUN_JOURNAL", pg_url)
    monkeypatch.setenv("WORKRUN_LEASE", "3")
    log = tmp_path / "markers.jsonl"
    monkeypatch.setenv("TEST_LOG", str(log))
    journal = open_journal(tmp_path)
    yield {"journal": journal, "log": log, "url": pg_url}
    journal.close()


def _cli(*args, env=None, timeout=120):
    return subprocess.run([sys.executable, "-m", "workrun", *map(str, args)], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=timeout)


def test_four_workers_compensate_every_run_once_in_reverse_order(shared, tmp_path, monkeypatch):
    """R-S2: 4 workers, N runs (chains and diamonds) that finally fail: every run ends, every compensation
    runs exactly once (marker counts), in reverse dependency order (marker timestamps)."""
    # nobody dies here: a lease far above a heartbeat's worst delay on a loaded machine, so no takeover can happen
    monkeypatch.setenv("WORKRUN_LEASE", "30")
    count = int(os.environ.get("TEST_FLEET_RUNS", "40"))
    project = fleet.make_project(tmp_path)
    workflows = {s: fleet.write_workflow(tmp_path, s, project) for s in fleet.SHAPES}
    via_cli = _cli("run", workflows["chain"], "--submit", "--input", "run=cli")
    assert via_cli.returncode == 0 and via_cli.stdout.strip().startswith("run_"), via_cli
    run_ids = [via_cli.stdout.strip(), *fleet.submit(workflows, count - 1)]
    procs = [fleet.start_worker(tmp_path / f"home{i}", tmp_path, f"w{i}") for i in range(4)]
    try:
        fleet.wait_all_ended(shared["journal"], run_ids, timeout=600, procs=procs)
    finally:
        fleet.stop_workers(procs)
    assert [p.returncode for p in procs] == [0, 0, 0, 0], [(tmp_path / f"w{i}.out").read_text()[-2000:]
                                                           for i in range(4)]
    got = fleet.check_runs(shared["journal"], run_ids, shared["log"])
    # the CLI's chain, then chains and diamonds alternating: 3 and 4 compensations each
    assert got["compensations"] == 3 + sum(3 if i % 2 == 0 else 4 for i in range(count - 1))
    claimers = {c["worker_id"] for c in shared["journal"]._query("SELECT worker_id FROM run_claims")}
    assert len(claimers) >= 2, claimers  # the work was shared
    calls = shared["journal"]._query("SELECT worker_id, status, decided_by FROM dispatched_calls")
    assert len({c["worker_id"] for c in calls}) >= 2 and {c["status"] for c in calls} == {"done"}
    assert {c["decided_by"] for c in calls} == {"executor"}  # nobody died: every outcome came from its executor


def _attempt_running(journal, node):
    """b's attempt once its App process runs: ``{compensation_id, number, pid (the App's group), worker_id}``."""
    rows = journal._query("SELECT a.compensation_id, a.number, d.pid, d.worker_id FROM attempts a JOIN compensations c "
                          "USING (compensation_id) JOIN dispatched_calls d ON d.call_id = a.compensation_id || '-' || "
                          "a.number WHERE c.node_key = ? AND a.status = 'running' AND d.pid IS NOT NULL", (node,))
    return rows[0] if rows else None


def _call_of(journal, comp, number=1):
    return journal.dispatched_call(f"{comp['compensation_id']}-{number}")


@pytest.mark.parametrize(("killed", "case"), [
    ("one", "exit-record"), ("one", "no-exit-record"), ("one", "other-machine"),
    ("executor", "exit-record"), ("executor", "other-machine"), ("scheduler", "exit-record")])
def test_kill_9_worker_mid_attempt_claims_taken_over_after_lease(shared, tmp_path, killed, case):
    """R-S2 + R-R3: a worker is killed with SIGKILL while a compensation attempt runs.

    - ``one``: worker A schedules the run and executes its calls; after A's lease worker B takes the run
      over and decides the attempt from its exit record (the App outlived A), or marks it ``unknown`` when
      no exit record can be reached (the App's group was killed too, or A was on another machine).
    - ``executor``: S only schedules (``--executors 0``), X executes; X is killed. S, still alive, decides
      the call after X's lease: exit record on the same machine, else ``unknown``; never re-sent. A later
      worker executes the rest.
    - ``scheduler``: S is killed while X executes the attempt; X stores its outcome, and the worker that
      takes the run over after S's lease picks it up from the claim's row (no re-send).

    In every case compensations whose success was saved never run again."""
    journal = shared["journal"]
    project = fleet.make_project(tmp_path)
    wf = fleet.write_workflow(tmp_path, "chain", project, comp_sleep={"b": 2.5})
    [run_id] = fleet.submit({"chain": wf}, 1)
    if killed == "one":
        a = fleet.start_worker(tmp_path / "homeA", tmp_path, "A", concurrency=1)
        others = []
    else:  # the scheduler first (it claims the run), then the executor (nothing left to schedule)
        a = s = fleet.start_worker(tmp_path / "homeS", tmp_path, "S", concurrency=1, executors=0)
        wait_for(lambda: journal.run_claim(run_id), 60, "S to claim the run")
        x = fleet.start_worker(tmp_path / "homeA", tmp_path, "A", concurrency=1)
        a, others = (x, [s]) if killed == "executor" else (s, [x])
    try:
        attempt = wait_for(lambda: _attempt_running(journal, "b"), 120, "b's compensation attempt to run")
        started = Path(str(shared["log"]) + ".started.b")
        wait_for(started.exists, 60, "b's compensate script to start")  # past its imports: truly mid-attempt
    except AssertionError:
        fleet.stop_workers([a, *others])
        raise AssertionError((tmp_path / "A.out").read_text()[-3000:]) from None
    scheduler = journal.run_claim(run_id)["worker_id"]
    executor = attempt["worker_id"]
    assert (scheduler == executor) == (killed == "one")
    os.kill(a.pid, signal.SIGKILL)
    a.wait()
    if case == "no-exit-record":
        os.killpg(attempt["pid"], signal.SIGKILL)  # the App and its supervisor die too: no exit record
    if case == "other-machine":  # the executor's host and data directory are out of reach
        journal._exec("UPDATE workers SET host = 'another-machine' WHERE worker_id = %s", (executor,))
        journal._exec("UPDATE dispatched_calls SET host = 'another-machine' WHERE worker_id = %s", (executor,))
        (tmp_path / "homeA").rename(tmp_path / "homeA-on-another-machine")
    done_before = {m["name"] for m in fleet.markers(shared["log"])}
    assert done_before == {"c"}  # c was undone (and saved) before b started
    b = fleet.start_worker(tmp_path / "homeB", tmp_path, "B", concurrency=1)
    try:  # B waits out the lease, takes over (or the live scheduler decides), and the run settles
        fleet.wait_all_ended(journal, [run_id], timeout=180, procs=[b, *others])
    finally:
        fleet.stop_workers([b, *others])  # SIGTERM: each finishes what it holds and exits 0
    out = (tmp_path / "B.out").read_text()
    assert b.returncode == 0, out[-3000:]
    assert all(p.returncode == 0 for p in others), [(tmp_path / "S.out").read_text()[-3000:]]
    claim = journal.run_claim(run_id)
    comps = {c["node_key"]: c for c in journal.compensations(run_id)}
    attempts_b = journal.attempts(comps["b"]["compensation_id"])
    assert len(attempts_b) == 1  # never re-sent
    call_b = _call_of(journal, comps["b"])
    assert call_b["worker_id"] == executor and call_b["claims"] == 1  # never claimed again
    if case == "other-machine":  # the App nobody could wait for ends by itself: its marker comes
        wait_for(lambda: "b" in {m["name"] for m in fleet.markers(shared["log"])}, 30, "b's App to end by itself")
    names = [m["name"] for m in fleet.markers(shared["log"])]
    assert names.count("c") == 1  # saved success: never run again (R-R2)
    if case == "exit-record":
        assert comps["b"]["status"] == "succeeded" and attempts_b[0]["status"] == "succeeded"
        assert comps["a"]["status"] == "succeeded"  # released, and undone after b (R-C3)
        assert names == ["c", "b", "a"]
        assert call_b["decided_by"] == ("executor" if killed == "scheduler" else "takeover")
    else:
        assert comps["b"]["status"] == "unknown" and attempts_b[0]["status"] == "unknown", comps["b"]
        assert comps["a"]["status"] == "blocked"  # upstream of an unknown one waits for an operator
        assert "a" not in names
        assert names.count("b") == (0 if case == "no-exit-record" else 1)
        assert call_b["decided_by"] == "takeover"
    messages = [m["text"] for m in journal.messages(run_id)]
    if killed == "executor":  # the scheduler lived on: it kept the run and decided the call itself
        assert claim["worker_id"] == scheduler and claim["takeovers"] == 0
    else:
        assert claim["worker_id"] != scheduler and claim["takeovers"] == 1
        assert any("stopped renewing its lease; taking the run over" in t for t in messages)


def test_one_runs_calls_execute_on_several_workers_in_reverse_order(shared, tmp_path):
    """R-S2: one scheduler (S, ``--executors 0``) orders a diamond's compensations; two executor workers
    (X, Y, one slot each) run them: the two independent branches' attempts land on both, while reverse
    dependency order and hold-back still hold (marker timestamps: bottom before left/right before top)."""
    journal = shared["journal"]
    project = fleet.make_project(tmp_path)
    wf = fleet.write_workflow(tmp_path, "diamond", project, comp_sleep={"left": 1.5, "right": 1.5})
    [run_id] = fleet.submit({"diamond": wf}, 1)
    s = fleet.start_worker(tmp_path / "homeS", tmp_path, "S", concurrency=1, executors=0)
    procs = [s]
    try:
        wait_for(lambda: journal.run_claim(run_id), 60, "S to claim the run")
        procs += [fleet.start_worker(tmp_path / f"home{n}", tmp_path, n, concurrency=1) for n in ("X", "Y")]
        fleet.wait_all_ended(journal, [run_id], timeout=180, procs=procs)
    finally:
        fleet.stop_workers(procs)
    assert [p.returncode for p in procs] == [0, 0, 0], [(tmp_path / f"{n}.out").read_text()[-2000:] for n in "SXY"]
    fleet.check_runs(journal, [run_id], shared["log"])
    comps = {c["node_key"]: c for c in journal.compensations(run_id)}
    ran_on = {k: _call_of(journal, c)["worker_id"] for k, c in comps.items()}
    assert ran_on["left"] != ran_on["right"], ran_on  # the branches ran at once, one on each executor
    scheduler = journal.run_claim(run_id)["worker_id"]
    calls = journal.dispatched_calls(run_id)
    assert scheduler not in {c["worker_id"] for c in calls} and len({c["worker_id"] for c in calls}) == 2
    assert len(calls) == 5 + 4 and {c["status"] for c in calls} == {"done"}  # 5 node calls, 4 attempts
    marks = {m["name"]: m for m in fleet.markers(shared["log"])}
    assert marks["left"]["t0"] < marks["right"]["t1"] and marks["right"]["t0"] < marks["left"]["t1"]  # at once
    assert max(marks["left"]["t1"], marks["right"]["t1"]) <= marks["top"]["t0"]  # top held back until both


def test_submit_needs_a_shared_journal(tmp_path, make_project, write_workflow, monkeypatch):
    """R-S3: --submit and `worker` on the embedded SQLite journal are a config error (exit 2, one line)."""
    monkeypatch.delenv("WORKRUN_JOURNAL", raising=False)
    wf = write_workflow("w", """
        [nodes.a]
        kind = "remote_agent"
        url = "http://127.0.0.1:9/"
        message = "hi"
    """)
    for args in (("run", wf, "--submit"), ("worker",)):
        res = _cli(*args)
        assert res.returncode == 2, res
        assert res.stderr.count("\n") == 1 and "WORKRUN_JOURNAL" in res.stderr and "postgresql://" in res.stderr


@pytest.mark.parametrize("value, message", [("mysql://x", "must be 'sqlite' or a postgresql:// URL"),
                                            ("0", "must be a number of seconds from 1 to 86400")])
def test_bad_journal_or_lease_is_exit_2(tmp_path, monkeypatch, value, message):
    var = "WORKRUN_JOURNAL" if "://" in value else "WORKRUN_LEASE"
    if var == "WORKRUN_LEASE":
        monkeypatch.setenv("WORKRUN_JOURNAL", "postgresql://nobody@127.0.0.1:1/none")
    res = _cli("worker", env={var: value})
    assert res.returncode == 2, res
    assert res.stderr.startswith(f"error: {var}: {message}") and res.stderr.count("\n") == 1, res.stderr


def test_missing_psycopg_is_one_line_config_error(tmp_path):
    """A PostgreSQL URL without psycopg installed: exit 2, one line naming the extra."""
    shim = tmp_path / "shim"
    (shim / "psycopg").mkdir(parents=True)
    (shim / "psycopg" / "__init__.py").write_text("raise ImportError('no psycopg here')\n")
    res = _cli("runs", "list", env={"WORKRUN_JOURNAL": "postgresql://nobody@127.0.0.1:1/none",
                                    "PYTHONPATH": str(shim)})
    assert res.returncode == 2, res
    assert res.stderr == "error: WORKRUN_JOURNAL: a PostgreSQL journal needs psycopg 3: install the postgres " \
                         "extra (from a clone: .venv/bin/pip install -e '.[postgres]')\n"


SNAP_APP = """
[tool.workrun.apps.snap]
kind = "process"
entry = "main.py"
timeout = 60
compensation = { entry = "compensate.py", code = "snapshot", max_retries = 0 }
"""

SNAP_MAIN = """
from workrun_sdk import process
data = process.input()
if data.get("fail"):
    raise SystemExit(3)
process.result({"name": data["name"]})
"""

SNAP_COMPENSATE = """
import os
from workrun_sdk import compensation
if os.environ.get("FAIL_COMP"):
    raise SystemExit(4)
with open(os.environ["TEST_LOG"], "a") as fh:
    fh.write("undone by the original code\\n")
compensation.result({"undone": True})
"""


def test_snapshot_lives_in_the_database_for_another_machine(shared, tmp_path, make_project, write_workflow):
    """R-S4: a `code = "snapshot"` App's code is stored in the shared journal; a runner with another data
    directory (another machine) materialises it from there and compensates with the original code."""
    project = make_project("snap", SNAP_APP, {"main.py": SNAP_MAIN, "compensate.py": SNAP_COMPENSATE})
    wf = write_workflow("snap", f"""
        [nodes.a]
        project = "{project}"
        app = "snap"
        input = {{ name = "a" }}
        [nodes.boom]
        project = "{project}"
        app = "snap"
        input = {{ name = "boom", fail = true }}
        needs = ["a"]
    """)
    home_a, home_b = tmp_path / "machine-a", tmp_path / "machine-b"
    first = _cli("run", wf, "--json", env={"WORKRUN_HOME": str(home_a), "FAIL_COMP": "1"})
    assert first.returncode == 1, first
    view = json.loads(first.stdout)
    comp = next(o["compensation"] for o in view["operations"] if o["node_key"] == "a")
    assert comp["status"] == "failed"
    stored = shared["journal"]._query("SELECT snapshot FROM snapshots")
    assert len(stored) == 1
    (project / "compensate.py").write_text("raise SystemExit('today\\'s code must not run')\n")  # code changed since
    retried = _cli("compensations", "retry", comp["compensation_id"], "--json", env={"WORKRUN_HOME": str(home_b)})
    assert retried.returncode == 0, retried
    assert json.loads(retried.stdout)["status"] == "succeeded"
    assert shared["log"].read_text() == "undone by the original code\n"
    assert (home_b / "snapshot-trees" / stored[0]["snapshot"] / "compensate.py").read_text() == \
        textwrap.dedent(SNAP_COMPENSATE)


def test_stop_reaches_the_worker_driving_the_run(shared, tmp_path):
    """R-C9 on a shared journal: `workrun stop` from anywhere sets the run's stop flag; the worker holding
    the run ends its App processes and marks it stopped; nothing is compensated."""
    journal = shared["journal"]
    project = fleet.make_project(tmp_path)
    wf = fleet.write_workflow(tmp_path, "chain", project)
    text = wf.read_text().replace('name = "b", run', 'name = "b", sleep = 30, run')
    (tmp_path / "slow.toml").write_text(text)
    (project / "main.py").write_text(textwrap.dedent("""
        import time
        from workrun_sdk import process
        data = process.input()
        time.sleep(float(data.get("sleep", 0)))
        if data.get("fail"):
            raise SystemExit(3)
        process.result({"name": data["name"]})
    """))
    submitted = _cli("run", tmp_path / "slow.toml", "--submit", "--json")
    assert submitted.returncode == 0, submitted
    run_id = json.loads(submitted.stdout)["run_id"]
    w = fleet.start_worker(tmp_path / "home", tmp_path, "w", concurrency=1)
    try:
        wait_for(lambda: [o for o in journal.operations(run_id, "b") if o["status"] == "running"], 120, "b to run")
        stopped = _cli("stop", run_id, env={"WORKRUN_HOME": str(tmp_path / "elsewhere")})
        assert stopped.returncode == 0, stopped
        assert "stop requested; worker wkr_" in stopped.stdout, stopped.stdout
        assert f"not undone: 1 calls — workrun compensate {run_id}" in stopped.stdout, stopped.stdout  # R-L6
        assert journal.run(run_id)["status"] == "stopped"
    finally:
        fleet.stop_workers([w])
    assert w.returncode == 0, (tmp_path / "w.out").read_text()[-3000:]
    assert journal.compensations(run_id) == []
    assert [n["status"] for n in journal.nodes(run_id)] == ["succeeded", "stopped", "skipped", "skipped"]


def test_resume_right_after_a_killed_run_waits_out_its_lease_and_finishes_it(shared, tmp_path):
    """R-R1 on a shared journal: `workrun run` (no worker around) is killed with SIGKILL mid-compensation;
    a `workrun resume` started at once, while the dead runner's claim is still within its lease, does not
    say "nothing to resume": the claim's holder is gone (same host, dead pid), so resume waits the lease
    out, takes the run over (R-R3 for b's attempt) and finishes it: every compensation once, in order."""
    journal = shared["journal"]
    project = fleet.make_project(tmp_path)
    wf = fleet.write_workflow(tmp_path, "chain", project, comp_sleep={"b": 2.5})
    out = open(tmp_path / "run.out", "wb")
    runner = subprocess.Popen([sys.executable, "-m", "workrun", "run", str(wf), "--input", "run=k"],
                              stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_for(Path(str(shared["log"]) + ".started.b").exists, 120, "b's compensate script to start")
    finally:
        runner.kill()
        runner.wait()
    [run] = journal._query("SELECT run_id FROM runs")
    assert journal.run_claim(run["run_id"])["lease_until"] > time.time()  # resume comes within the lease
    resumed = _cli("resume", timeout=180)
    assert resumed.returncode == 0, resumed
    assert "nothing to resume" not in resumed.stdout
    fleet.check_runs(journal, [run["run_id"]], shared["log"])


def test_stop_of_a_run_whose_runner_was_killed_ends_it_once_the_lease_passes(shared, tmp_path):
    """R-C9 on a shared journal with no worker around: `workrun run` is killed with SIGKILL while node b's
    App runs; `workrun stop` started at once finds the dead runner's claim still within its lease. It must
    not wait on a scheduler that is gone and leave the run running: once the lease passes it takes the
    claim, ends b's App process (R-R3 on this host) and marks the run stopped; nothing is compensated."""
    journal = shared["journal"]
    project = fleet.make_project(tmp_path)
    wf = fleet.write_workflow(tmp_path, "chain", project)
    (tmp_path / "slow.toml").write_text(wf.read_text().replace('name = "b", run', 'name = "b", sleep = 60, run'))
    (project / "main.py").write_text(textwrap.dedent("""
        import os, time
        from workrun_sdk import process
        data = process.input()
        if data.get("sleep"):
            open(os.environ["TEST_LOG"] + ".pid", "w").write(str(os.getpid()))
            time.sleep(float(data["sleep"]))
        process.result({"name": data["name"]})
    """))
    out = open(tmp_path / "run.out", "wb")
    runner = subprocess.Popen([sys.executable, "-m", "workrun", "run", str(tmp_path / "slow.toml")],
                              stdout=out, stderr=subprocess.STDOUT)
    pid_file = Path(str(shared["log"]) + ".pid")
    try:
        wait_for(lambda: pid_file.exists() and pid_file.read_text(), 120, "b's App to start")
    finally:
        runner.kill()
        runner.wait()
    [run] = journal._query("SELECT run_id FROM runs")
    app_pid = int(pid_file.read_text())
    stopped = _cli("stop", run["run_id"], "--timeout", "60", env={"WORKRUN_HOME": str(tmp_path / "elsewhere")})
    assert stopped.returncode == 0, stopped
    assert journal.run(run["run_id"])["status"] == "stopped", stopped.stdout
    assert [n["status"] for n in journal.nodes(run["run_id"])] == ["succeeded", "stopped", "skipped", "skipped"]
    assert journal.compensations(run["run_id"]) == []
    wait_for(lambda: not os.path.exists(f"/proc/{app_pid}") or "Z" in Path(f"/proc/{app_pid}/stat").read_text()
          .split(")")[-1].split()[0], 30, "b's App process to end")


def test_a_scheduler_without_executors_says_why_the_run_waits(shared, tmp_path):
    """A worker with ``--executors 0`` alone schedules a run whose calls nobody executes: the run waits,
    and says why (a warning on the run naming the waiting call and the missing executor slots)."""
    journal = shared["journal"]
    project = fleet.make_project(tmp_path)
    [run_id] = fleet.submit({"chain": fleet.write_workflow(tmp_path, "chain", project)}, 1)
    s = fleet.start_worker(tmp_path / "homeS", tmp_path, "S", concurrency=1, executors=0)
    try:
        said = wait_for(lambda: [m["text"] for m in journal.messages(run_id) if "waited" in m["text"]], 120,
                     "the run to say why it waits")
        shown = _cli("runs", "show", run_id)
    finally:
        s.send_signal(signal.SIGTERM)  # its run cannot end: the second signal ends the worker now
        time.sleep(1)
        fleet.stop_workers([s])
    assert "executor" in said[0] and "--executors 0" in said[0], said
    assert fleet.markers(shared["log"]) == []
    assert shown.returncode == 0 and "waited" in shown.stdout, shown


def _failing_snapshot_workflow(name, make_project, write_workflow):
    """A workflow whose node ``a`` calls the snapshot App and succeeds, then ``boom`` fails: ``a`` is compensated
    from its snapshot."""
    project = make_project("snap", SNAP_APP, {"main.py": SNAP_MAIN, "compensate.py": SNAP_COMPENSATE})
    return write_workflow(name, f"""
        [nodes.a]
        project = "{project}"
        app = "snap"
        input = {{ name = "a" }}
        [nodes.boom]
        project = "{project}"
        app = "snap"
        needs = ["a"]
        input = {{ name = "boom", fail = true }}
    """)


def test_gc_prunes_the_databases_snapshots_and_two_at_once_are_safe(shared, tmp_path, make_project, write_workflow):
    """R-F3: `workrun gc` on PostgreSQL prunes the code snapshots stored in the database that no unfinished
    compensation needs (and their files); a second gc at once waits for the first, both exit 0."""
    journal = shared["journal"]
    wf = _failing_snapshot_workflow("snapgc", make_project, write_workflow)
    ran = _cli("run", wf, "--json", env={"WORKRUN_HOME": str(tmp_path / "home")})
    assert ran.returncode == 1, ran.stderr
    assert journal._query("SELECT COUNT(*) AS n FROM snapshots")[0]["n"] == 1  # stored for other machines
    gcs = [subprocess.Popen([sys.executable, "-m", "workrun", "gc"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "WORKRUN_HOME": str(tmp_path / f"gc{i}")})
           for i in range(2)]
    outs = [g.communicate(timeout=120) for g in gcs]
    assert [g.returncode for g in gcs] == [0, 0], outs
    assert journal._query("SELECT COUNT(*) AS n FROM snapshots")[0]["n"] == 0
    assert journal._query("SELECT COUNT(*) AS n FROM snapshot_objects")[0]["n"] == 0
    assert sum("removed 1 snapshot" in out for out, _ in outs) == 1  # one of them pruned it, the other found none


def test_gc_keeps_a_snapshot_an_operation_journaled_after_it_read_what_is_needed(shared, tmp_path, make_project,
                                                                                   write_workflow):
    """R-F3 (found by reading the code): `workrun gc` reads what is needed, then prunes. An operation journaled
    in between (its run unfinished) is seen by the prune itself, which keeps its snapshot; and a snapshot
    pruned before the operation's intent was journaled is stored again before its call starts."""
    from workrun.runner.snapshots import publish

    journal = shared["journal"]
    wf = _failing_snapshot_workflow("snapkeep", make_project, write_workflow)
    home = tmp_path / "home"
    ran = _cli("run", wf, "--json", env={"WORKRUN_HOME": str(home)})
    assert ran.returncode == 1, ran.stderr
    run_id = json.loads(ran.stdout)["run_id"]
    [snap] = [r["snapshot"] for r in journal._query("SELECT snapshot FROM snapshots")]
    journal._exec("UPDATE runs SET status = 'running' WHERE run_id = %s", (run_id,))  # as if still going
    assert journal.prune_snapshots(set()) == (0, 1)  # ``needed`` read empty, but the journal says otherwise
    journal._exec("UPDATE runs SET status = 'failed' WHERE run_id = %s", (run_id,))
    assert journal.prune_snapshots(set()) == (1, 0)
    assert journal._query("SELECT COUNT(*) AS n FROM snapshot_objects")[0]["n"] == 0
    publish(home, snap, journal)  # what a call does once its intent is journaled, after such a prune
    assert journal.has_snapshot(snap)
    assert journal._query("SELECT COUNT(*) AS n FROM snapshot_objects")[0]["n"] >= 1
