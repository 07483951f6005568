"""HTTP requests and reverse actions sent by workers on a shared PostgreSQL journal (R-S2, R-H1, R-H2, R-H5).

A scheduler-only worker (``--executors 0``) drives the run; executor workers claim its requests
with ``SKIP LOCKED`` and send them to a real loopback server that counts what arrived.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from _kit import fleet
from _kit.http_server import TestServer
from _kit.processes import wait_for

SECRET = "tok-41c9e2-ONLY-ON-THE-EXECUTOR"


@pytest.fixture
def shared(pg_url, monkeypatch, tmp_path):
    """A shared journal with a 3 s lease, the scheduler's own TOKEN (not the secret), a loopback server."""
    from workrun.journal import open_journal

    monkeypatch.setenv("WORKRUN_JOURNAL", pg_url)
    monkeypatch.setenv("WORKRUN_LEASE", "3")
    monkeypatch.setenv("TOKEN", "scheduler-side-value")  # workers inherit it unless given their own
    journal = open_journal(tmp_path)
    with TestServer() as server:
        yield journal, server
    journal.close()


def _workflow(tmp_path, server: TestServer) -> dict[str, object]:
    auth = 'headers = { Authorization = "Bearer {{ env.TOKEN }}" }'
    path = tmp_path / "orders.toml"
    path.write_text(f"""name = "orders"
http_allow = ["127.0.0.1:{server.port}"]
[inputs]
run = "?"
[nodes.order]
kind = "http"
method = "POST"
url = "{server.url}/api/orders"
{auth}
compensation = {{ method = "DELETE", url = "{server.url}/api/orders/{{{{ original.result.body.id }}}}", \
headers = {{ Authorization = "Bearer {{{{ env.TOKEN }}}}" }}, backoff = 0 }}
[nodes.pay]
kind = "http"
method = "POST"
url = "{server.url}/api/payments"
needs = ["order"]
""")
    return {"orders": path}


def _worker_id(journal, proc) -> str:
    return wait_for(lambda: next((w["worker_id"] for w in journal.workers() if w["pid"] == proc.pid), None), 60,
                 f"worker pid {proc.pid} to register")


def _start(shared, tmp_path, *, lease: float | None = None, **order):
    """Route the shop (the order answered as ``order`` says, else 201; a declined payment; the order's reverse
    action), submit one run and start the scheduler-only worker S (with its own ``lease``, seconds, when
    given): ``(journal, server, run_id, S)``."""
    journal, server = shared
    server.route("POST", "/api/orders", **(order or {"status": 201, "json": {"id": 7}}))
    server.route("POST", "/api/payments", status=402, body="declined")
    server.route("DELETE", "/api/orders/7", status=204)
    [run_id] = fleet.submit(_workflow(tmp_path, server), 1)
    env = {"WORKRUN_LEASE": str(lease)} if lease is not None else None
    return journal, server, run_id, fleet.start_worker(tmp_path / "homeS", tmp_path, "S", concurrency=1,
                                                       executors=0, env=env)


def _ended(journal, run_id):
    run = journal.run(run_id)
    comps = journal.compensations(run_id)
    return run["status"] not in ("pending", "running") and all(
        c["status"] not in ("pending", "running") for c in comps)


def test_requests_and_reverse_actions_are_sent_once_by_another_worker_and_the_secret_is_stored_nowhere(
        shared, tmp_path):
    journal, server, run_id, s = _start(shared, tmp_path)
    procs = [s]
    try:
        scheduler = _worker_id(journal, s)
        # S schedules the run before X exists: otherwise X could take the run (and be its scheduler) first
        wait_for(lambda: (journal.run_claim(run_id) or {}).get("worker_id") == scheduler, 60, "S to claim the run")
        x = fleet.start_worker(tmp_path / "homeX", tmp_path, "X", concurrency=1, env={"TOKEN": SECRET})
        procs.append(x)
        executor = _worker_id(journal, x)
        wait_for(lambda: _ended(journal, run_id), 120, "the run and its compensation to end")
    finally:
        fleet.stop_workers(procs)
    assert journal.run_claim(run_id)["worker_id"] == scheduler != executor
    assert journal.run(run_id)["status"] == "failed"
    [comp] = journal.compensations(run_id)
    assert comp["status"] == "succeeded"
    assert [server.count("POST", "/api/orders"), server.count("POST", "/api/payments"),
            server.count("DELETE", "/api/orders/7")] == [1, 1, 1]
    assert {r.headers["Authorization"] for r in server.received if r.path.startswith("/api/orders")} == {
        f"Bearer {SECRET}"}  # read from the sending worker's environment, at send time
    calls = journal.dispatched_calls(run_id)
    assert [c["call"]["kind"] for c in calls] == ["http"] * 3
    assert {(c["worker_id"], c["status"], c["decided_by"], c["claims"]) for c in calls} == {
        (executor, "done", "executor", 1)}
    ops = {o["node_key"]: o for o in journal.operations(run_id)}
    assert ops["order"]["status"] == "succeeded" and ops["pay"]["status"] == "failed"
    assert ops["order"]["input"]["headers"]["Authorization"] == "Bearer {{ env.TOKEN }}"
    tables = [r["table_name"] for r in journal._query(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()")]
    assert "dispatched_calls" in tables and "operations" in tables
    for table in tables:
        dump = "\n".join(r["t"] for r in journal._query(f"SELECT t::text AS t FROM {table} t"))
        assert SECRET not in dump, table
    for name in ("S", "X"):
        assert SECRET not in (tmp_path / f"{name}.out").read_text(errors="replace")


def test_scheduler_killed_with_its_request_queued_the_next_one_uses_what_a_worker_sent(shared, tmp_path):
    """R-R3 across workers: the scheduler dies after queueing a request no executor claimed yet; a worker's
    executor sends it, and the scheduler that takes the run over journals that result (one operation, one
    request at the server), never a second send.

    S's run claim lasts 8 s, so the new worker's executor claims the queued request well before its scheduler
    may take the run over. (A takeover that came first would fence the still queued request, never sent, and
    run the node again: also one request at the server, but two operations; on a busy machine a 3 s lease
    let that happen.)"""
    journal, server, run_id, s = _start(shared, tmp_path, lease=8)
    procs = [s]
    try:
        wait_for(lambda: journal.dispatched_calls(run_id), 60, "S to queue the first request")
        os.kill(s.pid, signal.SIGKILL)
        s.wait(timeout=60)
        y = fleet.start_worker(tmp_path / "homeY", tmp_path, "Y", concurrency=1)
        procs.append(y)
        wait_for(lambda: _ended(journal, run_id), 120, "the run to end")
    finally:
        fleet.stop_workers(procs)
    orders = journal.operations(run_id, "order")
    # the executor sent it and the new scheduler journaled that; or, on a machine busy enough that the takeover
    # came first, the queued request was fenced (never sent) and the node ran again: one request either way
    assert orders[-1]["status"] == "succeeded" and len(orders) <= 2, orders
    assert all(o["failure"] == "not_started" for o in orders[:-1]), orders
    assert journal.run_claim(run_id)["takeovers"] == 1
    assert [server.count("POST", "/api/orders"), server.count("DELETE", "/api/orders/7")] == [1, 1]


@pytest.mark.parametrize("killed", ["after-about-to-send", "before-about-to-send"])
def test_executor_killed_around_about_to_send(shared, tmp_path, killed):
    """R-H2 + R-R3 across workers: an executor killed once its "about to send" is committed leaves the request
    ``unknown`` (never re-sent: it is not idempotent); one killed after its claim but before that mark sent
    nothing, so its request is queued again and sent once by another executor."""
    # after-about-to-send: the order is received, never answered while the executor lives
    journal, server, run_id, s = _start(shared, tmp_path, **({"hang": 60} if killed == "after-about-to-send" else {}))
    procs = [s]
    try:
        wait_for(lambda: journal.run_claim(run_id), 60, "S to claim the run")
        fault = {} if killed == "after-about-to-send" else {"WORKRUN_FAULT": "call.claimed"}
        x = fleet.start_worker(tmp_path / "homeX", tmp_path, "X", concurrency=1, env=fault)
        procs.append(x)
        if killed == "after-about-to-send":
            wait_for(lambda: server.count("POST", "/api/orders"), 60, "the request to reach the server")
            x_id = _worker_id(journal, x)
            os.kill(x.pid, signal.SIGKILL)
        else:
            x_id = _worker_id(journal, x)
        assert x.wait(timeout=60) == -signal.SIGKILL
        y = fleet.start_worker(tmp_path / "homeY", tmp_path, "Y", concurrency=1)
        procs.append(y)
        y_id = _worker_id(journal, y)
        wait_for(lambda: _ended(journal, run_id), 120, "the run to end")
        time.sleep(1.0)  # room for a wrong re-send to arrive
    finally:
        server.release()
        fleet.stop_workers(procs)
    [order] = journal.operations(run_id, "order")
    [call] = [c for c in journal.dispatched_calls(run_id) if c["call_id"] == order["operation_id"]]
    assert server.count("POST", "/api/orders") == 1
    if killed == "after-about-to-send":
        assert order["status"] == "unknown" and order["failure"] == "unknown"
        assert (call["worker_id"], call["claims"], call["decided_by"]) == (x_id, 1, "takeover")
        assert server.count("POST", "/api/payments") == 0  # the node failed: nothing downstream ran
    else:
        assert order["status"] == "succeeded"
        assert (call["worker_id"], call["claims"], call["decided_by"]) == (y_id, 2, "executor")
        assert server.count("DELETE", "/api/orders/7") == 1
