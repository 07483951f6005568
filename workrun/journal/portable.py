"""The journal's intent-named reads and writes in portable SQL, shared by both backends (R-J1, R-J3, R-S1).

After DBOS's split of its system database: this module holds what both
dialects run unchanged — statements with ``?`` placeholders, composed by
:func:`_insert` and :func:`_update`, and every state change checked against
:mod:`workrun.core.states` inside its transaction — and
:class:`SqlJournal` declares the plumbing each dialect supplies:

- :meth:`SqlJournal._tx`: one transaction of statements after the state
  machine's checks on the locked rows, then the write's fault point;
- :meth:`SqlJournal._query`: one read, rows as dicts with JSON columns decoded;
- :meth:`SqlJournal.add_message`, :meth:`SqlJournal.change_token`,
  :meth:`SqlJournal.adopt_operation`, :meth:`SqlJournal.latest_app_calls`: what
  is written differently (SQLite batches messages; ``IS`` vs ``IS NOT DISTINCT
  FROM``; bare columns with ``MAX`` vs ``DISTINCT ON``).

:class:`workrun.journal.sqlite.SqliteJournal` and
:class:`workrun.journal.postgres.PostgresJournal` are the two dialects; neither
inherits the other.
"""

from __future__ import annotations

import json
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from workrun.core.errors import NotFoundError, StaleStatusError
from workrun.core.redact import redact_value
from workrun.core.rows import (
    AppCallRow,
    AttemptRow,
    CompensationRow,
    EventRow,
    JsonObject,
    MessageRow,
    NodeRow,
    NotificationRow,
    OperationRow,
    RemoteTaskRow,
    RunRow,
    TicketActionRow,
    TicketAttemptRow,
    TicketEventRow,
    TicketRow,
)
from workrun.core.states import check
from workrun.journal.base import FAULT_POINTS

__all__ = ["FAULT_POINTS", "SqlJournal"]

_JSON_COLUMNS = {"spec", "inputs", "config", "input", "result", "resources", "fingerprint_files",
                 "depends_on", "context", "args", "held_back_by", "request", "data"}
_VIEW_COLUMNS = ("operation_id, node_key, tool_call_index, app, kind, tool_name, status, input, result, resources, "
                 "depends_on, fingerprint, error, exit_code, signal, created_at, started_at, ended_at, stdout_tail, "
                 "stderr_tail")
"""The operation columns a run's view shows (:meth:`SqlJournal.operation_views`)."""
_KEYS = {
    "runs": ("run_id",), "nodes": ("run_id", "node_key"), "operations": ("operation_id",),
    "compensations": ("compensation_id",), "attempts": ("compensation_id", "number"),
    "remote_tasks": ("run_id", "node_key"), "tickets": ("ticket_id",), "ticket_actions": ("ticket_id",),
    "ticket_attempts": ("ticket_id", "number"), "notifications": ("notification_id",),
}

_Statement = tuple[str, tuple[Any, ...]]
_Check = tuple[str, tuple[Any, ...], str, "str | None"]  # table, key, new status, status the caller saw


def _dump(value: Any) -> str | None:
    return None if value is None else json.dumps(value, ensure_ascii=False, sort_keys=False)


def _status_query(table: str, placeholder: str = "?") -> str:
    """The statement that reads the status of one row of ``table`` by its key (``placeholder``: ``?`` or ``%s``)."""
    return f"SELECT status FROM {table} WHERE " + " AND ".join(f"{k} = {placeholder}" for k in _KEYS[table])


def _check_status(table: str, key: tuple[Any, ...], found: str | None, new: str, seen: str | None,
                  file: str) -> None:
    """The state machine inside a write transaction (R-J3): ``found`` is the row's status as read, locked, in
    it (None: no such row yet, nothing to check).

    Raises:
        StaleStatusError: the caller saw ``seen`` and the row holds another status now (nothing is written).
        InvalidTransitionError: ``found`` -> ``new`` is not a transition of :mod:`workrun.core.states`.
    """
    if found is None:
        return
    if seen is not None and found != seen:
        raise StaleStatusError(f"{'/'.join(map(str, key))} changed from {seen} to {found} meanwhile; "
                               "nothing was written: look again and retry the action", file=file)
    check(table, key, found, new)


def _update(table: str, key: tuple[Any, ...], fields: Mapping[str, Any]) -> _Statement:
    sets = ", ".join(f"{k} = ?" for k in fields)
    where = " AND ".join(f"{k} = ?" for k in _KEYS[table])
    values = tuple(_dump(v) if k in _JSON_COLUMNS else v for k, v in fields.items())
    return f"UPDATE {table} SET {sets} WHERE {where}", values + key


def _insert(table: str, row: Mapping[str, Any]) -> _Statement:
    cols = ", ".join(row)
    marks = ", ".join("?" for _ in row)
    values = tuple(_dump(v) if k in _JSON_COLUMNS else v for k, v in row.items())
    return f"INSERT INTO {table} ({cols}) VALUES ({marks})", values



class SqlJournal(ABC):
    """The portable part of :class:`workrun.journal.base.Journal` (see there for each method's contract); a dialect
    subclass supplies the plumbing (see the module doc). ``_lock`` is the dialect's connection lock (an RLock)."""

    _lock: threading.RLock

    _SUMMARY_COLUMNS = "run_id, workflow, workflow_path, status, eval, verify, rerun_of, created_at, ended_at"
    _QUEUE_RANK = ("CASE status WHEN 'failed' THEN 0 WHEN 'blocked' THEN 1 WHEN 'unknown' THEN 2 WHEN 'pending' THEN 3 "
                   "WHEN 'running' THEN 4 WHEN 'succeeded' THEN 5 ELSE 6 END")

    @abstractmethod
    def _tx(self, statements: Iterable[_Statement], fault: str | tuple[str, ...] | None,
            checks: Iterable[_Check] = ()) -> None:
        """Run ``statements`` in one transaction after ``checks`` (table, key, new status, status the caller saw)
        pass on the locked rows; then hit the fault point ``fault``.

        Raises:
            InvalidTransitionError / StaleStatusError: a check refused (nothing written).
            JournalError: the write failed (nothing written).
        """

    def _init_batching(self) -> None:
        """The writes this process batches (issue 14), set up by each dialect's constructor: the held writes
        (:meth:`_hold`) with their fault points and when the oldest was held, and the nodes whose success went in
        with their call's outcome (:meth:`finish_node` skips writing it again)."""
        self._held: list[_Statement] = []
        self._held_points: list[str] = []
        self._held_at = 0.0  # time.monotonic() when the oldest held write was held
        self._nodes_ended_by_call: set[tuple[str, str]] = set()

    def _hold(self, statement: _Statement, point: str) -> None:
        """Keep ``statement`` (a write that precedes nothing outside the journal) for this process's next write
        transaction, which runs it before its own statements and hits ``point`` first after the commit; a
        process killed before then loses only what it held (the node is still ``pending``: it runs again)."""
        with self._lock:
            if not self._held:
                self._held_at = time.monotonic()
            self._held.append(statement)
            self._held_points.append(point)
        self._held_added()

    @abstractmethod
    def _held_added(self) -> None:
        """Called after :meth:`_hold` (outside the lock): a dialect with a background writer wakes it."""

    def _take_held(self) -> tuple[list[_Statement], list[str]]:
        """The held writes and their fault points, for the transaction about to run (call under ``_lock``)."""
        held, points = self._held, self._held_points
        self._held, self._held_points = [], []
        return held, points

    def _give_back_held(self, held: list[_Statement], points: list[str]) -> None:
        """A transaction that took held writes wrote nothing: they go in with the next one (call under
        ``_lock``)."""
        self._held[:0] = held
        self._held_points[:0] = points

    @abstractmethod
    def _query(self, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
        """Run one read; rows as dicts, JSON columns decoded.

        Raises:
            JournalError: the read failed.
        """

    @abstractmethod
    def add_message(self, run_id: str, node_key: str | None, level: str, text: str) -> None:
        """Append a message to a node (or the run when ``node_key`` is None)."""

    @abstractmethod
    def flush_messages(self) -> None:
        """Write the messages and held writes this process holds (a dialect that holds none does nothing)."""

    @abstractmethod
    def change_token(self) -> object | None:
        """A value that changes when another connection commits (None: not available, read every time)."""

    @abstractmethod
    def adopt_operation(self, operation_id: str, *, owner_pid: int, owner_start: str | None,
                        seen_pid: int | None, seen_start: str | None) -> bool:
        """See :meth:`workrun.journal.base.Journal.adopt_operation`."""

    @abstractmethod
    def latest_app_calls(self) -> list[AppCallRow]:
        """The newest operation of each (project, App), with its call count."""

    def _set(self, table: str, key: tuple[Any, ...], fault: str | None, fields: dict[str, Any],
             seen: str | None = None) -> None:
        checks: list[_Check] = [(table, key, fields["status"], seen)] if "status" in fields else []
        self._tx([_update(table, key, fields)], fault, checks)

    def create_run(self, run: RunRow, node_keys: Sequence[str]) -> None:
        """Insert a run (status ``running``) and its nodes (``pending``) in one transaction."""
        stmts = [_insert("runs", run)]
        stmts += [_insert("nodes", {"run_id": run["run_id"], "node_key": k, "position": i, "status": "pending"})
                  for i, k in enumerate(node_keys)]
        self._tx(stmts, "run.created")

    def request_stop(self, run_id: str) -> None:
        """Set ``stop_requested``."""
        self._set("runs", (run_id,), None, {"stop_requested": 1})

    def request_compensation(self, run_id: str, event: EventRow) -> None:
        """Set ``compensate_requested`` and record the event, at once."""
        self._tx([_update("runs", (run_id,), {"compensate_requested": 1}), _insert("events", event)], None)

    def start_node(self, run_id: str, node_key: str, *, at: float) -> None:
        """Mark a pending node ``running``, held for this process's next write (:meth:`_hold`): its first call's
        intent, its end, or a message, whichever comes first. A node's start precedes nothing outside the
        journal, so it needs no transaction of its own (issue 14); the statement only moves a ``pending``
        node (the state machine's ``pending -> running``), so it never undoes a later status."""
        self._hold(("UPDATE nodes SET status = 'running', started_at = ? WHERE run_id = ? AND node_key = ? "
                    "AND status = 'pending'", (at, run_id, node_key)), "node.running")

    def finish_node(self, run_id: str, node_key: str, *, status: str, handled: bool, result: Any,
                    at: float) -> None:
        """Record a node's end. A node whose last call's outcome already wrote its success in one transaction
        (``finish_operation(node_succeeded=…)``, issue 14) is not written again: the engine always says a
        node ended, and skipping the second write is the journal's business."""
        if status == "succeeded" and not handled and (run_id, node_key) in self._nodes_ended_by_call:
            self._nodes_ended_by_call.discard((run_id, node_key))
            return
        self._set("nodes", (run_id, node_key), "node.finished",
                  {"status": status, "handled": int(handled), "result": result, "ended_at": at})

    def end_run(self, run_id: str, status: str, *, at: float, reason: str | None = None,
                compensations: Sequence[CompensationRow] = ()) -> None:
        """End a run, its leftover nodes and plan its compensations in one transaction."""
        self.flush_messages()  # held node starts first: the leftover nodes are read as they are
        stmts: list[_Statement] = []
        checks: list[_Check] = []
        for n in self.nodes(run_id):
            key = (run_id, n["node_key"])
            if n["status"] == "pending":
                stmts.append(_update("nodes", key, {"status": "skipped"}))
                checks.append(("nodes", key, "skipped", "pending"))
            elif n["status"] == "running" and status == "stopped":
                stmts.append(_update("nodes", key, {"status": "stopped", "ended_at": at}))
                checks.append(("nodes", key, "stopped", "running"))
        self._close_tickets(run_id, status, at, stmts, checks)  # a run that ends ends its waiting (R-M7)
        fields: dict[str, Any] = {"status": status, "ended_at": at, "reason": reason}
        stmts.append(_update("runs", (run_id,), fields))
        checks.append(("runs", (run_id,), status, None))
        stmts += [_insert("compensations", r) for r in compensations]
        self._tx(stmts, f"run.{status}", checks)

    def start_operation(self, row: OperationRow) -> None:
        """Record a call's intent (status ``starting``) before its process starts (R-J1); a held node start
        (:meth:`start_node`) goes in with it."""
        self._tx([_insert("operations", row)], "op.intent")

    def operation_running(self, operation_id: str, *, pid: int | None, proc_start: str | None, started_at: float,
                          deadline: float) -> None:
        """Record the call's process (status ``running``)."""
        self._set("operations", (operation_id,), "op.started", {
            "status": "running", "pid": pid, "proc_start": proc_start, "started_at": started_at,
            "deadline": deadline})

    def finish_operation(self, operation_id: str, *, status: str, at: float, failure: str | None = None,
                         error: str | None = None, result: Any = None, exit_code: int | None = None,
                         signal: int | None = None, stdout_tail: str | None = None, stderr_tail: str | None = None,
                         resources: list[JsonObject] | None = None, depends_on: list[str] | None = None,
                         process: OperationRow | None = None, node_succeeded: tuple[str, str] | None = None) -> None:
        """Record a call's outcome (with its process when its ``running`` was never written; with its node's
        success in the same transaction when ``node_succeeded`` = ``(run_id, node_key)``). A secret this
        process knows of, in the error or output tails (an App that printed one), is stored as
        ``{{ env.NAME }}`` (R-X2); the result is data later nodes and the compensation read, kept as it came."""
        error, stdout_tail, stderr_tail = redact_value([error, stdout_tail, stderr_tail], {})
        fields: dict[str, Any] = {"status": status, "failure": failure, "error": error, "result": result,
                                  "ended_at": at, "exit_code": exit_code, "signal": signal,
                                  "stdout_tail": stdout_tail, "stderr_tail": stderr_tail, **(process or {})}
        if resources is not None:
            fields["resources"] = resources
        if depends_on is not None:
            fields["depends_on"] = depends_on
        if node_succeeded is None:
            self._set("operations", (operation_id,), "op.finished", fields)
            return
        if status != "succeeded":
            raise ValueError(f"{operation_id}: its node cannot succeed with a call that {status}")
        node = tuple(node_succeeded)
        self._tx([_update("operations", (operation_id,), fields),
                  _update("nodes", node, {"status": "succeeded", "handled": 0, "result": result, "ended_at": at})],
                 ("op.finished", "node.finished"),
                 [("operations", (operation_id,), status, None), ("nodes", node, "succeeded", None)])
        self._nodes_ended_by_call.add((node[0], node[1]))

    def plan_compensations(self, records: Sequence[CompensationRow]) -> None:
        """Insert compensation records."""
        self._tx([_insert("compensations", r) for r in records], "run.failed")

    def set_compensation_status(self, compensation_id: str, status: str, *, reason: str | None, at: float,
                                held_back_by: list[str] | None = None, seen: str | None = None,
                                clear_schedule: bool = False, accept_code_change: bool = False,
                                event: EventRow | None = None) -> None:
        """Change a compensation's status (optionally conditional, with an operator event)."""
        fields: dict[str, Any] = {"status": status, "reason": reason, "held_back_by": held_back_by,
                                  "updated_at": at}
        if clear_schedule:
            fields["next_attempt_at"] = None
        if accept_code_change:
            fields["accept_code_change"] = 1
        key = (compensation_id,)
        stmts = ([_insert("events", event)] if event is not None else []) + [_update("compensations", key, fields)]
        self._tx(stmts, "comp.status", [("compensations", key, status, seen)])

    def record_event(self, event: EventRow) -> None:
        """Record an operator event that changes no status."""
        self._tx([_insert("events", event)], "comp.status")

    def start_attempt(self, compensation_id: str, number: int, *, trigger: str, call_dir: str, seen: str,
                      at: float) -> None:
        """Record an attempt's intent and mark its compensation running, at once."""
        key = (compensation_id,)
        self._tx([
            _insert("attempts", {"compensation_id": compensation_id, "number": number, "trigger": trigger,
                                 "status": "starting", "call_dir": call_dir, "started_at": at}),
            _update("compensations", key, {"status": "running", "reason": None, "updated_at": at}),
        ], ("attempt.intent", "comp.status"), [("compensations", key, "running", seen)])

    def attempt_running(self, compensation_id: str, number: int, *, pid: int | None, proc_start: str | None,
                        deadline: float) -> None:
        """Record an attempt's process."""
        self._set("attempts", (compensation_id, number), "attempt.started",
                  {"status": "running", "pid": pid, "proc_start": proc_start, "deadline": deadline})

    def finish_attempt(self, compensation_id: str, number: int, *, status: str, failure: str | None,
                       error: str | None, result: Any, at: float, exit_code: int | None = None,
                       signal: int | None = None, stdout_tail: str | None = None, stderr_tail: str | None = None,
                       compensation_status: str, reason: str | None, next_attempt_at: float | None = None,
                       http_status: int | None = None, response_tail: str | None = None,
                       smtp_code: int | None = None, run_data: tuple[str, dict[str, Any]] | None = None) -> None:
        """Record an attempt's outcome and its compensation's status in one transaction (a secret this process
        knows of, in the text shown of it, stored as ``{{ env.NAME }}``, R-X2)."""
        error, stdout_tail, stderr_tail, response_tail, reason = redact_value(
            [error, stdout_tail, stderr_tail, response_tail, reason], {})
        akey, ckey = (compensation_id, number), (compensation_id,)
        attempt = {"status": status, "failure": failure, "error": error, "result": result, "ended_at": at,
                   "exit_code": exit_code, "signal": signal, "stdout_tail": stdout_tail, "stderr_tail": stderr_tail,
                   "http_status": http_status, "response_tail": response_tail}
        if smtp_code is not None:
            attempt["smtp_code"] = smtp_code
        comp: dict[str, Any] = {"status": compensation_status, "reason": reason, "updated_at": at,
                                "next_attempt_at": next_attempt_at, "held_back_by": None}
        if compensation_status == "succeeded":
            comp["result"] = result
        stmts = [_update("attempts", akey, attempt), _update("compensations", ckey, comp)]
        if run_data is not None:  # an update_data attempt: the write and its success are one transaction (R-K4)
            stmts.append(_update("runs", (run_data[0],), {"data": run_data[1]}))
        self._tx(stmts, ("attempt.finished", "comp.status"),
                 [("attempts", akey, status, None), ("compensations", ckey, compensation_status, None)])

    def start_remote_task(self, run_id: str, node_key: str, url: str, *, at: float) -> None:
        """Record ``state = sending`` before a message is sent."""
        row = {"run_id": run_id, "node_key": node_key, "url": url, "task_id": None, "context_id": None,
               "state": "sending", "updated_at": at}
        cols = ", ".join(row)
        marks = ", ".join("?" for _ in row)
        sets = ", ".join(f"{c} = excluded.{c}" for c in row if c not in _KEYS["remote_tasks"])
        self._tx([(f"INSERT INTO remote_tasks ({cols}) VALUES ({marks}) "
                   f"ON CONFLICT (run_id, node_key) DO UPDATE SET {sets}, cancel_status = NULL, "
                   "cancel_answer = NULL, cancel_at = NULL", tuple(row.values()))], "remote.intent")

    def remote_task_state(self, run_id: str, node_key: str, *, state: str, at: float, task_id: str | None = None,
                          context_id: str | None = None) -> None:
        """Record a remote task's state (and ids once known)."""
        self._tx([("UPDATE remote_tasks SET state = ?, task_id = COALESCE(?, task_id), "
                   "context_id = COALESCE(?, context_id), updated_at = ? WHERE run_id = ? AND node_key = ?",
                   (state, task_id, context_id, at, run_id, node_key))], "remote.task")

    def remote_cancel(self, run_id: str, node_key: str, *, status: str, at: float, answer: str | None = None,
                      state: str | None = None) -> None:
        """Record the one cancel of a remote task."""
        self._tx([("UPDATE remote_tasks SET cancel_status = ?, cancel_answer = COALESCE(?, cancel_answer), "
                   "cancel_at = COALESCE(cancel_at, ?), state = COALESCE(?, state), updated_at = ? "
                   "WHERE run_id = ? AND node_key = ?",
                   (status, answer, at, state, at, run_id, node_key))],
                 "remote.cancel" if status == "sending" else None)

    def _one(self, table: str, column: str, given: str, noun: str, field: str) -> Any:
        """The row of ``table`` whose ``column`` is ``given`` or starts with it (a unique prefix).

        Raises:
            NotFoundError: no row, or the prefix matches several (``noun`` names them, ``field`` the argument),
                or ``given`` is empty (a prefix of every id: never "the only one there is").
        """
        if not given:
            raise NotFoundError(f"an empty {noun} id matches nothing", field=field)
        if not given.isascii() or not given.isprintable():  # ids are printable ASCII (an undecodable byte
            raise NotFoundError(f"no {noun} matches {given!r}", field=field)  # cannot even be sent to the database)
        if len(given) > 200:  # no id is that long (and a pattern that long is refused as too complex)
            raise NotFoundError(f"no {noun} matches {given[:40]!r}… ({len(given)} characters)", field=field)
        rows = self._query(f"SELECT * FROM {table} WHERE {column} = ?", (given,)) or \
            self._query(f"SELECT * FROM {table} WHERE {column} LIKE ? || '%' ESCAPE '\\' ORDER BY {column} LIMIT 4",
                        (given.replace("%", "\\%").replace("_", "\\_"),))
        if len(rows) != 1:
            some = ", ".join(r[column] for r in rows[:3]) + (", …" if len(rows) > 3 else "")
            raise NotFoundError(f"no {noun} matches {given!r}" if not rows else
                                f"{given!r} matches several {noun}s ({some})", field=field)
        return rows[0]

    def run(self, run_id: str) -> RunRow:
        """Return one run by exact id or unique prefix.

        Raises:
            NotFoundError: no run, or the prefix matches several.
        """
        return self._one("runs", "run_id", run_id, "run", "RUN")

    def runs(self, limit: int | None = None) -> list[RunRow]:
        """All runs, newest first."""
        sql = "SELECT * FROM runs ORDER BY created_at DESC, rowid DESC"
        return self._query(sql + (" LIMIT ?" if limit else ""), (limit,) if limit else ())

    def runs_with_status(self, *statuses: str) -> list[RunRow]:
        """Runs whose status is one of ``statuses``, oldest first."""
        marks = ",".join("?" for _ in statuses)
        return self._query(f"SELECT * FROM runs WHERE status IN ({marks}) ORDER BY created_at", statuses)

    def runs_with_open_compensation(self) -> list[str]:
        """Ids of runs with a compensation ``pending`` or ``running``, or with succeeded calls whose
        compensation is owed (failed run, or a stopped run an operator asked to compensate) but not planned."""
        # every scheduling command asks this first: per failed run, its own calls (by run id), not every
        # succeeded call in the journal (issue 14). ``status || ''`` keeps the planner on the run's index.
        rows = self._query(
            "SELECT DISTINCT run_id FROM compensations WHERE status IN ('pending', 'running') "
            "UNION SELECT r.run_id FROM runs r WHERE r.eval = 0 "
            "AND (r.status = 'failed' OR (r.status IN ('stopped', 'terminated') AND r.compensate_requested = 1)) "
            "AND EXISTS (SELECT 1 FROM operations o WHERE o.run_id = r.run_id AND (o.status || '') = 'succeeded' "
            "AND NOT EXISTS (SELECT 1 FROM compensations c WHERE c.operation_id = o.operation_id))")
        return [r["run_id"] for r in rows]

    def nodes(self, run_id: str, keys: Sequence[str] | None = None) -> list[NodeRow]:
        """The run's nodes in workflow order (only those named in ``keys`` when given)."""
        if keys is None:
            return self._query("SELECT * FROM nodes WHERE run_id = ? ORDER BY position", (run_id,))
        if not keys:
            return []
        return self._query(f"SELECT * FROM nodes WHERE run_id = ? AND node_key IN ({', '.join('?' * len(keys))}) "
                           "ORDER BY position", (run_id, *keys))

    def node_states(self, run_id: str) -> list[NodeRow]:
        """``{node_key, status, handled}`` of the run's nodes in workflow order (no JSON to decode)."""
        return self._query("SELECT node_key, status, handled FROM nodes WHERE run_id = ? ORDER BY position", (run_id,))

    def stop_requested(self, run_id: str) -> bool:
        """True when ``workrun stop`` flagged the run (exact id; False for an unknown one)."""
        rows = self._query("SELECT stop_requested FROM runs WHERE run_id = ?", (run_id,))
        return bool(rows and rows[0]["stop_requested"])

    def messages(self, run_id: str) -> list[MessageRow]:
        """All messages of a run, oldest first (those this process holds are written first)."""
        self.flush_messages()
        return self._query("SELECT * FROM messages WHERE run_id = ? ORDER BY id", (run_id,))

    def operation(self, operation_id: str) -> OperationRow:
        """One operation by id.

        Raises:
            NotFoundError: unknown id.
        """
        rows = self._query("SELECT * FROM operations WHERE operation_id = ?", (operation_id,))
        if not rows:
            raise NotFoundError(f"no operation {operation_id!r}")
        return rows[0]

    def operations(self, run_id: str, node_key: str | None = None) -> list[OperationRow]:
        """The run's operations (of one node when ``node_key`` is given) in the order they were recorded."""
        if node_key is not None:
            return self._query("SELECT * FROM operations WHERE run_id = ? AND node_key = ? ORDER BY created_at, rowid",
                               (run_id, node_key))
        return self._query("SELECT * FROM operations WHERE run_id = ? ORDER BY created_at, rowid", (run_id,))

    def operation_views(self, run_id: str) -> list[OperationRow]:
        """See :meth:`workrun.journal.base.CallRecords.operation_views`."""
        return self._query(f"SELECT {_VIEW_COLUMNS} FROM operations WHERE run_id = ? ORDER BY created_at, rowid",
                           (run_id,))

    def operation_statuses(self, run_id: str, node_key: str | None = None) -> list[OperationRow]:
        """``{operation_id, node_key, status}`` of the run's operations (of one node), in order (no JSON to decode)."""
        if node_key is None:
            return self._query("SELECT operation_id, node_key, status FROM operations WHERE run_id = ? "
                               "ORDER BY created_at, rowid", (run_id,))
        return self._query("SELECT operation_id, node_key, status FROM operations WHERE run_id = ? AND node_key = ? "
                           "ORDER BY created_at, rowid", (run_id, node_key))

    def operations_in_flight(self, run_id: str | None = None) -> list[OperationRow]:
        """Operations whose outcome is not recorded yet (``starting`` or ``running``)."""
        sql = "SELECT * FROM operations WHERE status IN ('starting', 'running')"
        return self._query(sql + (" AND run_id = ?" if run_id else " AND run_id IS NULL"), (run_id,) if run_id else ())

    def count_operations(self) -> int:
        """Number of operations in the journal."""
        return self._query("SELECT COUNT(*) AS n FROM operations")[0]["n"]

    def compensations(self, run_id: str) -> list[CompensationRow]:
        """The run's compensations in the order they were planned."""
        return self._query("SELECT * FROM compensations WHERE run_id = ? ORDER BY created_at, rowid", (run_id,))

    def compensation(self, compensation_id: str) -> CompensationRow:
        """One compensation by exact id or unique prefix.

        Raises:
            NotFoundError: no compensation, or the prefix matches several.
        """
        return self._one("compensations", "compensation_id", compensation_id, "compensation", "COMPENSATION_ID")

    def _filtered(self, table: str, status: str | None, run_id: str | None,
                  workflow: str | None = None, verify: bool = True) -> tuple[str, tuple[Any, ...]]:
        """The ``WHERE`` clause (empty or starting with a space) and its parameters for rows of ``table`` with
        the given status, run and workflow name (None: any); ``verify`` False: none of a verify run's."""
        where: list[str] = []
        params: list[Any] = []
        if not verify:
            where.append("run_id NOT IN (SELECT run_id FROM runs WHERE verify = ?)")
            params.append(1)
        if status:
            where.append("status = ?")
            params.append(status)
        if run_id:
            where.append("run_id = ?")
            params.append(run_id)
        if workflow:
            where.append("run_id IN (SELECT run_id FROM runs WHERE workflow = ?)")
            params.append(workflow)
        return (" WHERE " + " AND ".join(where) if where else ""), tuple(params)

    def list_compensations(self, status: str | None = None, run_id: str | None = None,
                           workflow: str | None = None, *, verify: bool = True) -> list[CompensationRow]:
        """Compensations filtered by status, run and workflow name, oldest first (``verify`` False: none of the
        runs of ``workrun verify``)."""
        where, params = self._filtered("compensations", status, run_id, workflow, verify)
        return self._query(f"SELECT * FROM compensations{where} ORDER BY created_at, rowid", params)

    def attempts(self, compensation_id: str) -> list[AttemptRow]:
        """Attempts of a compensation, by number."""
        return self._query("SELECT * FROM attempts WHERE compensation_id = ? ORDER BY number", (compensation_id,))

    def attempts_of_run(self, run_id: str) -> list[AttemptRow]:
        """All attempts of a run's compensations."""
        return self._query("SELECT a.* FROM attempts a JOIN compensations c USING (compensation_id) "
                           "WHERE c.run_id = ? ORDER BY a.compensation_id, a.number", (run_id,))

    def attempts_in_flight(self, run_id: str) -> list[AttemptRow]:
        """Attempts of the run whose outcome is not recorded yet."""
        return self._query("SELECT a.* FROM attempts a JOIN compensations c USING (compensation_id) "
                           "WHERE c.run_id = ? AND a.status IN ('starting', 'running')", (run_id,))

    def events(self, compensation_id: str) -> list[EventRow]:
        """Operator events of a compensation, oldest first."""
        return self._query("SELECT * FROM events WHERE compensation_id = ? ORDER BY id", (compensation_id,))

    def remote_tasks(self, run_id: str) -> list[RemoteTaskRow]:
        """Remote A2A tasks of a run."""
        return self._query("SELECT * FROM remote_tasks WHERE run_id = ? ORDER BY updated_at", (run_id,))

    def _close_tickets(self, run_id: str, status: str, at: float, stmts: list[_Statement], checks: list[_Check],
                       skip: str | None = None) -> None:
        """Statements that end a run's waiting: its waiting nodes ``failed`` (``stopped`` when the run is
        stopped), its pending tickets ``terminated`` with an event saying why (R-M7). ``skip``: a ticket
        the caller ends itself."""
        node_status = "stopped" if status == "stopped" else "failed"
        why = {"stopped": "the run was stopped by the user"}.get(status, f"the run ended {status}")
        for t in self.tickets(run_id):
            if t["status"] != "pending" or t["ticket_id"] == skip:
                continue
            stmts += [_update("tickets", (t["ticket_id"],), {"status": "terminated", "updated_at": at}),
                      _insert("ticket_events", {"ticket_id": t["ticket_id"], "run_id": run_id, "at": at,
                                                "actor": "workrun", "action": "terminate", "args": {"reason": why},
                                                "text": why})]
            checks.append(("tickets", (t["ticket_id"],), "terminated", "pending"))
        for n in self.nodes(run_id):
            if n["status"] == "waiting" and not (skip and n["node_key"] == self.ticket(skip)["node_key"]):
                stmts.append(_update("nodes", (run_id, n["node_key"]), {"status": node_status, "ended_at": at}))
                checks.append(("nodes", (run_id, n["node_key"]), node_status, "waiting"))

    def open_ticket(self, ticket: TicketRow, *, node_status: str, handled: bool, at: float,
                    events: Sequence[TicketEventRow], action: TicketActionRow | None = None,
                    notification: NotificationRow | None = None, run_data: JsonObject | None = None,
                    attempt: TicketAttemptRow | None = None) -> None:
        """Open a ticket with everything that comes with it, in one transaction (R-M1, R-M3..R-M5, R-M8)."""
        key = (ticket["run_id"], ticket["node_key"])
        node: dict[str, Any] = {"status": node_status}
        if node_status != "waiting":
            node.update(handled=int(handled), result=None, ended_at=at)
        stmts = [_insert("tickets", ticket), _update("nodes", key, node),
                 *[_insert("ticket_events", e) for e in events]]
        if action is not None:
            stmts.append(_insert("ticket_actions", action))
        if attempt is not None:  # an action done with the ticket (a fallback update_data, R-K4): its one attempt
            stmts.append(_insert("ticket_attempts", attempt))
        if notification is not None:
            stmts.append(_insert("notifications", notification))
        if run_data is not None:  # a fallback_action that is update_data: applied with the ticket (R-K4)
            stmts.append(_update("runs", (ticket["run_id"],), {"data": run_data}))
        self._tx(stmts, "ticket.opened", [("nodes", key, node_status, "running")])

    def pause_run(self, run_id: str, *, reason: str, at: float) -> None:
        """Mark a running run ``waiting`` (R-M1); its pending nodes stay pending."""
        self._tx([_update("runs", (run_id,), {"status": "waiting", "reason": reason})], "run.waiting",
                 [("runs", (run_id,), "waiting", "running")])

    def resume_ticket(self, ticket_id: str, result: Any, event: TicketEventRow, *, at: float) -> None:
        """An operator resumes past a waiting node (R-M6): node ``succeeded`` (handled) with ``result``, ticket
        ``resolved``, run ``running`` again, the event: one transaction."""
        t = self.ticket(ticket_id)
        run = self.run(t["run_id"])
        nkey = (t["run_id"], t["node_key"])
        stmts = [_update("tickets", (ticket_id,), {"status": "resolved", "result": result, "updated_at": at}),
                 _update("nodes", nkey, {"status": "succeeded", "handled": 1, "result": result, "ended_at": at}),
                 _insert("ticket_events", event)]
        checks: list[_Check] = [("tickets", (ticket_id,), "resolved", "pending"),
                                ("nodes", nkey, "succeeded", "waiting")]
        if run["status"] == "waiting":
            stmts.append(_update("runs", (t["run_id"],), {"status": "running", "reason": None}))
            checks.append(("runs", (t["run_id"],), "running", "waiting"))
        self._tx(stmts, "ticket.changed", checks)

    def end_run_by_ticket(self, ticket_id: str, event: TicketEventRow, status: str, *, at: float,
                          reason: str | None, compensations: Sequence[CompensationRow] = ()) -> None:
        """An operator terminates a ticket (R-M6): ticket ``terminated``, its node ``failed``, the run
        ``failed`` (with its compensation records) or ``terminated``, the event: one transaction."""
        t = self.ticket(ticket_id)
        run_id = t["run_id"]
        nkey = (run_id, t["node_key"])
        stmts: list[_Statement] = [_update("tickets", (ticket_id,), {"status": "terminated", "updated_at": at}),
                                   _update("nodes", nkey, {"status": "failed", "ended_at": at}),
                                   _insert("ticket_events", event)]
        checks: list[_Check] = [("tickets", (ticket_id,), "terminated", "pending"),
                                ("nodes", nkey, "failed", "waiting")]
        self.flush_messages()  # held node starts first (as end_run)
        for n in self.nodes(run_id):
            if n["status"] == "pending":
                stmts.append(_update("nodes", (run_id, n["node_key"]), {"status": "skipped"}))
                checks.append(("nodes", (run_id, n["node_key"]), "skipped", "pending"))
        self._close_tickets(run_id, status, at, stmts, checks, skip=ticket_id)
        stmts.append(_update("runs", (run_id,), {"status": status, "ended_at": at, "reason": reason}))
        checks.append(("runs", (run_id,), status, None))
        stmts += [_insert("compensations", r) for r in compensations]
        self._tx(stmts, f"run.{status}", checks)

    def resolve_ticket(self, ticket_id: str, event: TicketEventRow, *, at: float) -> None:
        """Close a pending ticket by hand (R-M6); nothing else changes."""
        self._tx([_update("tickets", (ticket_id,), {"status": "resolved", "updated_at": at}),
                  _insert("ticket_events", event)], "ticket.changed",
                 [("tickets", (ticket_id,), "resolved", "pending")])

    def set_ticket_action(self, ticket_id: str, status: str, *, reason: str | None, at: float, seen: str,
                          event: TicketEventRow | None = None) -> None:
        """Move a ticket's action to ``status`` (operator retry or confirm, or recovery), with its event.

        Raises:
            StaleStatusError: the action is no longer ``seen``; nothing was written.
        """
        stmts = [_update("ticket_actions", (ticket_id,), {"status": status, "reason": reason, "updated_at": at,
                                                          "next_attempt_at": None})]
        if event is not None:
            stmts.append(_insert("ticket_events", event))
        self._tx(stmts, "ticket.changed", [("ticket_actions", (ticket_id,), status, seen)])

    def record_ticket_event(self, event: TicketEventRow) -> None:
        """Add a line to a ticket's history (a note, an attachment; R-M6)."""
        self._tx([_insert("ticket_events", event)], "ticket.changed")

    def start_action_attempt(self, ticket_id: str, number: int, *, trigger: str, seen: str, at: float) -> None:
        """Record an action attempt's intent and mark the action ``running``, in one transaction (R-M3, R-C7).

        Raises:
            StaleStatusError: the action left ``seen`` meanwhile; nothing was written.
        """
        self._tx([_insert("ticket_attempts", {"ticket_id": ticket_id, "number": number, "trigger": trigger,
                                              "status": "starting", "started_at": at}),
                  _update("ticket_actions", (ticket_id,), {"status": "running", "next_attempt_at": None,
                                                           "updated_at": at})],
                 "action.intent", [("ticket_actions", (ticket_id,), "running", seen)])

    def action_sending(self, ticket_id: str, number: int) -> None:
        """Commit that the attempt's request is about to leave (after this, a lost answer is ``unknown``)."""
        self._set("ticket_attempts", (ticket_id, number), "action.sending", {"status": "sending"})

    def finish_action_attempt(self, ticket_id: str, number: int, attempt: TicketAttemptRow,
                              action: TicketActionRow, run_data: tuple[str, JsonObject] | None = None) -> None:
        """Record an attempt's outcome (``attempt``: status, ended_at, http_status, response_tail, failure,
        error) and the action's next state (``action``: status, result, reason, next_attempt_at,
        updated_at), in one transaction; the ticket's ``updated_at`` moves with it."""
        checks: list[_Check] = [("ticket_attempts", (ticket_id, number), attempt["status"], None),
                                ("ticket_actions", (ticket_id,), action["status"], "running")]
        statements = [_update("ticket_attempts", (ticket_id, number), attempt),
                      _update("ticket_actions", (ticket_id,), action)]
        if action.get("updated_at") is not None:
            statements.append(_update("tickets", (ticket_id,), {"updated_at": action["updated_at"]}))
        if run_data is not None:  # an update_data action: the write and its success are one transaction (R-K4)
            statements.append(_update("runs", (run_data[0],), {"data": run_data[1]}))
        self._tx(statements, "action.finished", checks)

    def add_notification(self, row: NotificationRow) -> bool:
        """Record a notification's intent (``pending``) unless its subject was notified already (R-M8).

        Returns:
            True when written; False when that subject has a notification (never twice).
        """
        with self._lock:
            if self._query("SELECT 1 FROM notifications WHERE subject = ?", (row["subject"],)):
                return False
            sql, params = _insert("notifications", row)
            self._tx([(sql + " ON CONFLICT (subject) DO NOTHING", params)], "notify.intent")
        return True

    def notification_sending(self, notification_id: str, *, at: float) -> None:
        """Commit that a notification is about to leave (after this it is never sent again)."""
        self._set("notifications", (notification_id,), "notify.sending", {"status": "sending", "updated_at": at},
                  seen="pending")

    def finish_notification(self, notification_id: str, status: str, *, at: float, http_status: int | None,
                            error: str | None, event: TicketEventRow | None = None) -> None:
        """Record a notification's outcome (``sent`` | ``failed`` | ``unknown``) and, when it did not go
        out, the event on its ticket, in one transaction (R-M8)."""
        stmts = [_update("notifications", (notification_id,), {"status": status, "http_status": http_status,
                                                                "error": error, "updated_at": at})]
        if event is not None:
            stmts.append(_insert("ticket_events", event))
        self._tx(stmts, "notify.finished", [("notifications", (notification_id,), status, None)])

    def ticket(self, ticket_id: str) -> TicketRow:
        """One ticket by exact id or unique prefix.

        Raises:
            NotFoundError: no ticket, or the prefix matches several.
        """
        return self._one("tickets", "ticket_id", ticket_id, "ticket", "TICKET")

    def tickets(self, run_id: str) -> list[TicketRow]:
        """The run's tickets, oldest first."""
        return self._query("SELECT * FROM tickets WHERE run_id = ? ORDER BY created_at, rowid", (run_id,))

    def list_tickets(self, status: str | None = None, run_id: str | None = None,
                     workflow: str | None = None) -> list[TicketRow]:
        """Tickets filtered by status, run and workflow name, oldest first."""
        where, params = self._filtered("tickets", status, run_id, workflow)
        return self._query(f"SELECT * FROM tickets{where} ORDER BY created_at, rowid", params)

    def ticket_action(self, ticket_id: str) -> TicketActionRow | None:
        """The ticket's action job, or None when its policy registered none."""
        rows = self._query("SELECT * FROM ticket_actions WHERE ticket_id = ?", (ticket_id,))
        return rows[0] if rows else None

    def ticket_attempts(self, ticket_id: str) -> list[TicketAttemptRow]:
        """Attempts of a ticket's action, by number."""
        return self._query("SELECT * FROM ticket_attempts WHERE ticket_id = ? ORDER BY number", (ticket_id,))

    def ticket_events(self, ticket_id: str) -> list[TicketEventRow]:
        """A ticket's history (opening, operator actions, notes, notification outcomes), oldest first."""
        return self._query("SELECT * FROM ticket_events WHERE ticket_id = ? ORDER BY id", (ticket_id,))

    def open_ticket_actions(self, run_id: str | None = None) -> list[TicketActionRow]:
        """Action jobs still to run (``pending``) or left ``running`` by a runner that died, oldest first."""
        sql = "SELECT * FROM ticket_actions WHERE status IN ('pending', 'running')"
        if run_id:
            return self._query(sql + " AND run_id = ? ORDER BY created_at", (run_id,))
        return self._query(sql + " ORDER BY created_at")

    def runs_with_open_tickets_work(self) -> list[str]:
        """Ids of runs with an action job or a notification still owed, or a dead letter not yet notified
        in a run whose workflow declares ``[notify]`` (R-M7, R-M8)."""
        owed = self._query(
            "SELECT run_id FROM ticket_actions WHERE status IN ('pending', 'running') "
            "UNION SELECT run_id FROM notifications WHERE status IN ('pending', 'sending')")
        # a dead letter whose notification intent was never written (the runner died in between)
        unsent = self._query(
            "SELECT c.run_id FROM compensations c WHERE c.status = 'failed' AND NOT EXISTS (SELECT 1 FROM "
            "notifications n WHERE n.subject = 'compensation:' || c.compensation_id || ':' || (SELECT COUNT(*) "
            "FROM attempts a WHERE a.compensation_id = c.compensation_id)) "
            "UNION SELECT x.run_id FROM ticket_actions x WHERE x.status = 'failed' AND EXISTS (SELECT 1 FROM "
            "ticket_attempts a WHERE a.ticket_id = x.ticket_id) AND NOT EXISTS (SELECT 1 FROM notifications n "
            "WHERE n.subject = 'action:' || x.ticket_id || ':' || (SELECT COUNT(*) FROM ticket_attempts a "
            "WHERE a.ticket_id = x.ticket_id))")
        ids = [r["run_id"] for r in owed]
        for r in unsent:
            if r["run_id"] not in ids and (self.run(r["run_id"])["spec"] or {}).get("notify"):
                ids.append(r["run_id"])
        return ids

    def notifications(self, run_id: str | None = None, statuses: tuple[str, ...] = ()) -> list[NotificationRow]:
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

    @staticmethod
    def _runs_where(status: str | None, workflow: str | None, verify: bool | None = None, *,
                    text: str | None = None, since: float | None = None,
                    until: float | None = None) -> tuple[str, tuple[Any, ...]]:
        where: list[str] = []
        params: list[Any] = []
        if text and len(text) > 1000:  # longer than any id or name: matches nothing (never a pattern too complex)
            where.append("1 = 0")
        elif text:  # a run-id prefix or a workflow-name substring (R-D1); LIKE's wildcards taken literally
            like = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            where.append("(run_id LIKE ? ESCAPE '\\' OR workflow LIKE ? ESCAPE '\\')")
            params += [like + "%", "%" + like + "%"]
        if since is not None:
            where.append("created_at >= ?")
            params.append(since)
        if until is not None:
            where.append("created_at < ?")
            params.append(until)
        if verify is not None:
            where.append("verify = ?")
            params.append(int(verify))
        if status:
            where.append("status = ?")
            params.append(status)
        if workflow:
            where.append("workflow = ?")
            params.append(workflow)
        return (" WHERE " + " AND ".join(where)) if where else "", tuple(params)

    def run_summaries(self, *, status: str | None = None, workflow: str | None = None, limit: int | None = None,
                      offset: int = 0, verify: bool | None = None, text: str | None = None,
                      since: float | None = None, until: float | None = None, sort: str = "started",
                      descending: bool = True) -> list[RunRow]:
        """Runs (summary columns only), newest first, filtered by exact status and workflow name.

        Args:
            limit: at most this many rows (None: all); offset: rows to skip (pagination).
            verify: only verify runs (True), none of them (False), or both (None).
            text: a run-id prefix or a workflow-name substring; since/until: ``created_at`` bounds, epoch
                seconds (since inclusive, until exclusive) (R-D1).
            sort: ``started`` or ``duration`` (a running run's lasts until now); descending: largest first.
        """
        where, params = self._runs_where(status, workflow, verify, text=text, since=since, until=until)
        way = "DESC" if descending else "ASC"
        key = f"COALESCE(ended_at, {float(time.time())}) - created_at" if sort == "duration" else "created_at"
        sql = f"SELECT {self._SUMMARY_COLUMNS} FROM runs{where} ORDER BY {key} {way}, created_at {way}, run_id {way}"
        if limit is not None or offset:
            sql += " LIMIT ? OFFSET ?"
            params += (limit if limit is not None else 2**62, offset)
        return self._query(sql, params)

    def count_runs(self, *, status: str | None = None, workflow: str | None = None, text: str | None = None,
                   since: float | None = None, until: float | None = None, verify: bool | None = None) -> int:
        """Number of runs matching the same filters as :meth:`run_summaries`."""
        where, params = self._runs_where(status, workflow, verify, text=text, since=since, until=until)
        return self._query(f"SELECT COUNT(*) AS n FROM runs{where}", params)[0]["n"]

    def workflow_names(self) -> list[str]:
        """Distinct workflow names of all runs, sorted."""
        return [r["workflow"] for r in self._query("SELECT DISTINCT workflow FROM runs ORDER BY workflow")]

    def compensation_counts(self, run_ids: Sequence[str] | None = None, *,
                            verify: bool = True) -> dict[str, dict[str, int]]:
        """``{run_id: {status: count}}`` of compensations, for the given runs (None: every run, those of
        ``workrun verify`` only with ``verify``)."""
        if run_ids is None:
            where, params = self._filtered("compensations", None, None, None, verify)
            rows = self._query(f"SELECT run_id, status, COUNT(*) AS n FROM compensations{where} "
                               "GROUP BY run_id, status", params)
        elif not run_ids:
            return {}
        else:
            marks = ",".join("?" for _ in run_ids)
            rows = self._query(f"SELECT run_id, status, COUNT(*) AS n FROM compensations WHERE run_id IN ({marks}) "
                               "GROUP BY run_id, status", tuple(run_ids))
        out: dict[str, dict[str, int]] = {}
        for r in rows:
            out.setdefault(r["run_id"], {})[r["status"]] = r["n"]
        return out

    def events_of_run(self, run_id: str) -> list[EventRow]:
        """Every operator event of a run (run-level and per compensation), oldest first."""
        return self._query("SELECT * FROM events WHERE run_id = ? ORDER BY id", (run_id,))

    def compensation_queue(self, *, status: str | None = None, run_id: str | None = None,
                           workflow: str | None = None, limit: int = 100, offset: int = 0,
                           verify: bool = True) -> tuple[list[CompensationRow], int]:
        """The operator's queue: compensations failed, blocked, unknown, pending first (then running, done),
        oldest first within a status, filtered by status, run and workflow name; at most ``limit`` rows from
        ``offset``, and how many match in all (R-D1); ``verify`` False: none of the runs of ``workrun verify``."""
        where, params = self._filtered("compensations", status, run_id, workflow, verify)
        rows = self._query(f"SELECT * FROM compensations{where} ORDER BY {self._QUEUE_RANK}, created_at, rowid "
                           "LIMIT ? OFFSET ?", (*params, limit, offset))
        return rows, self._query(f"SELECT COUNT(*) AS n FROM compensations{where}", params)[0]["n"]

