"""A fleet that outlives its database going away (SPEC §20 R-F1).

Two real ``workrun worker`` processes drive 20 finally-failing runs on a PostgreSQL
server of this test's own. The server is restarted twice while they work (as a
minor-version upgrade or a failover would), then every worker connection is
terminated: the same two worker processes finish every run, each compensation
runs exactly once (its marker line), no call or attempt is made twice, and each
worker said "reconnected".
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time

from _kit import fleet
from _kit.processes import wait_for


def test_workers_reconnect_after_restarts_and_terminated_backends(own_postgres_server, tmp_path, monkeypatch):
    from workrun.journal import open_journal

    url = own_postgres_server.new_database()
    monkeypatch.setenv("WORKRUN_JOURNAL", url)
    monkeypatch.setenv("WORKRUN_LEASE", "10")
    log = tmp_path / "markers.log"
    monkeypatch.setenv("TEST_LOG", str(log))
    project = fleet.make_project(tmp_path)
    slow = {"a": 0.3, "top": 0.3, "bottom": 0.3}  # the runs take a while: the database goes away mid-work
    workflows = {shape: fleet.write_workflow(tmp_path, shape, project, comp_sleep=slow)
                 for shape in ("chain", "diamond")}
    run_ids = fleet.submit(workflows, 20)
    journal = open_journal(tmp_path)
    workers = [fleet.start_worker(tmp_path / f"home-{n}", tmp_path, n, concurrency=3) for n in ("A", "B")]
    try:
        for goal in (3, 12):  # restart while compensations run
            wait_for(lambda g=goal: len(fleet.markers(log)) >= g, 240, f"{goal} compensations to have run")
            own_postgres_server.restart()
        wait_for(lambda: len(fleet.markers(log)) >= 24, 240, "24 compensations to have run")
        assert own_postgres_server.terminate_backends(url) >= 2  # every worker connection (and this test's) ends
        fleet.wait_all_ended(journal, run_ids, 300, workers)
        assert [w.poll() for w in workers] == [None, None]  # the same processes did all of it
        outs = {w.log_path.name: w.log_path.read_text(errors="replace") for w in workers}
        for name, out in outs.items():
            assert "reconnected to the journal's database" in out, (name, out[-3000:])
        counts = fleet.check_runs(journal, run_ids, log)  # each compensation once, one attempt, in order
        assert counts["runs"] == 20
        ops = journal._query("SELECT run_id, node_key, status FROM operations")
        assert len(ops) == len({(o["run_id"], o["node_key"]) for o in ops})  # no node called twice
        assert {o["status"] for o in ops} == {"succeeded", "failed"}  # nothing unknown
    finally:
        fleet.stop_workers(workers)
        journal.close()


def test_a_journal_opened_while_the_database_is_away_waits_for_it(own_postgres_server, tmp_path, monkeypatch):
    """Break-it finding (R-F1): a process that has reached the database before (a worker opening a connection
    for the next run it drives) waits for it when it is away, connecting and migrating, instead of failing."""
    from workrun.journal import open_journal

    url = own_postgres_server.new_database()
    monkeypatch.setenv("WORKRUN_JOURNAL", url)
    open_journal(tmp_path).close()  # reached once
    own_postgres_server.pause()
    later = threading.Timer(1.5, own_postgres_server.resume)
    later.start()
    try:
        began = time.monotonic()
        journal = open_journal(tmp_path)
        assert time.monotonic() - began >= 1.0  # it waited for the server to come back
        assert journal.runs() == []
        journal.close()
    finally:
        later.join()


def _outage_until_it_exits(proc, server, *, timeout):
    """Stop the database server until ``proc`` exits (killed after ``timeout`` seconds); the server is started
    again either way. Returns ``(stdout, stderr, seconds from the outage to the exit)``."""
    server.pause()
    began = time.monotonic()
    try:
        out, err = proc.communicate(timeout=timeout)
        return out, err, time.monotonic() - began
    finally:
        if proc.poll() is None:
            proc.kill()
        server.resume()


def test_a_worker_gives_up_after_workrun_db_retry_at_once_with_one_line(own_postgres_server, tmp_path):
    """R-F1: the database stays away past WORKRUN_DB_RETRY: the worker exits 1 with one line naming it, without
    a second wait while it drains (break-it finding: it took 3x the setting and said it eight times)."""
    import os

    url = own_postgres_server.new_database()
    env = {**os.environ, "WORKRUN_JOURNAL": url, "WORKRUN_HOME": str(tmp_path / "home"), "WORKRUN_DB_RETRY": "2"}
    proc = subprocess.Popen([sys.executable, "-m", "workrun", "worker"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert "on the shared journal" in proc.stdout.readline()  # started
    out, err, took = _outage_until_it_exits(proc, own_postgres_server, timeout=60)
    assert proc.returncode == 1, (out, err)
    said = [line for line in (out + err).splitlines() if "WORKRUN_DB_RETRY" in line]
    assert len(said) == 1 and said[0].startswith("error: postgresql://"), (out, err)
    assert "could not reconnect within WORKRUN_DB_RETRY=2 s" in said[0]
    assert took < 12, took


def _out_of_retry_during_a_long_compensation(server, tmp_path, command: list[str]) -> tuple[str, str, float]:
    """Start ``workrun COMMAND`` on a fresh database with WORKRUN_DB_RETRY=2 over a chain whose node c takes 60 s
    to compensate (``run`` runs it; for ``worker`` it is submitted first); once c's compensation has started, stop
    the database until the command exits. The compensation is killed after. Returns ``(stdout, stderr, seconds
    from the outage to the exit)``; the exit code must be 1 with one line naming the setting."""
    import os

    url = server.new_database()
    env = {**os.environ, "WORKRUN_JOURNAL": url, "WORKRUN_HOME": str(tmp_path / "home"), "WORKRUN_DB_RETRY": "2",
           "TEST_LOG": str(tmp_path / "markers.log")}
    project = fleet.make_project(tmp_path)
    wf = fleet.write_workflow(tmp_path, "chain", project, comp_sleep={"c": 60})
    if command == ["worker"]:
        os.environ["WORKRUN_JOURNAL"] = url
        try:
            fleet.submit({"chain": wf}, 1)
        finally:
            del os.environ["WORKRUN_JOURNAL"]
    else:
        command = [*command, str(wf)]
    proc = subprocess.Popen([sys.executable, "-m", "workrun", *command], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    started = tmp_path / "markers.log.started.c"
    try:
        wait_for(started.exists, 120, "c's compensation to have started")
        out, err, took = _outage_until_it_exits(proc, server, timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
        try:
            os.kill(int(started.read_text()), 9)  # the compensation left running
        except (OSError, ValueError):
            pass
    assert proc.returncode == 1, (out, err)
    said = [line for line in (out + err).splitlines() if "WORKRUN_DB_RETRY" in line]
    assert len(said) == 1 and said[0].startswith("error: postgresql://"), (out, err)
    return out, err, took


def test_a_worker_out_of_db_retry_does_not_wait_for_its_calls_in_hand(own_postgres_server, tmp_path):
    """R-F1 (hostile review): out of WORKRUN_DB_RETRY with a compensation running (one that takes 60 s), the
    worker exits 1 at once with one line; it waited for the call first (no outcome could be stored anyway).
    The call's process is left to end on its own, as after a crash: its claim passes on after its lease."""
    _, _, took = _out_of_retry_during_a_long_compensation(own_postgres_server, tmp_path, ["worker"])
    assert took < 20, took


def test_run_out_of_db_retry_exits_at_once_while_it_waits_for_a_call(own_postgres_server, tmp_path):
    """R-F1 (conformance review): ``workrun run`` (no ``--submit``) on a shared journal, waiting for a call that
    takes 60 s when the database goes away past WORKRUN_DB_RETRY, exited 1 only once the call had ended; it exits
    at once, as a worker does, with one line naming the setting. The call is left to end on its own."""
    _, _, took = _out_of_retry_during_a_long_compensation(own_postgres_server, tmp_path, ["run"])
    assert took < 20, took
