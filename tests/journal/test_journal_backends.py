"""The journal's rules on both backends (R-J1, R-J3, R-S1): same schema version, state machine,
conditional writes, lookups and ordering on SQLite and on a real PostgreSQL server."""

from __future__ import annotations

import time

import pytest

from workrun.core.errors import JournalError


@pytest.fixture
def journal(journal_backend, tmp_path):
    from workrun.journal import open_journal

    j = open_journal(tmp_path)
    yield j
    j.close()


def _run(j, run_id="run_aaa111", created=0.0, nodes=("a",)):
    j.create_run({"run_id": run_id, "workflow": "w", "workflow_path": "/w", "spec": {"k": [1, 2]},
                  "inputs": {"note": "héllo %s ?"}, "status": "running", "created_at": created}, list(nodes))


def test_same_schema_version_and_reopen_is_a_no_op(journal, tmp_path):
    from workrun.journal import open_journal
    from workrun.journal.migrations import MIGRATIONS

    assert journal.schema_version == len(MIGRATIONS)
    _run(journal)
    again = open_journal(tmp_path)
    assert again.schema_version == len(MIGRATIONS) and again.run("run_aaa111")["inputs"] == {"note": "héllo %s ?"}
    again.close()


def test_a_nodes_operations_are_looked_up_by_index(journal, journal_backend):
    """Each node of a run looks up its dependencies' calls: by the (run, node) index, not by reading every
    operation of the run (O(nodes) per node; 10,000 nodes: 2.9 ms per look-up without it, 7 us with it)."""
    sql = ("SELECT operation_id, node_key, status FROM operations WHERE run_id = ? AND node_key = ? "
           "ORDER BY created_at, rowid")
    if journal_backend == "sqlite":
        plan = " ".join(r["detail"] for r in journal._query("EXPLAIN QUERY PLAN " + sql, ("r", "n")))
        assert "USING INDEX operations_node (run_id=? AND node_key=?)" in plan, plan
    else:
        rows = journal._query("SELECT indexdef FROM pg_indexes WHERE indexname = 'operations_node'")
        assert rows and "(run_id, node_key, created_at)" in rows[0]["indexdef"], rows


def test_state_machine_enforced(journal):
    from workrun.core.errors import InvalidTransitionError

    _run(journal)
    journal.end_run("run_aaa111", "failed", at=1.0, reason="x")
    assert journal.nodes("run_aaa111")[0]["status"] == "skipped"
    with pytest.raises(InvalidTransitionError, match="failed -> succeeded"):
        journal.end_run("run_aaa111", "succeeded", at=2.0)
    _run(journal, "run_bbb222")
    with pytest.raises(InvalidTransitionError):  # pending -> succeeded skips running
        journal.finish_node("run_bbb222", "a", status="succeeded", handled=False, result=None, at=1.0)
    assert journal.run("run_aaa111")["status"] == "failed"
    assert journal.nodes("run_bbb222")[0]["status"] == "pending"  # the refused transaction wrote nothing


def _op(journal, op_id="op_1", run_id="run_aaa111"):
    journal.start_operation({"operation_id": op_id, "run_id": run_id, "node_key": "a", "app": "mark",
                             "project": "/p", "kind": "process", "config": {"name": "mark"}, "input": {"x": 1},
                             "fingerprint": "f", "fingerprint_files": {"main.py": "d"}, "depends_on": [],
                             "status": "starting", "call_dir": "/c", "created_at": 1.5, "standalone": 0})


def test_conditional_write_refused_when_status_moved(journal):
    from workrun.core.errors import StaleStatusError

    _run(journal)
    _op(journal)
    journal.finish_operation("op_1", status="succeeded", result={"ok": 1}, at=1.0)
    journal.plan_compensations([{"compensation_id": "cmp_1", "operation_id": "op_1", "run_id": "run_aaa111",
                                 "node_key": "a", "status": "pending", "max_attempts": 2, "timeout": 1.0,
                                 "backoff": 0.0, "created_at": 1.0, "updated_at": 1.0}])
    journal.set_compensation_status("cmp_1", "blocked", reason="code changed", at=2.0)
    with pytest.raises(StaleStatusError, match="changed from pending to blocked meanwhile") as err:
        journal.start_attempt("cmp_1", 1, trigger="auto", call_dir="/c1", seen="pending", at=3.0)
    assert isinstance(err.value, JournalError)
    assert journal.attempts("cmp_1") == [] and journal.compensation("cmp_1")["status"] == "blocked"
    journal.start_attempt("cmp_1", 1, trigger="auto", call_dir="/c1", seen="blocked", at=3.0)
    assert journal.compensation("cmp_1")["status"] == "running"
    assert [a["number"] for a in journal.attempts_in_flight("run_aaa111")] == [1]
    journal.finish_attempt("cmp_1", 1, status="failed", failure="exited", error="exited with code 1", result=None,
                           at=4.0, exit_code=1, compensation_status="pending", reason="retry", next_attempt_at=5.0)
    assert journal.attempts("cmp_1")[0]["failure"] == "exited"
    assert journal.compensation("cmp_1")["next_attempt_at"] == 5.0


def test_lookups_prefixes_and_order(journal):
    from workrun.core.errors import NotFoundError

    _run(journal, "run_abc001", 1.0)
    with pytest.raises(NotFoundError, match="an empty run id matches nothing"):
        journal.run("")  # a prefix of every id, never "the only run there is"
    _run(journal, "run_abc002", 2.0)
    _run(journal, "run_x%_03", 3.0)
    assert [r["run_id"] for r in journal.runs()] == ["run_x%_03", "run_abc002", "run_abc001"]
    assert journal.run("run_abc001")["spec"] == {"k": [1, 2]}
    with pytest.raises(NotFoundError, match=r"'run_abc' matches several runs \(run_abc001, run_abc002\)$"):
        journal.run("run_abc")
    with pytest.raises(NotFoundError):
        journal.run("run_x_")  # `_` is not a wildcard
    assert journal.run("run_x%")["run_id"] == "run_x%_03"
    assert journal.run("run_abc002")["created_at"] == 2.0
    assert [r["run_id"] for r in journal.runs_with_status("running")] == ["run_abc001", "run_abc002", "run_x%_03"]
    for i in range(3, 6):
        _run(journal, f"run_abc00{i}", float(i + 1))
    with pytest.raises(NotFoundError, match=r"matches several runs \(run_abc001, run_abc002, run_abc003, …\)$"):
        journal.run("run_ab")


def test_operations_round_trip_and_owed_compensation(journal):
    _run(journal)
    _op(journal)
    journal.operation_running("op_1", pid=123, proc_start="77", started_at=1.6, deadline=61.6)
    assert [o["operation_id"] for o in journal.operations_in_flight("run_aaa111")] == ["op_1"]
    journal.finish_operation("op_1", status="succeeded", result={"name": "a"}, at=2.0, exit_code=0)
    got = journal.operation("op_1")
    assert got["result"] == {"name": "a"} and got["deadline"] == 61.6 and got["pid"] == 123
    _op(journal, "op_2")
    journal.start_operation({**journal.operation("op_2"), "operation_id": "op_3", "node_key": "b", "created_at": 1.7})
    assert [(o["operation_id"], o["status"]) for o in journal.operation_statuses("run_aaa111", "a")] == \
        [("op_1", "succeeded"), ("op_2", "starting")]
    assert [o["operation_id"] for o in journal.operation_statuses("run_aaa111", "b")] == ["op_3"]
    assert [o["node_key"] for o in journal.operation_statuses("run_aaa111")] == ["a", "a", "b"]
    views = journal.operation_views("run_aaa111")  # what a run's view shows of each, in order, decoded (issue 33)
    full = journal.operations("run_aaa111")
    assert [v["operation_id"] for v in views] == ["op_1", "op_2", "op_3"] and views[0]["result"] == {"name": "a"}
    assert all(v == {k: o[k] for k in v} for v, o in zip(views, full, strict=True))
    assert not {"config", "fingerprint_files", "snapshot", "call_dir"} & set(views[0])
    journal.start_node("run_aaa111", "a", at=1.0)
    journal.finish_node("run_aaa111", "a", status="failed", handled=False, result=None, at=2.5)
    journal.end_run("run_aaa111", "failed", at=3.0, reason="node 'a' failed")
    assert journal.runs_with_open_compensation() == ["run_aaa111"]  # owed, not planned yet
    _run(journal, "run_ok0001")  # a succeeded run's succeeded call owes nothing
    _op(journal, "op_ok1", "run_ok0001")
    journal.finish_operation("op_ok1", status="succeeded", result={}, at=2.0)
    journal.end_run("run_ok0001", "succeeded", at=3.0, reason=None)
    plan = {"node_key": "a", "status": "succeeded", "max_attempts": 1, "timeout": 1.0, "backoff": 0.0,
            "created_at": 3.0, "updated_at": 3.0}
    _run(journal, "run_done01")  # a failed run whose call was compensated already owes nothing
    _op(journal, "op_done1", "run_done01")
    journal.finish_operation("op_done1", status="succeeded", result={}, at=2.0)
    journal.end_run("run_done01", "failed", at=3.0, reason="x", compensations=[
        {**plan, "compensation_id": "cmp_done", "operation_id": "op_done1", "run_id": "run_done01"}])
    assert journal.runs_with_open_compensation() == ["run_aaa111"]
    journal.add_message("run_aaa111", "a", "info", "100% done?")
    assert [m["text"] for m in journal.messages("run_aaa111")] == ["100% done?"]


def test_remote_task_intent_is_an_upsert(journal):
    _run(journal)
    journal.start_remote_task("run_aaa111", "a", "http://127.0.0.1:1/", at=1.0)
    journal.remote_task_state("run_aaa111", "a", state="working", at=2.0, task_id="t1")
    journal.remote_cancel("run_aaa111", "a", status="sending", at=3.0)
    journal.start_remote_task("run_aaa111", "a", "http://127.0.0.1:1/", at=4.0)  # the node is sent again
    tasks = journal.remote_tasks("run_aaa111")
    assert len(tasks) == 1 and tasks[0]["state"] == "sending" and tasks[0]["task_id"] is None
    assert tasks[0]["cancel_status"] is None


def test_newer_schema_is_refused(journal, journal_backend, tmp_path):
    from workrun.core.errors import JournalVersionError
    from workrun.journal import open_journal
    from workrun.journal.migrations import MIGRATIONS

    if journal_backend == "sqlite":
        journal._db.execute(f"PRAGMA user_version = {len(MIGRATIONS) + 1}")
    else:
        journal._exec("UPDATE workrun_schema SET version = %s", (len(MIGRATIONS) + 1,))
    with pytest.raises(JournalVersionError, match=f"version {len(MIGRATIONS) + 1} is newer"):
        open_journal(tmp_path)


# -- claims (R-S2): PostgreSQL only -------------------------------------------------------------------


def _ticket(journal, run_id="run_aaa111", ticket_id="tkt_abc123"):
    """A run waiting on node a: its ticket with an action job and a notification, as the engine opens them."""
    _run(journal, run_id)
    journal.start_node(run_id, "a", at=1.0)
    opened = {"ticket_id": ticket_id, "run_id": run_id, "at": 2.0, "actor": "workrun", "action": "open",
              "args": {"policy": "notify"}, "text": "boom"}
    journal.open_ticket(
        {"ticket_id": ticket_id, "run_id": run_id, "node_key": "a", "policy": "notify", "status": "pending",
         "error": "boom", "result": None, "created_at": 2.0, "updated_at": 2.0},
        node_status="waiting", handled=False, at=2.0, events=[opened],
        action={"ticket_id": ticket_id, "run_id": run_id, "status": "pending", "request": {"url": "http://x/%s?"},
                "max_attempts": 2, "timeout": 5.0, "backoff": 0.0, "idempotent": True, "next_attempt_at": None,
                "created_at": 2.0, "updated_at": 2.0},
        notification={"notification_id": "ntf_1", "subject": f"ticket:{ticket_id}", "run_id": run_id,
                      "ticket_id": ticket_id, "compensation_id": None, "message": "needs a person",
                      "request": {"url": "http://hook"}, "status": "pending", "created_at": 2.0, "updated_at": 2.0})
    journal.pause_run(run_id, reason="waiting for a person", at=2.0)


def test_tickets_actions_and_notifications(journal):
    """Migration 6's tables on both backends: one-transaction ticket opening, the action job's state machine
    and conditional writes, notifications never twice, resuming past the node (R-M1..R-M8)."""
    from workrun.core.errors import StaleStatusError

    _ticket(journal)
    assert journal.run("run_aaa111")["status"] == "waiting"
    assert journal.nodes("run_aaa111")[0]["status"] == "waiting"
    t = journal.ticket("tkt_ab")  # a unique prefix
    assert (t["ticket_id"], t["status"], t["result"]) == ("tkt_abc123", "pending", None)
    assert [x["ticket_id"] for x in journal.list_tickets(status="pending")] == ["tkt_abc123"]
    action = journal.ticket_action("tkt_abc123")
    assert action["request"] == {"url": "http://x/%s?"} and action["idempotent"] == 1
    assert [a["ticket_id"] for a in journal.open_ticket_actions("run_aaa111")] == ["tkt_abc123"]
    assert journal.runs_with_open_tickets_work() == ["run_aaa111"]

    journal.start_action_attempt("tkt_abc123", 1, trigger="auto", seen="pending", at=3.0)
    with pytest.raises(StaleStatusError):  # the action is running now, not pending
        journal.start_action_attempt("tkt_abc123", 2, trigger="auto", seen="pending", at=3.0)
    journal.action_sending("tkt_abc123", 1)
    journal.finish_action_attempt("tkt_abc123", 1, {"status": "failed", "ended_at": 4.0, "http_status": 502,
                                                    "response_tail": "bad", "failure": "http", "error": "HTTP 502"},
                                  {"status": "failed", "result": None, "reason": "exhausted",
                                   "next_attempt_at": None, "updated_at": 4.0})
    assert [(a["number"], a["status"], a["http_status"]) for a in journal.ticket_attempts("tkt_abc123")] == \
        [(1, "failed", 502)]

    assert journal.add_notification({"notification_id": "ntf_1b", "subject": "ticket:tkt_abc123",
                                     "run_id": "run_aaa111", "message": "again", "request": {},
                                     "status": "pending", "created_at": 5.0, "updated_at": 5.0}) is False
    journal.notification_sending("ntf_1", at=5.0)
    journal.finish_notification("ntf_1", "sent", at=6.0, http_status=200, error=None)
    assert [n["status"] for n in journal.notifications("run_aaa111")] == ["sent"]

    journal.record_ticket_event({"ticket_id": "tkt_abc123", "run_id": "run_aaa111", "at": 6.5, "actor": "me",
                                 "action": "note", "args": {}, "text": "paid by hand"})
    journal.resume_ticket("tkt_abc123", {"ref": "bank-42"}, {"ticket_id": "tkt_abc123", "run_id": "run_aaa111",
                                                             "at": 7.0, "actor": "me", "action": "resume",
                                                             "args": {"result": {"ref": "bank-42"}}}, at=7.0)
    assert journal.run("run_aaa111")["status"] == "running"
    node = journal.nodes("run_aaa111")[0]
    assert (node["status"], node["handled"], node["result"]) == ("succeeded", 1, {"ref": "bank-42"})
    assert journal.ticket("tkt_abc123")["status"] == "resolved"
    assert [e["action"] for e in journal.ticket_events("tkt_abc123")] == ["open", "note", "resume"]
    with pytest.raises(StaleStatusError):  # resolved is final: a second resume writes nothing
        journal.resolve_ticket("tkt_abc123", {"ticket_id": "tkt_abc123", "run_id": "run_aaa111", "at": 8.0,
                                              "actor": "me", "action": "resolve", "args": {}}, at=8.0)


def test_owner_adoption_app_calls_and_dashboard_reads(journal):
    """Migration 4's owner columns (an ``IS`` comparison with NULL), the dashboard's grouped reads."""
    _run(journal)
    _op(journal)
    assert journal.adopt_operation("op_1", owner_pid=10, owner_start="s10", seen_pid=None, seen_start=None)
    assert not journal.adopt_operation("op_1", owner_pid=11, owner_start="s11", seen_pid=None, seen_start=None)
    assert journal.adopt_operation("op_1", owner_pid=11, owner_start="s11", seen_pid=10, seen_start="s10")
    journal.start_operation({"operation_id": "op_2", "run_id": "run_aaa111", "node_key": "a", "app": "mark",
                             "project": "/p", "kind": "process", "config": {"name": "newer"}, "input": {},
                             "fingerprint": "g", "fingerprint_files": {}, "depends_on": [], "status": "starting",
                             "call_dir": "/c2", "created_at": 2.5, "standalone": 0})
    [calls] = journal.latest_app_calls()
    assert (calls["project"], calls["app"], calls["calls"], calls["fingerprint"]) == ("/p", "mark", 2, "g")
    assert calls["config"] == {"name": "newer"}
    _run(journal, "run_bbb222", created=5.0)
    assert [r["run_id"] for r in journal.run_summaries(limit=1)] == ["run_bbb222"]
    assert journal.count_runs(status="running", workflow="w") == 2 and journal.workflow_names() == ["w"]


@pytest.fixture
def pg(pg_url, monkeypatch, tmp_path):
    from workrun.journal import open_journal

    monkeypatch.setenv("WORKRUN_JOURNAL", pg_url)
    journals = [open_journal(tmp_path) for _ in range(2)]
    for j, name in zip(journals, ("wkr_a", "wkr_b"), strict=True):
        j.register_worker(name, "host-1", 1, 10.0, 0.0)
    yield journals
    for j in journals:
        j.close()


def test_a_live_claim_is_exclusive_even_for_its_holder(pg):
    a, b = pg
    _run(a, "run_1", 1.0)
    _run(a, "run_2", 2.0)
    first = a.claim_run("wkr_a", 100.0, 10.0)
    assert first == {"run_id": "run_1", "worker_id": "wkr_a", "epoch": 1, "previous_worker": None,
                     "previous_host": None, "takeover": False}
    assert b.claim_run("wkr_b", 101.0, 10.0)["run_id"] == "run_2"  # oldest unclaimed
    assert a.claim_run("wkr_a", 102.0, 10.0) is None  # its own live claim is not claimable again
    assert b.claim_run("wkr_b", 102.0, 10.0, "run_1") is None  # a live claim holds against a named claim


def test_expired_lease_is_taken_over_and_the_loser_finds_out(pg):
    a, b = pg
    _run(a, "run_1", 1.0)
    a.claim_run("wkr_a", 100.0, 10.0)
    assert a.heartbeat("wkr_a", 105.0, 10.0, ["run_1"]) == {"run_1"}  # renewed until 115
    assert b.claim_run("wkr_b", 114.0, 10.0) is None
    got = b.claim_run("wkr_b", 116.0, 10.0)
    assert got == {"run_id": "run_1", "worker_id": "wkr_b", "epoch": 2, "previous_worker": "wkr_a",
                   "previous_host": "host-1", "takeover": True}
    assert a.heartbeat("wkr_a", 117.0, 10.0, ["run_1"]) == set()  # lost: the worker must stop driving it
    assert b.run_claim("run_1")["takeovers"] == 1


def test_a_scheduler_whose_claim_was_taken_over_writes_nothing(pg):
    """R-F2: A drives run_1 fenced by epoch 1; B takes it over (epoch 2): every write A tries for the run — a
    message, a status — is refused with ClaimLostError and leaves no row; B's fenced writes go through."""
    from workrun.core.errors import ClaimLostError

    a, b = pg
    _run(a, "run_1", 1.0)
    claim_a = a.claim_run("wkr_a", 100.0, 10.0)
    with a.fenced("run_1", "wkr_a", claim_a["epoch"]):
        a.add_message("run_1", None, "info", "A before the takeover")
        claim_b = b.claim_run("wkr_b", 200.0, 10.0)
        assert claim_b["epoch"] == claim_a["epoch"] + 1
        before = b.messages("run_1")
        with pytest.raises(ClaimLostError, match="run_1"):
            a.add_message("run_1", None, "info", "A after the takeover")
        with pytest.raises(ClaimLostError):
            a.request_stop("run_1")
        assert b.messages("run_1") == before and not b.run("run_1")["stop_requested"]
    with b.fenced("run_1", "wkr_b", claim_b["epoch"]):
        b.add_message("run_1", None, "info", "B drives it")
    assert [m["text"] for m in b.messages("run_1")] == ["A before the takeover", "B drives it"]
    b.release_run("run_1", "wkr_b", 300.0)
    again = b.claim_run("wkr_b", 301.0, 10.0, "run_1")  # a new claim by the same worker is a new epoch
    assert again["epoch"] == 3
    with b.fenced("run_1", "wkr_b", claim_b["epoch"]), pytest.raises(ClaimLostError):
        b.add_message("run_1", None, "info", "the old claim of the same worker")


def test_a_lost_connection_is_reopened_and_the_write_is_not_repeated(pg, capfd):
    """R-F1: the journal's backend is terminated (as a server restart or a failover would): the next read and
    the next write reconnect and go on; "reconnected" is said on stderr; a write whose COMMIT was cut off is
    settled by txid_status, never applied twice."""
    import psycopg

    a, b = pg
    _run(a, "run_1", 1.0)

    def kill(journal):
        pid = journal._pg.info.backend_pid
        with psycopg.connect(b.url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))

    kill(a)
    assert a.run("run_1")["run_id"] == "run_1"  # a read reconnects
    kill(a)
    a.add_message("run_1", None, "info", "after a reconnect")  # a write reconnects
    assert [m["text"] for m in b.messages("run_1")] == ["after a reconnect"]
    assert capfd.readouterr().err.count("reconnected to the journal's database") == 2

    # the connection goes inside a write transaction: the server aborts it, so it is run again, once
    tries = []

    def body(pg_conn):
        tries.append(1)
        pg_conn.execute("INSERT INTO messages (run_id, node_key, at, level, text) VALUES "
                        "('run_1', NULL, 1, 'info', 'once')")
        if len(tries) == 1:
            kill(a)

    a._attempt(body, write=True)
    assert len(tries) == 2 and [m["text"] for m in b.messages("run_1")].count("once") == 1

    # a COMMIT whose answer was lost is settled by reading back: committed is committed, aborted is not
    with a._lock, a._pg.transaction():
        committed = a._pg.execute("SELECT txid_current() AS tx").fetchone()["tx"]
    kill(a)
    assert a._committed(committed, time.monotonic() + 30) is True
    with a._lock:
        with pytest.raises(psycopg.Error), a._pg.transaction():
            aborted = a._pg.execute("SELECT txid_current() AS tx").fetchone()["tx"]
            a._pg.execute("SELECT 1/0")
    assert a._committed(aborted, time.monotonic() + 30) is False


def test_the_journal_gives_up_after_workrun_db_retry(pg, monkeypatch):
    """R-F1: when the database stays away longer than WORKRUN_DB_RETRY, the statement fails with one line
    naming it (the process then exits 1), and every other connection of the process gives up at once."""
    from workrun.core.errors import DatabaseUnreachableError
    from workrun.journal.postgres import PostgresJournal

    monkeypatch.setattr(PostgresJournal, "_gave_up", "")  # restored afterwards: other tests share the process
    a, b = pg
    a._retry = 0.5
    a.url = a.url.rsplit(":", 1)[0] + ":1/x"  # nothing listens on port 1: every reconnect is refused
    a._pg.close()
    with pytest.raises(DatabaseUnreachableError, match="could not reconnect within WORKRUN_DB_RETRY=0.5 s"):
        a.run("run_1")
    b._pg.close()  # b's database is fine, but this process is ending: no second wait of WORKRUN_DB_RETRY
    began = time.monotonic()
    with pytest.raises(DatabaseUnreachableError):
        b.run("run_1")
    assert time.monotonic() - began < 0.5


def test_a_worker_does_not_claim_a_run_it_drives_again(pg):
    """Break-it finding: a run whose claim lapsed while the database was away is not claimed a second time by
    the worker that drives it (``exclude``); another worker may take it over."""
    a, b = pg
    _run(a, "run_1", 1.0)
    assert a.claim_run("wkr_a", 100.0, 10.0)["epoch"] == 1
    assert a.claim_run("wkr_a", 200.0, 10.0, exclude=["run_1"]) is None
    assert b.claim_run("wkr_b", 200.0, 10.0)["epoch"] == 2


def test_released_run_is_not_a_takeover_and_waits_for_not_before(pg):
    a, b = pg
    _run(a, "run_1", 1.0)
    a.claim_run("wkr_a", 100.0, 10.0)
    a.release_run("run_1", "wkr_a", 103.0)
    assert b.claim_run("wkr_b", 102.0, 10.0) is None
    got = b.claim_run("wkr_b", 104.0, 10.0)
    assert got["run_id"] == "run_1" and got["takeover"] is False


def test_finished_runs_are_not_claimed(pg):
    a, _ = pg
    _run(a, "run_1", 1.0)
    assert a.run_needs_work("run_1")
    a.end_run("run_1", "succeeded", at=2.0)
    assert not a.run_needs_work("run_1")
    assert a.claim_run("wkr_a", 100.0, 10.0) is None
    assert a.claim_run("wkr_a", 100.0, 10.0, "run_1")["run_id"] == "run_1"  # an operator's command may


def test_racing_claims_hand_each_run_to_exactly_one_worker(pg_url, monkeypatch, tmp_path):
    import threading

    from workrun.journal import open_journal

    monkeypatch.setenv("WORKRUN_JOURNAL", pg_url)
    setup = open_journal(tmp_path)
    for i in range(30):
        _run(setup, f"run_{i:03d}", float(i))
    won: dict[str, list[str]] = {}

    def claimer(name: str) -> None:
        j = open_journal(tmp_path)
        j.register_worker(name, "h", 1, 60.0, 0.0)
        while True:
            got = j.claim_run(name, 100.0, 60.0)
            if got is None:
                break
            won.setdefault(got["run_id"], []).append(name)
        j.close()

    threads = [threading.Thread(target=claimer, args=(f"wkr_{n}",)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    setup.close()
    assert sorted(won) == [f"run_{i:03d}" for i in range(30)]
    assert all(len(v) == 1 for v in won.values()), won


def test_a_waiting_run_with_an_action_owed_is_claimed(pg):
    """A waiting run's ticket action is work a worker claims (R-M3 on a shared journal, R-S2); once the
    action has ended, the waiting run needs nobody until an operator acts."""
    a, _ = pg
    _ticket(a, "run_wait01")
    assert a.run_needs_work("run_wait01")
    assert a.claim_run("wkr_a", 1.0, 10.0)["run_id"] == "run_wait01"
    a.release_run("run_wait01", "wkr_a", 1.0)
    a.start_action_attempt("tkt_abc123", 1, trigger="auto", seen="pending", at=3.0)
    a.action_sending("tkt_abc123", 1)
    a.finish_action_attempt("tkt_abc123", 1, {"status": "succeeded", "ended_at": 4.0, "http_status": 200,
                                              "response_tail": "ok", "failure": None, "error": None},
                            {"status": "succeeded", "result": {"ok": True}, "reason": None,
                             "next_attempt_at": None, "updated_at": 4.0})
    a.notification_sending("ntf_1", at=5.0)
    a.finish_notification("ntf_1", "sent", at=6.0, http_status=200, error=None)
    assert not a.run_needs_work("run_wait01")
    assert a.claim_run("wkr_b", 20.0, 10.0) is None


def test_messages_reach_other_readers_with_the_next_write_or_soon_after(journal, journal_backend, tmp_path):
    """A message is in the journal for any reader with this process's next write, else within MESSAGE_DELAY
    seconds, else at close; the node states, node_states and stop_requested reads agree with the rows."""
    import time

    from workrun.journal import open_journal
    from workrun.journal.sqlite import MESSAGE_DELAY

    _run(journal, "run_msg001", nodes=("a", "b"))
    other = open_journal(tmp_path)  # another process's view (its own connection)
    try:
        journal.start_node("run_msg001", "a", at=1.0)  # held: it goes in with the next write (the engine's order)
        journal.add_message("run_msg001", "a", "info", "a: running")
        if journal_backend == "sqlite":  # both held: the next write takes them, the background writer soon after
            assert other.messages("run_msg001") == [] and other.node_states("run_msg001")[0]["status"] == "pending"
            journal.request_stop("run_none")  # any write
        assert [m["text"] for m in other.messages("run_msg001")] == ["a: running"]
        assert other.node_states("run_msg001") == [{"node_key": "a", "status": "running", "handled": 0},
                                                   {"node_key": "b", "status": "pending", "handled": 0}]
        assert [n["node_key"] for n in other.nodes("run_msg001", ["b"])] == ["b"]
        token = other.change_token()  # moves for another connection's commit, never for this one's own
        if journal_backend == "sqlite":
            _run(other, "run_tok001")
            assert other.change_token() == token
            journal.finish_node("run_msg001", "a", status="succeeded", handled=False, result=None, at=1.5)
            assert other.change_token() != token
        else:  # cannot tell: the scheduler reads every state each time
            assert token is None
        assert other.nodes("run_msg001", []) == []
        journal.add_message("run_msg001", "a", "info", "said alone")
        end = time.monotonic() + MESSAGE_DELAY + 10
        while len(other.messages("run_msg001")) < 2 and time.monotonic() < end:
            time.sleep(0.01)
        assert [m["text"] for m in other.messages("run_msg001")] == ["a: running", "said alone"]
        assert not other.stop_requested("run_msg001") and not other.stop_requested("run_none")
        journal.request_stop("run_msg001")
        assert other.stop_requested("run_msg001")
        journal.add_message("run_msg001", None, "info", "last words")
        journal.close()
        assert [m["text"] for m in other.messages("run_msg001")][-1] == "last words"
    finally:
        other.close()


def test_a_json_column_that_does_not_hold_json_is_one_journal_error(journal, journal_backend):
    """A row damaged by hand (a JSON column holding text that is not JSON): reading it is a JournalError naming
    the journal (one line at the CLI), not an internal error."""

    _run(journal)
    _op(journal)
    if journal_backend == "sqlite":
        journal._tx([("UPDATE operations SET result = '[1,' WHERE operation_id = 'op_1'", ())], None)
    else:
        journal._exec("UPDATE operations SET result = '[1,' WHERE operation_id = 'op_1'", ())
    with pytest.raises(JournalError, match="column 'result' does not hold JSON|a column does not hold JSON"):
        journal.operation("op_1")


def test_a_node_start_is_held_for_the_nodes_next_write(journal, journal_backend, tmp_path):
    """Issue 27: the engine only says a node started; the journal writes it with the node's next write — its
    first call's intent, or its end when it made none — in that transaction, before the write that needs it
    (``running -> succeeded`` passes the state machine). Until then other readers see it ``pending``."""
    from workrun.journal import open_journal

    _run(journal, "run_held01", nodes=("a", "b"))
    other = open_journal(tmp_path)
    try:
        journal.start_node("run_held01", "a", at=1.0)
        assert other.node_states("run_held01")[0]["status"] == "pending"  # nothing written yet
        journal.finish_node("run_held01", "a", status="succeeded", handled=False, result={"x": 1}, at=2.0)
        a = other.nodes("run_held01", ["a"])[0]
        assert (a["status"], a["started_at"], a["ended_at"]) == ("succeeded", 1.0, 2.0)
        journal.start_node("run_held01", "b", at=3.0)
        journal.start_operation({"operation_id": "op_held1", "run_id": "run_held01", "node_key": "b", "app": "mark",
                                 "project": "/p", "kind": "process", "config": {}, "input": {}, "fingerprint": "f",
                                 "fingerprint_files": {}, "depends_on": [], "status": "starting", "call_dir": "/c",
                                 "created_at": 3.1, "standalone": 0})
        b = other.nodes("run_held01", ["b"])[0]
        assert (b["status"], b["started_at"]) == ("running", 3.0)
        assert other.operation("op_held1")["status"] == "starting"
    finally:
        other.close()


def test_a_held_node_start_reaches_other_readers_soon_when_nothing_else_is_written(journal, journal_backend, tmp_path):
    """A slow node (its first write comes late): SQLite's background writer writes the held start once it was
    held MESSAGE_DELAY seconds; PostgreSQL writes messages at once, and the engine's "running" message that
    follows a start carries it (the dashboard shows a started node within a second, R-U3)."""
    import time

    from workrun.journal import open_journal
    from workrun.journal.sqlite import MESSAGE_DELAY

    _run(journal, "run_slow01", nodes=("a",))
    other = open_journal(tmp_path)
    try:
        journal.start_node("run_slow01", "a", at=1.0)
        journal.add_message("run_slow01", "a", "info", "a: running")  # as the engine says it
        end = time.monotonic() + MESSAGE_DELAY + 5
        while other.node_states("run_slow01")[0]["status"] != "running" and time.monotonic() < end:
            time.sleep(0.01)
        assert other.node_states("run_slow01")[0]["status"] == "running"
        assert [m["text"] for m in other.messages("run_slow01")] == ["a: running"]
    finally:
        other.close()


def test_ending_a_run_reads_its_held_node_starts_first(journal, journal_backend):
    """A node whose start is still held when its run ends (it ended without a write of its own) is ended as
    started: ``stopped`` on a stop, never ``skipped`` as if it had not run, and the transition is a legal one."""
    _run(journal, "run_held02", nodes=("a", "b"))
    journal.start_node("run_held02", "a", at=1.0)
    journal.end_run("run_held02", "stopped", at=2.0, reason="stopped by the user")
    assert {n["node_key"]: n["status"] for n in journal.nodes("run_held02")} == {"a": "stopped", "b": "skipped"}


def test_write_back_settles_the_files_ahead_of_close_and_later_writes_are_kept(journal, journal_backend, tmp_path):
    """``write_back`` (issue 33): SQLite copies its write-ahead log into the database file on a thread of its own,
    so close has nothing left to copy; a write after it is still kept, and close removes the log as before."""
    import sqlite3

    from workrun.journal import open_journal

    _run(journal)
    journal.write_back()
    journal.write_back()  # said twice: one copy
    if journal_backend == "sqlite":
        journal._writing_back.join()
        probe = sqlite3.connect(str(journal.path))
        busy, frames, copied = probe.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        probe.close()
        assert frames > 0 and copied == frames and busy == 0
    _run(journal, "run_bbb222")  # written after write_back
    journal.close()
    if journal_backend == "sqlite":
        assert not (tmp_path / "journal.sqlite3-wal").exists()
    again = open_journal(tmp_path)
    assert again.run("run_aaa111") and again.run("run_bbb222")
    again.close()


def test_the_looks_for_unfinished_runs_read_runs_by_status_not_every_run(journal, journal_backend):
    """Issue 33: every scheduling command looks for unfinished runs and for failed runs owing compensation; with
    an index on the runs' status neither reads every run's row (its workflow snapshot included)."""
    if journal_backend != "sqlite":
        pytest.skip("the query plan asked is SQLite's; the index is made by the same migration on PostgreSQL")
    sqls = []
    journal._db.set_trace_callback(sqls.append)
    journal.runs_with_status("running")
    journal.runs_with_open_compensation()
    journal._db.set_trace_callback(None)
    for sql in sqls:
        plan = " ".join(str(row["detail"]) for row in journal._db.execute("EXPLAIN QUERY PLAN " + sql).fetchall())
        assert "SCAN r" not in plan and "SCAN runs" not in plan and "runs_status" in plan, plan


def test_a_scheduler_frozen_inside_a_transaction_does_not_hold_off_a_takeover(pg_url, monkeypatch, tmp_path):
    """R-F2 (conformance review): A is frozen (SIGSTOP, a paused VM) inside a write transaction, holding its claim
    row's lock; B's takeover waited for it for good. The server now ends A's session once it sits idle in its
    transaction longer than a lease (at least 5 s): B takes the run over, and A, running again, writes nothing."""
    import threading
    import time

    from workrun.core.errors import ClaimLostError
    from workrun.journal import open_journal

    monkeypatch.setenv("WORKRUN_JOURNAL", pg_url)
    monkeypatch.setenv("WORKRUN_LEASE", "1")
    a, b = open_journal(tmp_path), open_journal(tmp_path)
    try:
        _run(a, "run_1", 1.0)
        claim_a = a.claim_run("wkr_a", 100.0, 1.0)
        with a._lock:  # A's scheduler, frozen between two statements of a fenced write
            a._pg.execute("BEGIN")
            a._pg.execute("SELECT epoch FROM run_claims WHERE run_id = 'run_1' FOR KEY SHARE")
        got: list = []
        taker = threading.Thread(target=lambda: got.append(b.claim_run("wkr_b", 200.0, 10.0)), daemon=True)
        began = time.monotonic()
        taker.start()
        taker.join(30)
        if taker.is_alive():  # unfreeze A, so that the test ends
            with a._lock:
                a._pg.execute("ROLLBACK")
            taker.join(10)
            pytest.fail("the takeover waited for the frozen scheduler's transaction")
        assert got[0]["epoch"] == claim_a["epoch"] + 1 and got[0]["takeover"], got
        assert time.monotonic() - began < 20
        with a.fenced("run_1", "wkr_a", claim_a["epoch"]), pytest.raises(ClaimLostError):
            a.add_message("run_1", None, "info", "A, running again")  # on a new connection: fenced out
        assert [m["text"] for m in b.messages("run_1")] == []
    finally:
        a.close()
        b.close()
