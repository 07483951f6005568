"""Prometheus metrics (SPEC §20, R-F4): ``workrun run`` with ``WORKRUN_METRICS_PORT`` and ``workrun worker
--metrics-port`` serve the families SPEC lists, counted from what really happened."""

from __future__ import annotations

import socket
import urllib.request

from _kit import fleet
from _kit.http_server import TestServer
from _kit.processes import wait_for


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _scrape(port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


FLOW = """
http_allow = ["127.0.0.1:{port}"]
[nodes.order]
kind = "http"
method = "POST"
url = "{url}/orders"
compensation = {{ method = "DELETE", url = "{url}/orders/1" }}
[nodes.boom]
kind = "http"
method = "POST"
url = "{url}/boom"
needs = ["order"]
"""


def test_a_run_serves_its_metrics(write_workflow, monkeypatch):
    from workrun import api

    port = _free_port()
    monkeypatch.setenv("WORKRUN_METRICS_PORT", str(port))
    with TestServer() as server:
        server.route("POST", "/orders", status=201, json={"id": 1})
        server.route("DELETE", "/orders/1", status=204, body="")
        server.route("POST", "/boom", status=500, body="no")
        server.route("GET", "/look", status=200, json={})
        wf = write_workflow("m", FLOW.format(port=server.port, url=server.url)  # look: nothing to undo (skipped)
                            .replace('needs = ["order"]', 'needs = ["order", "mark"]')
                            + f'[nodes.look]\nkind = "http"\nmethod = "GET"\nurl = "{server.url}/look"\n'
                            # an attempt counted by its action's kind, not as http (fleet review)
                            + f'[nodes.mark]\nkind = "http"\nmethod = "GET"\nurl = "{server.url}/look"\n'
                            'compensation = { update_data = { fields = ["status"], values = { status = "undone" } } }\n')
        view = api.run(wf)
        assert view["status"] == "failed"
        got = _scrape(port)
    assert got['workrun_runs_finished_total{status="failed"}'] >= 1
    assert got['workrun_calls_total{kind="http",outcome="succeeded"}'] >= 1
    assert got['workrun_calls_total{kind="http",outcome="failed"}'] >= 1
    assert got['workrun_attempts_total{kind="http",outcome="succeeded"}'] >= 1
    assert got['workrun_attempts_total{kind="update_data",outcome="succeeded"}'] >= 1
    assert got['workrun_compensations_finished_total{status="succeeded"}'] >= 1
    assert got['workrun_compensations_finished_total{status="skipped"}'] >= 1  # as the fleet guide says
    assert got['workrun_call_duration_seconds_count{kind="http"}'] >= 2
    assert "workrun_dispatch_queue_depth" in got and "workrun_claims_expired_total" in got
    assert "workrun_db_reconnects_total" in got


def test_a_worker_serves_its_metrics(pg_url, tmp_path, monkeypatch):
    """``workrun worker --metrics-port``: after it drove two failing chains, its counters say so and nothing
    is left queued."""
    import os
    import subprocess
    import sys

    from workrun.journal import open_journal

    monkeypatch.setenv("WORKRUN_JOURNAL", pg_url)
    monkeypatch.setenv("TEST_LOG", str(tmp_path / "log"))
    port = _free_port()
    project = fleet.make_project(tmp_path)
    run_ids = fleet.submit({"chain": fleet.write_workflow(tmp_path, "chain", project)}, 2)
    journal = open_journal(tmp_path)
    proc = subprocess.Popen([sys.executable, "-m", "workrun", "worker", "--concurrency", "2", "--metrics-port",
                             str(port)], env={**os.environ, "WORKRUN_HOME": str(tmp_path / "home")},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        fleet.wait_all_ended(journal, run_ids, timeout=180, procs=[proc])
        got = wait_for(lambda: (lambda m: m if m.get('workrun_runs_finished_total{status="failed"}', 0) >= 2
                                else None)(_scrape(port)), 30, "the worker's metrics")
    finally:
        fleet.stop_workers([proc])
        journal.close()
    assert got['workrun_calls_total{kind="process",outcome="succeeded"}'] == 6  # a, b, c of each chain
    assert got['workrun_calls_total{kind="process",outcome="failed"}'] == 2  # boom of each
    assert got['workrun_compensations_finished_total{status="succeeded"}'] == 6
    assert got['workrun_attempts_total{kind="process",outcome="succeeded"}'] == 6  # by the App's kind, as calls
    assert got['workrun_call_duration_seconds_count{kind="process"}'] == 8
    assert got["workrun_dispatch_queue_depth"] == 0


def test_a_worker_logs_json_lines(pg_url, tmp_path, monkeypatch):
    """R-F6: ``--log-format json``: every stderr line is one JSON object with ts (ISO 8601 with offset), level,
    event and worker; the lines about a run, an operation, a compensation carry their ids."""
    import json
    import os
    import subprocess
    import sys
    from datetime import datetime

    monkeypatch.setenv("WORKRUN_JOURNAL", pg_url)
    monkeypatch.setenv("TEST_LOG", str(tmp_path / "log"))
    project = fleet.make_project(tmp_path)
    [run_id] = fleet.submit({"chain": fleet.write_workflow(tmp_path, "chain", project)}, 1)
    proc = subprocess.run([sys.executable, "-m", "workrun", "worker", "--log-format", "json", "--idle-exit", "2"],
                          env={**os.environ, "WORKRUN_HOME": str(tmp_path / "home")}, capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [json.loads(line) for line in proc.stderr.splitlines()]
    assert lines and proc.stdout == ""
    for line in lines:
        assert {"ts", "level", "event", "worker"} <= set(line) and line["worker"].startswith("wkr_"), line
        assert datetime.fromisoformat(line["ts"]).utcoffset() is not None
    events = [line["event"] for line in lines]
    assert events[0] == "worker_started" and events[-1] == "worker_stopped"
    about_run = [line for line in lines if line["event"] == "message"]
    assert about_run and all(line["run_id"] == run_id for line in about_run)
    assert any("operation_id" in line and line["operation_id"] in line["message"] for line in about_run)
    assert any("compensation_id" in line and line["compensation_id"] in line["message"] for line in about_run)
    assert any(line.get("node_key") == "boom" for line in about_run)


def test_run_and_resume_log_json_lines(tmp_path):
    """R-F6 for CI use: ``workrun run --log-format json`` (and ``resume``) write their progress as JSON lines on
    stderr with the run's, operation's and compensation's ids; a bad value exits 2 naming the option."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    tutorial = Path(__file__).resolve().parents[2] / "demo_apps" / "workflows" / "tutorial.toml"
    env = {**os.environ, "WORKRUN_HOME": str(tmp_path / "home")}
    env.pop("WORKRUN_JOURNAL", None)
    proc = subprocess.run([sys.executable, "-m", "workrun", "run", str(tutorial), "--log-format", "json", "--json"],
                          env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 1, proc.stderr[-2000:]
    run_id = json.loads(proc.stdout)["run_id"]
    lines = [json.loads(line) for line in proc.stderr.splitlines()]
    assert lines and all(line["event"] == "message" and line["run_id"] == run_id for line in lines)
    assert any(line.get("compensation_id") and line.get("node_key") == "create" for line in lines)
    # every line about a compensation names its operation too (R-F6 "on every line about them", conformance review)
    view = json.loads(proc.stdout)
    operation_of = {o["compensation"]["compensation_id"]: o["operation_id"] for o in view["operations"]
                    if o["compensation"]}
    about_compensation = [line for line in lines if line.get("compensation_id") in operation_of]
    assert about_compensation and all(line.get("operation_id") == operation_of[line["compensation_id"]]
                                      for line in about_compensation), about_compensation
    again = subprocess.run([sys.executable, "-m", "workrun", "resume", "--log-format", "json"], env=env,
                           capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    assert all(json.loads(line) for line in again.stderr.splitlines())
    bad = subprocess.run([sys.executable, "-m", "workrun", "run", str(tutorial), "--log-format", "xml"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.strip() == "error: --log-format: must be text or json, not 'xml'"


def test_a_run_on_a_shared_journal_serves_the_queue_depth(pg_url, tmp_path):
    """R-F4: ``workrun run`` with ``WORKRUN_METRICS_PORT`` on a shared journal reads
    ``workrun_dispatch_queue_depth`` from the journal's queued calls (it was always 0 outside ``worker``)."""
    import os
    import subprocess
    import sys
    import time

    from workrun.journal import open_journal

    env = {**os.environ, "WORKRUN_JOURNAL": pg_url, "WORKRUN_HOME": str(tmp_path / "home")}
    port = _free_port()
    with TestServer() as server:
        server.route("POST", "/slow", hang=60)
        wf = tmp_path / "slow.toml"
        wf.write_text(f'name = "slow"\nhttp_allow = ["127.0.0.1:{server.port}"]\n'
                      f'[nodes.wait]\nkind = "http"\nmethod = "POST"\nurl = "{server.url}/slow"\n')
        os.environ["WORKRUN_JOURNAL"] = pg_url
        try:
            journal = open_journal(tmp_path / "home")
        finally:
            del os.environ["WORKRUN_JOURNAL"]
        proc = subprocess.Popen([sys.executable, "-m", "workrun", "run", str(wf)], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, env={**env, "WORKRUN_METRICS_PORT": str(port)})
        try:
            assert server.wait_for("POST", "/slow", timeout=60)
            assert _scrape(port)["workrun_dispatch_queue_depth"] == 0
            for i in range(3):  # queued for any worker; not claimable (no timeout yet), so they stay queued
                assert journal.dispatch_call(f"call_q{i}", None, {"project": "p"}, time.time())
            assert _scrape(port)["workrun_dispatch_queue_depth"] == 3
        finally:
            server.release()
            proc.wait(timeout=60)
            journal.close()
