"""The SQLite journal: every SQL statement of Workrun lives in this module (R-J1, R-J3).

WAL mode; each write is one transaction committed before the caller goes on
(and before any side effect it precedes). ``synchronous=NORMAL`` by default:
durable against the runner being killed (the threat model of R-R4); set
``WORKRUN_SYNC=full`` to also survive power loss at some cost per write.

After each committed write :func:`workrun.faults.hit` is called with the
write's point name (``FAULT_POINTS``) so tests can kill the runner there.
``WORKRUN_MAX_PAGES=N`` (test-only) caps the file at N pages so writes fail
as on a full disk. A failed write raises JournalError; the transaction is
rolled back, so nothing is marked done that was not.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Iterable

from workrun import faults
from workrun.errors import (ActionRefusedError, InvalidTransitionError, JournalError, JournalVersionError,
                            NotFoundError)
from workrun.journal.migrations import MIGRATIONS
from workrun.states import allowed

__all__ = ["FAULT_POINTS", "Journal"]

FAULT_POINTS = (
    "run.created", "node.running", "op.intent", "op.started", "op.finished", "node.finished",
    "run.failed", "run.succeeded", "run.stopped", "run.waiting", "comp.status", "attempt.intent", "attempt.started",
    "attempt.finished", "remote.intent", "remote.task", "remote.cancel",
    "ticket.opened", "ticket.changed", "action.intent", "action.sending", "action.finished",
    "notify.intent", "notify.sending", "notify.finished",
)

_JSON_COLUMNS = {"spec", "inputs", "config", "input", "result", "resources", "fingerprint_files",
                 "depends_on", "context", "args", "held_back_by", "request"}
_COLUMNS = {
    "runs": {"status", "reason", "stop_requested", "compensate_requested", "ended_at"},
    "nodes": {"status", "handled", "result", "started_at", "ended_at"},
    "operations": {"status", "error", "result", "resources", "depends_on", "pid", "proc_start", "deadline", "started_at",
                   "ended_at", "exit_code", "signal", "stdout_tail", "stderr_tail", "snapshot"},
    "compensations": {"status", "reason", "result", "context", "next_attempt_at", "accept_code_change", "held_back_by",
                      "max_attempts", "updated_at"},
    "attempts": {"status", "pid", "proc_start", "deadline", "ended_at", "exit_code", "signal", "stdout_tail",
                 "stderr_tail", "result", "error", "http_status", "response_tail"},
    "remote_tasks": {"task_id", "context_id", "state", "cancel_status", "cancel_answer", "cancel_at", "updated_at"},
    "tickets": {"status", "error", "result", "updated_at"},
    "ticket_actions": {"status", "result", "reason", "next_attempt_at", "updated_at"},
    "ticket_attempts": {"status", "ended_at", "http_status", "response_tail", "failure", "error"},
    "notifications": {"status", "http_status", "error", "updated_at"},
}
_KEYS = {
    "runs": ("run_id",), "nodes": ("run_id", "node_key"), "operations": ("operation_id",),
    "compensations": ("compensation_id",), "attempts": ("compensation_id", "number"),
    "remote_tasks": ("run_id", "node_key"), "tickets": ("ticket_id",), "ticket_actions": ("ticket_id",),
    "ticket_attempts": ("ticket_id", "number"), "notifications": ("notification_id",),
}


def _dump(value: Any) -> str | None:
    return None if value is None else json.dumps(value, ensure_ascii=False, sort_keys=False)


def _row(cursor: sqlite3.Cursor, row: tuple[Any, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for (name, *_), value in zip(cursor.description, row):
        if name in _JSON_COLUMNS and isinstance(value, str):
            value = json.loads(value)
        out[name] = value
    return out


class Journal:
    """The durable record of runs, operations, compensations, attempts and operator events.

    Thread-safe: one connection, one lock; every write is its own transaction.

    Raises (from the constructor):
        JournalVersionError: the file's schema is newer than this Workrun.
        JournalError: the file is not a database or fails ``PRAGMA quick_check``.
    """

    def __init__(self, path: Path, *, check: bool = True) -> None:
        self.path = Path(path)
        self._lock = threading.RLock()
        try:
            self._db = sqlite3.connect(str(self.path), timeout=30.0, isolation_level=None, check_same_thread=False)
            self._db.row_factory = _row
            self._db.execute("PRAGMA busy_timeout = 30000")
            if check:
                problems = [r["quick_check"] for r in self._db.execute("PRAGMA quick_check").fetchall()]
                if problems != ["ok"]:
                    raise JournalError(f"integrity check failed: {problems[0]}; nothing was written. "
                                       "Restore a backup or move the file away", file=str(self.path))
            self._db.execute("PRAGMA journal_mode = WAL")
            sync = "FULL" if os.environ.get("WORKRUN_SYNC", "").lower() == "full" else "NORMAL"
            self._db.execute(f"PRAGMA synchronous = {sync}")
            self._db.execute("PRAGMA foreign_keys = ON")
            if os.environ.get("WORKRUN_MAX_PAGES", "").isdigit():  # test-only: simulate a full disk (SQLITE_FULL)
                self._db.execute(f"PRAGMA max_page_count = {int(os.environ['WORKRUN_MAX_PAGES'])}")
            self._migrate()
        except sqlite3.DatabaseError as exc:
            raise JournalError(f"cannot open the journal: {exc}", file=str(self.path)) from None

    # -- plumbing ---------------------------------------------------------

    def _migrate(self) -> None:
        version = self._db.execute("PRAGMA user_version").fetchone()["user_version"]
        if version > len(MIGRATIONS):
            raise JournalVersionError(
                f"journal schema version {version} is newer than this Workrun knows ({len(MIGRATIONS)}); "
                "upgrade Workrun", file=str(self.path))
        if version == len(MIGRATIONS):
            return
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")  # another process may be migrating: re-read under the write lock
            try:
                version = self._db.execute("PRAGMA user_version").fetchone()["user_version"]
                for number in range(version, len(MIGRATIONS)):
                    for statement in MIGRATIONS[number].split(";"):
                        if statement.strip():
                            self._db.execute(statement)
                    self._db.execute(f"PRAGMA user_version = {number + 1}")
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    @property
    def schema_version(self) -> int:
        """The applied schema version (number of migrations)."""
        return self._db.execute("PRAGMA user_version").fetchone()["user_version"]

    def _tx(self, statements: Iterable[tuple[str, tuple[Any, ...]]], fault: str | None,
            checks: Iterable[tuple[str, tuple[Any, ...], str, str | None]] = ()) -> None:
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    for table, key, new, expect in checks:  # the state machine (workrun/states.py), under the lock
                        where = " AND ".join(f"{k} = ?" for k in _KEYS[table])
                        row = self._db.execute(f"SELECT status FROM {table} WHERE {where}", key).fetchone()
                        if row is not None and expect is not None and row["status"] != expect:
                            raise ActionRefusedError(
                                f"{'/'.join(map(str, key))} changed from {expect} to {row['status']} meanwhile; "
                                "nothing was written: look again and retry the action")
                        if row is not None and not allowed(table, row["status"], new):
                            raise InvalidTransitionError(
                                f"{table} {'/'.join(map(str, key))}: {row['status']} -> {new} is not a transition "
                                "of the state machine (workrun/states.py); nothing was written")
                    for sql, params in statements:
                        self._db.execute(sql, params)
                    self._db.execute("COMMIT")
                except BaseException:
                    self._db.execute("ROLLBACK")
                    raise
            except sqlite3.Error as exc:
                raise JournalError(f"journal write failed: {exc}; nothing after this point was recorded. "
                                   "Fix the cause, then `workrun resume`", file=str(self.path)) from None
        if fault:
            faults.hit(fault)

    def _query(self, sql: str, params: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
        with self._lock:
            try:
                return self._db.execute(sql, params).fetchall()
            except sqlite3.Error as exc:
                raise JournalError(f"journal read failed: {exc}", file=str(self.path)) from None

    @staticmethod
    def _update_sql(table: str, fields: dict[str, Any], key: tuple[Any, ...]) -> tuple[str, tuple[Any, ...]]:
        bad = set(fields) - _COLUMNS[table]
        if bad:
            raise ValueError(f"not updatable in {table}: {sorted(bad)}")
        sets = ", ".join(f"{k} = ?" for k in fields)
        where = " AND ".join(f"{k} = ?" for k in _KEYS[table])
        values = tuple(_dump(v) if k in _JSON_COLUMNS else v for k, v in fields.items())
        return f"UPDATE {table} SET {sets} WHERE {where}", values + key

    @staticmethod
    def _insert_sql(table: str, row: dict[str, Any]) -> tuple[str, tuple[Any, ...]]:
        cols = ", ".join(row)
        marks = ", ".join("?" for _ in row)
        values = tuple(_dump(v) if k in _JSON_COLUMNS else v for k, v in row.items())
        return f"INSERT INTO {table} ({cols}) VALUES ({marks})", values

    def update(self, table: str, key: tuple[Any, ...], fault: str | None = None, **fields: Any) -> None:
        """Update one row of ``table`` by primary key and commit; then hit ``fault``.

        Raises:
            InvalidTransitionError: a ``status`` change not in :mod:`workrun.states`.
        """
        checks = [(table, key, fields["status"], None)] if "status" in fields else []
        self._tx([self._update_sql(table, fields, key)], fault, checks)

    def write(self, changes: list[tuple[str, str, Any, dict[str, Any]]], fault: str | None = None) -> None:
        """Commit several changes in one transaction.

        Args:
            changes: ``(op, table, key_or_None, fields)`` with op ``"insert"`` or ``"update"``. An update's
                ``_expect_status`` field (not a column) makes the write conditional on the current status.

        Raises:
            ActionRefusedError: a row is no longer in its ``_expect_status`` (someone changed it meanwhile).
            InvalidTransitionError: a status change not in :mod:`workrun.states`.
        """
        checks = [(t, k, f["status"], f.get("_expect_status")) for op, t, k, f in changes
                  if op == "update" and "status" in f]
        stmts = [self._insert_sql(t, f) if op == "insert"
                 else self._update_sql(t, {n: v for n, v in f.items() if n != "_expect_status"}, k)
                 for op, t, k, f in changes]
        self._tx(stmts, fault, checks)

    def close(self) -> None:
        """Close the connection."""
        with self._lock:
            self._db.close()

    # -- runs and nodes ---------------------------------------------------

    def create_run(self, run: dict[str, Any], node_keys: list[str]) -> None:
        """Insert a run (status ``running``) and its nodes (``pending``) in one transaction."""
        stmts = [self._insert_sql("runs", run)]
        stmts += [self._insert_sql("nodes", {"run_id": run["run_id"], "node_key": k, "position": i,
                                             "status": "pending"}) for i, k in enumerate(node_keys)]
        self._tx(stmts, "run.created")

    def run(self, run_id: str) -> dict[str, Any]:
        """Return one run by exact id or unique prefix.

        Raises:
            NotFoundError: no run, or the prefix matches several.
        """
        rows = self._query("SELECT * FROM runs WHERE run_id = ?", (run_id,)) or \
            self._query("SELECT * FROM runs WHERE run_id LIKE ? || '%' ESCAPE '\\' LIMIT 3",
                        (run_id.replace("%", "\\%").replace("_", "\\_"),))
        if len(rows) != 1:
            raise NotFoundError(f"no run matches {run_id!r}" if not rows else f"{run_id!r} matches several runs",
                                field="RUN")
        return rows[0]

    def runs(self, limit: int | None = None) -> list[dict[str, Any]]:
        """All runs, newest first."""
        sql = "SELECT * FROM runs ORDER BY created_at DESC, rowid DESC"
        return self._query(sql + (" LIMIT ?" if limit else ""), (limit,) if limit else ())

    def runs_with_status(self, *statuses: str) -> list[dict[str, Any]]:
        """Runs whose status is one of ``statuses``, oldest first."""
        marks = ",".join("?" for _ in statuses)
        return self._query(f"SELECT * FROM runs WHERE status IN ({marks}) ORDER BY created_at", statuses)

    def runs_with_open_compensation(self) -> list[str]:
        """Ids of runs with a compensation ``pending`` or ``running``, or with succeeded calls whose
        compensation is owed (failed run, or a stopped run an operator asked to compensate) but not planned."""
        rows = self._query(
            "SELECT DISTINCT run_id FROM compensations WHERE status IN ('pending', 'running') "
            "UNION SELECT run_id FROM runs WHERE eval = 0 "
            "AND (status = 'failed' OR (status IN ('stopped', 'terminated') AND compensate_requested = 1)) AND run_id IN "
            "(SELECT run_id FROM operations WHERE status = 'succeeded' AND operation_id NOT IN "
            "(SELECT operation_id FROM compensations))")
        return [r["run_id"] for r in rows]

    def nodes(self, run_id: str) -> list[dict[str, Any]]:
        """The run's nodes in workflow order."""
        return self._query("SELECT * FROM nodes WHERE run_id = ? ORDER BY position", (run_id,))

    def add_message(self, run_id: str, node_key: str | None, level: str, text: str) -> None:
        """Append a message to a node (or the run when ``node_key`` is None)."""
        self._tx([self._insert_sql("messages", {"run_id": run_id, "node_key": node_key, "at": time.time(),
                                                "level": level, "text": text})], None)

    def messages(self, run_id: str) -> list[dict[str, Any]]:
        """All messages of a run, oldest first."""
        return self._query("SELECT * FROM messages WHERE run_id = ? ORDER BY id", (run_id,))

    # -- operations -------------------------------------------------------

    def insert_operation(self, row: dict[str, Any]) -> None:
        """Record a call's intent (status ``starting``) before its process starts (R-J1)."""
        self._tx([self._insert_sql("operations", row)], "op.intent")

    def operation(self, operation_id: str) -> dict[str, Any]:
        """One operation by id.

        Raises:
            NotFoundError: unknown id.
        """
        rows = self._query("SELECT * FROM operations WHERE operation_id = ?", (operation_id,))
        if not rows:
            raise NotFoundError(f"no operation {operation_id!r}")
        return rows[0]

    def operations(self, run_id: str, node_key: str | None = None) -> list[dict[str, Any]]:
        """The run's operations (of one node when ``node_key`` is given) in the order they were recorded."""
        if node_key is not None:
            return self._query("SELECT * FROM operations WHERE run_id = ? AND node_key = ? ORDER BY created_at, rowid",
                               (run_id, node_key))
        return self._query("SELECT * FROM operations WHERE run_id = ? ORDER BY created_at, rowid", (run_id,))

    def operation_statuses(self, run_id: str) -> list[dict[str, Any]]:
        """``{operation_id, node_key, status}`` of the run's operations, in order (no JSON to decode)."""
        return self._query("SELECT operation_id, node_key, status FROM operations WHERE run_id = ? "
                           "ORDER BY created_at, rowid", (run_id,))

    def operations_in_flight(self, run_id: str | None = None) -> list[dict[str, Any]]:
        """Operations whose outcome is not recorded yet (``starting`` or ``running``)."""
        sql = "SELECT * FROM operations WHERE status IN ('starting', 'running')"
        return self._query(sql + (" AND run_id = ?" if run_id else " AND run_id IS NULL"), (run_id,) if run_id else ())

    def count_operations(self) -> int:
        """Number of operations in the journal."""
        return self._query("SELECT COUNT(*) AS n FROM operations")[0]["n"]

    # -- compensations and attempts --------------------------------------

    def compensations(self, run_id: str) -> list[dict[str, Any]]:
        """The run's compensations in the order they were planned."""
        return self._query("SELECT * FROM compensations WHERE run_id = ? ORDER BY created_at, rowid", (run_id,))

    def compensation(self, compensation_id: str) -> dict[str, Any]:
        """One compensation by exact id or unique prefix.

        Raises:
            NotFoundError: no compensation, or the prefix matches several.
        """
        rows = self._query("SELECT * FROM compensations WHERE compensation_id = ?", (compensation_id,)) or \
            self._query("SELECT * FROM compensations WHERE compensation_id LIKE ? || '%' ESCAPE '\\' LIMIT 3",
                        (compensation_id.replace("%", "\\%").replace("_", "\\_"),))
        if len(rows) != 1:
            raise NotFoundError(f"no compensation matches {compensation_id!r}" if not rows
                                else f"{compensation_id!r} matches several compensations", field="COMPENSATION_ID")
        return rows[0]

    def list_compensations(self, status: str | None = None, run_id: str | None = None) -> list[dict[str, Any]]:
        """Compensations filtered by status and run, oldest first."""
        where, params = [], []
        if status:
            where.append("status = ?")
            params.append(status)
        if run_id:
            where.append("run_id = ?")
            params.append(run_id)
        sql = "SELECT * FROM compensations" + (" WHERE " + " AND ".join(where) if where else "")
        return self._query(sql + " ORDER BY created_at, rowid", tuple(params))

    def attempts(self, compensation_id: str) -> list[dict[str, Any]]:
        """Attempts of a compensation, by number."""
        return self._query("SELECT * FROM attempts WHERE compensation_id = ? ORDER BY number", (compensation_id,))

    def attempts_of_run(self, run_id: str) -> list[dict[str, Any]]:
        """All attempts of a run's compensations."""
        return self._query("SELECT a.* FROM attempts a JOIN compensations c USING (compensation_id) "
                           "WHERE c.run_id = ? ORDER BY a.compensation_id, a.number", (run_id,))

    def attempts_in_flight(self, run_id: str) -> list[dict[str, Any]]:
        """Attempts of the run whose outcome is not recorded yet."""
        return self._query("SELECT a.* FROM attempts a JOIN compensations c USING (compensation_id) "
                           "WHERE c.run_id = ? AND a.status IN ('starting', 'running')", (run_id,))

    # -- operator events ---------------------------------------------------

    def add_event(self, row: dict[str, Any], changes: list[tuple[str, str, Any, dict[str, Any]]] = ()) -> None:
        """Record an operator action (R-O2) together with the changes it makes, atomically."""
        self.write([("insert", "events", None, row), *changes], "comp.status")

    def events(self, compensation_id: str) -> list[dict[str, Any]]:
        """Operator events of a compensation, oldest first."""
        return self._query("SELECT * FROM events WHERE compensation_id = ? ORDER BY id", (compensation_id,))

    # -- remote tasks (R-C10) --------------------------------------------

    def remote_tasks(self, run_id: str) -> list[dict[str, Any]]:
        """Remote A2A tasks of a run."""
        return self._query("SELECT * FROM remote_tasks WHERE run_id = ? ORDER BY updated_at", (run_id,))

    def upsert_remote_task(self, row: dict[str, Any], fault: str | None = None) -> None:
        """Insert or replace a remote task's record and commit; then hit ``fault``."""
        cols = ", ".join(row)
        marks = ", ".join("?" for _ in row)
        self._tx([(f"INSERT OR REPLACE INTO remote_tasks ({cols}) VALUES ({marks})", tuple(row.values()))], fault)

    def runs_with_open_remote_tasks(self) -> list[str]:
        """Ids of failed or stopped runs with a remote task still owed its one cancel (R-C10), oldest first.

        That is a task with a task id, not in a terminal state and no cancel yet, or a
        cancel left ``sending`` by a runner that died (to be marked ``unknown``).
        """
        rows = self._query(
            "SELECT DISTINCT r.run_id, r.created_at FROM runs r JOIN remote_tasks t USING (run_id) "
            "WHERE r.status IN ('failed', 'stopped') AND (t.cancel_status = 'sending' OR (t.cancel_status IS NULL "
            "AND t.task_id IS NOT NULL AND COALESCE(t.state, '') NOT IN ('completed', 'failed', 'canceled', "
            "'rejected'))) ORDER BY r.created_at")
        return [r["run_id"] for r in rows]

    # -- tickets, ticket actions, notifications (manual repair, SPEC §12) ----

    def open_ticket(self, changes: list[tuple[str, str, Any, dict[str, Any]]]) -> None:
        """Commit a ticket's opening with the node change it comes with, in one transaction (R-M1, R-M3, R-M4).

        Args:
            changes: ``write``-style changes: the ticket row, the node's update (``waiting`` or handled),
                the action job row when the policy registers one, the opening event and the
                notification intent when ``[notify]`` is declared.
        """
        self.write(changes, "ticket.opened")

    def change_ticket(self, event: dict[str, Any], changes: list[tuple[str, str, Any, dict[str, Any]]]) -> None:
        """Record an operator action on a ticket (R-M6, R-O2) with the changes it makes, atomically.

        Raises:
            ActionRefusedError: a row left the status the operator saw (``_expect_status``).
        """
        self.write([("insert", "ticket_events", None, event), *changes], "ticket.changed")

    def ticket(self, ticket_id: str) -> dict[str, Any]:
        """One ticket by exact id or unique prefix.

        Raises:
            NotFoundError: no ticket, or the prefix matches several.
        """
        rows = self._query("SELECT * FROM tickets WHERE ticket_id = ?", (ticket_id,)) or \
            self._query("SELECT * FROM tickets WHERE ticket_id LIKE ? || '%' ESCAPE '\\' LIMIT 3",
                        (ticket_id.replace("%", "\\%").replace("_", "\\_"),))
        if len(rows) != 1:
            raise NotFoundError(f"no ticket matches {ticket_id!r}" if not rows
                                else f"{ticket_id!r} matches several tickets", field="TICKET")
        return rows[0]

    def tickets(self, run_id: str) -> list[dict[str, Any]]:
        """The run's tickets, oldest first."""
        return self._query("SELECT * FROM tickets WHERE run_id = ? ORDER BY created_at, rowid", (run_id,))

    def list_tickets(self, status: str | None = None, run_id: str | None = None) -> list[dict[str, Any]]:
        """Tickets filtered by status and run, oldest first."""
        where, params = [], []
        if status:
            where.append("status = ?")
            params.append(status)
        if run_id:
            where.append("run_id = ?")
            params.append(run_id)
        sql = "SELECT * FROM tickets" + (" WHERE " + " AND ".join(where) if where else "")
        return self._query(sql + " ORDER BY created_at, rowid", tuple(params))

    def ticket_action(self, ticket_id: str) -> dict[str, Any] | None:
        """The ticket's action job, or None when its policy registered none."""
        rows = self._query("SELECT * FROM ticket_actions WHERE ticket_id = ?", (ticket_id,))
        return rows[0] if rows else None

    def ticket_attempts(self, ticket_id: str) -> list[dict[str, Any]]:
        """Attempts of a ticket's action, by number."""
        return self._query("SELECT * FROM ticket_attempts WHERE ticket_id = ? ORDER BY number", (ticket_id,))

    def ticket_events(self, ticket_id: str) -> list[dict[str, Any]]:
        """A ticket's history (opening, operator actions, notes, notification outcomes), oldest first."""
        return self._query("SELECT * FROM ticket_events WHERE ticket_id = ? ORDER BY id", (ticket_id,))

    def open_ticket_actions(self, run_id: str | None = None) -> list[dict[str, Any]]:
        """Action jobs still to run (``pending``) or left ``running`` by a runner that died, oldest first."""
        sql = "SELECT * FROM ticket_actions WHERE status IN ('pending', 'running')"
        if run_id:
            return self._query(sql + " AND run_id = ? ORDER BY created_at", (run_id,))
        return self._query(sql + " ORDER BY created_at")

    def start_action_attempt(self, ticket_id: str, number: int, *, trigger: str, seen: str, at: float) -> None:
        """Record an action attempt's intent and mark the action ``running``, in one transaction (R-M3, R-C7).

        Raises:
            ActionRefusedError: the action left ``seen`` meanwhile; nothing was written.
        """
        self.write([("insert", "ticket_attempts", None, {"ticket_id": ticket_id, "number": number,
                                                        "trigger": trigger, "status": "starting", "started_at": at}),
                    ("update", "ticket_actions", (ticket_id,), {"status": "running", "_expect_status": seen,
                                                                "next_attempt_at": None, "updated_at": at})],
                   "action.intent")

    def mark_action_sending(self, ticket_id: str, number: int) -> None:
        """Commit that the attempt's request is about to leave (after this, a lost outcome is ``unknown``)."""
        self.update("ticket_attempts", (ticket_id, number), "action.sending", status="sending")

    def finish_action_attempt(self, ticket_id: str, number: int, attempt: dict[str, Any],
                              action: dict[str, Any]) -> None:
        """Record an attempt's outcome and the action's new status in one transaction."""
        self.write([("update", "ticket_attempts", (ticket_id, number), attempt),
                    ("update", "ticket_actions", (ticket_id,), action)], "action.finished")

    def runs_with_open_tickets_work(self) -> list[str]:
        """Ids of runs with an action job or a notification still owed, oldest first (R-M7, R-M8)."""
        rows = self._query(
            "SELECT run_id FROM ticket_actions WHERE status IN ('pending', 'running') "
            "UNION SELECT run_id FROM notifications WHERE status IN ('pending', 'sending')")
        return [r["run_id"] for r in rows]

    def add_notification(self, row: dict[str, Any]) -> bool:
        """Record a notification's intent (status ``pending``) unless one with its subject exists (R-M8).

        Returns:
            True when written; False when that subject was already notified (never twice).
        """
        with self._lock:
            if self._query("SELECT 1 FROM notifications WHERE subject = ?", (row["subject"],)):
                return False
            self._tx([self._insert_sql("notifications", row)], "notify.intent")
        return True

    def notifications(self, run_id: str | None = None, statuses: tuple[str, ...] = ()) -> list[dict[str, Any]]:
        """Notifications of a run (or all), optionally with one of ``statuses``, oldest first."""
        where, params = [], []
        if run_id:
            where.append("run_id = ?")
            params.append(run_id)
        if statuses:
            where.append(f"status IN ({','.join('?' for _ in statuses)})")
            params.extend(statuses)
        sql = "SELECT * FROM notifications" + (" WHERE " + " AND ".join(where) if where else "")
        return self._query(sql + " ORDER BY created_at, rowid", tuple(params))
