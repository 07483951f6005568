"""The journal's rules on both backends (R-J1, R-J3, R-S1): same schema version, state machine,
conditional writes, lookups and ordering on SQLite and on a real PostgreSQL server."""

from __future__ import annotations

import pytest


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


def test_state_machine_enforced(journal):
    from workrun.errors import InvalidTransitionError

    _run(journal)
    journal.update("runs", ("run_aaa111",), None, status="failed")
    with pytest.raises(InvalidTransitionError, match="failed -> succeeded"):
        journal.update("runs", ("run_aaa111",), None, status="succeeded")
    with pytest.raises(InvalidTransitionError):
        journal.write([("update", "nodes", ("run_aaa111", "a"), {"status": "succeeded"})])
    assert journal.run("run_aaa111")["status"] == "failed"
    assert journal.nodes("run_aaa111")[0]["status"] == "pending"  # the refused transaction wrote nothing


def test_conditional_write_refused_when_status_moved(journal):
    from workrun.errors import ActionRefusedError

    _run(journal)
    journal.update("nodes", ("run_aaa111", "a"), None, status="running")
    with pytest.raises(ActionRefusedError, match="changed from pending to running meanwhile"):
        journal.write([("update", "nodes", ("run_aaa111", "a"), {"status": "succeeded", "_expect_status": "pending"}),
                       ("insert", "messages", None, {"run_id": "run_aaa111", "node_key": None, "at": 1.0,
                                                      "level": "info", "text": "must not be written"})])
    assert journal.messages("run_aaa111") == []
    journal.write([("update", "nodes", ("run_aaa111", "a"), {"status": "succeeded", "_expect_status": "running"})])
    assert journal.nodes("run_aaa111")[0]["status"] == "succeeded"


def test_lookups_prefixes_and_order(journal):
    from workrun.errors import NotFoundError

    _run(journal, "run_abc001", 1.0)
    _run(journal, "run_abc002", 2.0)
    _run(journal, "run_x%_03", 3.0)
    assert [r["run_id"] for r in journal.runs()] == ["run_x%_03", "run_abc002", "run_abc001"]
    assert journal.run("run_abc001")["spec"] == {"k": [1, 2]}
    with pytest.raises(NotFoundError, match="matches several"):
        journal.run("run_abc")
    with pytest.raises(NotFoundError):
        journal.run("run_x_")  # `_` is not a wildcard
    assert journal.run("run_x%")["run_id"] == "run_x%_03"
    assert journal.run("run_abc002")["created_at"] == 2.0
    assert [r["run_id"] for r in journal.runs_with_status("running")] == ["run_abc001", "run_abc002", "run_x%_03"]


def test_operations_compensations_attempts_round_trip(journal):
    _run(journal)
    op = {"operation_id": "op_1", "run_id": "run_aaa111", "node_key": "a", "app": "mark", "project": "/p",
          "kind": "process", "config": {"name": "mark"}, "input": {"x": 1}, "fingerprint": "f",
          "fingerprint_files": {"main.py": "d"}, "depends_on": [], "status": "starting", "call_dir": "/c",
          "created_at": 1.5, "standalone": 0}
    journal.insert_operation(op)
    journal.update("operations", ("op_1",), None, status="running", pid=123, started_at=1.6, deadline=61.6)
    journal.update("operations", ("op_1",), None, status="succeeded", result={"name": "a"}, ended_at=2.0)
    got = journal.operation("op_1")
    assert got["result"] == {"name": "a"} and got["deadline"] == 61.6 and got["pid"] == 123
    journal.update("runs", ("run_aaa111",), None, status="failed")
    assert journal.runs_with_open_compensation() == ["run_aaa111"]  # owed, not planned yet
    journal.write([("insert", "compensations", None, {
        "compensation_id": "cmp_1", "operation_id": "op_1", "run_id": "run_aaa111", "node_key": "a",
        "status": "pending", "max_attempts": 4, "timeout": 60.0, "backoff": 0.5, "created_at": 2.0,
        "updated_at": 2.0})])
    journal.write([("insert", "attempts", None, {"compensation_id": "cmp_1", "number": 1, "trigger": "auto",
                                                 "status": "starting", "call_dir": "/c1", "started_at": 3.0}),
                   ("update", "compensations", ("cmp_1",), {"status": "running", "_expect_status": "pending"})])
    assert [a["number"] for a in journal.attempts_in_flight("run_aaa111")] == [1]
    assert journal.compensation("cmp_")["compensation_id"] == "cmp_1"
    assert [c["compensation_id"] for c in journal.list_compensations("running")] == ["cmp_1"]


def test_remote_task_upsert(journal):
    _run(journal)
    row = {"run_id": "run_aaa111", "node_key": "a", "url": "http://127.0.0.1:1/", "task_id": None,
           "updated_at": 1.0}
    journal.upsert_remote_task(row)
    journal.upsert_remote_task({**row, "task_id": "t1", "state": "working", "updated_at": 2.0})
    tasks = journal.remote_tasks("run_aaa111")
    assert len(tasks) == 1 and tasks[0]["task_id"] == "t1" and tasks[0]["state"] == "working"


def test_newer_schema_is_refused(journal, journal_backend, tmp_path):
    from workrun.errors import JournalVersionError
    from workrun.journal import open_journal
    from workrun.journal.migrations import MIGRATIONS

    if journal_backend == "sqlite":
        journal._db.execute(f"PRAGMA user_version = {len(MIGRATIONS) + 1}")
    else:
        journal._db.execute("UPDATE workrun_schema SET version = %s", (len(MIGRATIONS) + 1,))
    with pytest.raises(JournalVersionError, match=f"version {len(MIGRATIONS) + 1} is newer"):
        open_journal(tmp_path)
