"""The PostgreSQL journal (R-S1, R-S2, R-S4): the same journal on a database many workers share.

Implements :class:`workrun.journal.base.Journal`. Selected by
``WORKRUN_JOURNAL=postgresql://…`` (see :func:`workrun.journal.open_journal`);
needs psycopg 3 (the ``postgres`` extra: ``.venv/bin/pip install -e '.[postgres]'`` from a clone).

What it shares with the SQLite journal, and how:

- **Statements.** The journal's intent-named methods are written once, in
  portable SQL with ``?`` placeholders (:class:`workrun.journal.portable.SqlJournal`,
  which the SQLite journal also extends; neither dialect inherits the other);
  this class runs each statement through :func:`to_pg` (``?`` -> ``%s``). Only
  what is not portable is written here: connecting, transactions, migrations,
  and the worker claims and snapshot store that only a shared journal has
  (:class:`workrun.journal.base.SharedJournal`).
- **Schema.** One migration list (``migrations.py``) for both backends, one
  version number; :func:`to_postgres` translates the DDL (``REAL`` -> ``DOUBLE
  PRECISION``, ``BLOB`` -> ``BYTEA``, ``AUTOINCREMENT`` -> ``BIGSERIAL``) and gives
  each table a ``rowid BIGSERIAL`` so "insertion order" means the same on both.
  Migrating takes an advisory lock: several workers may start at once.
- **State machine.** Every status write is checked against
  :mod:`workrun.core.states` inside its transaction, after ``SELECT … FOR UPDATE``
  on the row, so two workers can never both move a row from the same status.

Claims (R-S2), after DBOS's queue (``SELECT … FOR UPDATE SKIP LOCKED``, an
executor id per claimant): the unit of claim is a **run** — one scheduler per
run at a time, so hold-back and reverse order (R-C3, R-C4) are decided by one
planner — and a claim is a row of ``run_claims`` with the worker's id and a
lease (``lease_until``, epoch seconds) that the worker's heartbeat renews. A
claim whose lease has passed may be taken over; the taker then settles the
run's in-flight calls by R-R3 before doing anything else.

Under the run claim, each App process the scheduler starts is a row of
``dispatched_calls`` (``queued`` -> ``claimed`` -> ``done``, or ``fenced``) that
executors claim the same way (:meth:`PostgresJournal.claim_calls`); every write
on it is conditional on the status and claimant it expects, so a call is
claimed once, fenced calls never start, and an executor that lost its claim
stores nothing (see :mod:`workrun.cluster.dispatch`).

Two things hold for every statement, in one place (:meth:`PostgresJournal._attempt`):

- **Reconnect (R-F1).** A lost connection (server restarted, backend terminated,
  network) is reopened with backoff (0.1 s doubling, at most 5 s) for up to
  ``WORKRUN_DB_RETRY`` seconds, then the statement or transaction is run again. A
  write transaction first reads its ``txid_current()``; when the connection is
  lost after its last statement (during ``COMMIT``, outcome unknown) the new
  connection asks ``txid_status``: a committed write is not run again, an
  aborted one is. Each reconnect is said on stderr ("reconnected", or the JSON
  log event ``db_reconnected``) and counted (``workrun_db_reconnects_total``).
- **Fencing (R-F2).** Each run claim has an ``epoch`` that grows with every
  claim. A scheduler drives a run inside :meth:`PostgresJournal.fenced`; every
  write transaction on that journal then first locks the claim row (``FOR KEY
  SHARE``: a takeover's ``FOR UPDATE`` waits for it, and it for the takeover) and
  checks that the epoch is still its own; if not, nothing is written and
  :class:`~workrun.core.errors.ClaimLostError` stops the scheduler.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from functools import lru_cache
from typing import Any, TypeVar, cast

from workrun.core import faults, logs, metrics, settings
from workrun.core.errors import ClaimLostError, DatabaseUnreachableError, JournalError, JournalVersionError
from workrun.core.rows import (
    AppCallRow,
    DispatchedCallRow,
    JsonObject,
    RunClaimRow,
)
from workrun.core.states import COMPENSATION_DONE
from workrun.journal.migrations import MIGRATIONS
from workrun.journal.portable import _JSON_COLUMNS, _KEYS, SqlJournal, _check_status, _insert, _status_query, _update

__all__ = ["PostgresJournal", "to_pg", "to_postgres"]

_MIGRATION_LOCK = 0x776F726B72756E  # advisory lock key ("workrun"): one migrator at a time
_GC_LOCK = 0x776F726B72756E67  # 'workrung': one `workrun gc` at a time on a database (R-F3)
_SNAPSHOT_LOCK = 0x776F726B72756E73  # 'workruns': a gc's prune excludes storing a snapshot (shared) meanwhile
# the snapshots an unfinished run or compensation may still need (as workrun.runner.snapshots reads them)
_NEEDED_SNAPSHOTS = (
    "SELECT DISTINCT o.snapshot FROM operations o JOIN runs r ON r.run_id = o.run_id "
    "LEFT JOIN compensations c ON c.operation_id = o.operation_id WHERE o.snapshot IS NOT NULL AND ("
    "r.status = ANY(%(unfinished)s) "
    "OR (r.status = ANY(%(ended)s) AND c.operation_id IS NULL AND o.status = 'succeeded' AND r.eval = 0) "
    "OR (c.operation_id IS NOT NULL AND NOT (c.status = ANY(%(done)s))))")
_BACKOFF_FIRST, _BACKOFF_MAX = 0.1, 5.0  # seconds between reconnect tries: 0.1 s doubling, at most 5 s (R-F1)
_T = TypeVar("_T")


class _Refused(Exception):
    """Raised inside a write transaction's body to roll it back and answer "not written" (no error)."""


@lru_cache(maxsize=512)
def to_pg(sql: str) -> str:
    """Translate a portable statement with ``?`` placeholders to psycopg's ``%s`` style."""
    return sql.replace("%", "%%").replace("?", "%s")


def to_postgres(ddl: str) -> str:
    """Translate one migration statement from SQLite's dialect to PostgreSQL's (see module doc)."""
    out = re.sub(r"\bINTEGER PRIMARY KEY AUTOINCREMENT\b", "BIGSERIAL PRIMARY KEY", ddl)
    out = re.sub(r"\bREAL\b", "DOUBLE PRECISION", out)
    out = re.sub(r"\bBLOB\b", "BYTEA", out)
    out = re.sub(r"\bCREATE TABLE (\w+) \(", r"CREATE TABLE \1 (rowid BIGSERIAL, ", out)
    return out


def _row_factory(cursor: Any) -> Any:
    names = [c.name for c in cursor.description] if cursor.description else []

    def make(values: Iterable[Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, value in zip(names, values, strict=True):
            if name == "rowid":
                continue
            if name in _JSON_COLUMNS and isinstance(value, str):
                value = json.loads(value)
            out[name] = value
        return out

    return make


class PostgresJournal(SqlJournal):
    """The journal on PostgreSQL (see module doc). Thread-safe: one connection, one lock.

    Args:
        url: a ``postgresql://`` (or ``postgres://``) connection URL.

    Raises (from the constructor):
        ConfigError: psycopg is not installed (raised by :func:`workrun.journal.open_journal`).
        JournalVersionError: the database's schema is newer than this Workrun.
        JournalError: the database cannot be reached or migrated.
    """

    supports_workers = True
    _reached = False  # set once this process has connected: a later failed connect waits for the database (R-F1)
    _gave_up = ""  # why a connection of this process stopped reconnecting: the others stop at once too

    def __init__(self, url: str) -> None:  # noqa: D107 - documented on the class
        import psycopg

        self._psycopg = psycopg
        self.url = url
        self.path = _redact(url)  # for messages: never the password (a str: a Path would fold the "//")
        self._lock = threading.RLock()
        self._init_batching()
        self._pg: Any = None  # psycopg.Connection
        self._fence: tuple[str, str, int] | None = None  # (run_id, worker_id, epoch) while driving a run (R-F2)
        self._retry = settings.current().db_retry  # seconds of reconnecting before giving up (R-F1)
        self._listening = False
        give_up: float | None = None
        while True:
            try:
                self._pg = self._connect()
                PostgresJournal._reached = True
                self._migrate()
                break
            except psycopg.Error as exc:
                # a first connection fails at once (a wrong URL says so now); a process that has reached the
                # database before waits for it while it is away (restarting), as any statement would (R-F1)
                if not (PostgresJournal._reached and self._lost(exc)):
                    raise JournalError(f"cannot open the journal: {_first_line(exc)}", file=_redact(url)) from None
                if give_up is None:
                    give_up = time.monotonic() + self._retry
                self._reconnect(give_up, exc, say=False)
                with contextlib.suppress(Exception):
                    self._pg.close()

    # -- plumbing: one place for reconnects (R-F1) and fencing (R-F2) -------------

    def _connect(self) -> Any:
        """A connection whose transaction the server ends when it sits idle inside it longer than a claim's lease
        (at least 5 s): a process frozen mid-transaction (SIGSTOP, a swapped-out VM) cannot hold the claim row's
        lock, and with it every takeover, for longer than its claim lasts anyway (R-F2). Its transaction is then
        rolled back and, when the process runs again, retried on a new connection, where the fence refuses it."""
        idle_ms = int(max(5.0, settings.current().lease) * 1000)
        given = self._psycopg.conninfo.conninfo_to_dict(self.url).get("options") or ""
        return self._psycopg.connect(self.url, autocommit=True, row_factory=_row_factory, connect_timeout=10,
                                     options=f"{given} -c idle_in_transaction_session_timeout={idle_ms}".strip())

    @contextlib.contextmanager
    def fenced(self, run_id: str, worker_id: str, epoch: int) -> Iterator[None]:
        """While inside, every write transaction on this journal is conditional on ``worker_id`` still holding
        ``run_id``'s claim at ``epoch`` (R-F2); a refused one raises :class:`~workrun.core.errors.ClaimLostError` and
        writes nothing. Use one journal per driven run (each scheduler has its own)."""
        before = self._fence
        self._fence = (run_id, worker_id, int(epoch))
        try:
            yield
        finally:
            self._fence = before

    def _lost(self, exc: BaseException) -> bool:
        """True when ``exc`` means the connection is gone (not a refused statement): also when the server ended the
        session itself (an idle-in-transaction timeout, an administrator's shutdown), which psycopg raises as the
        error the server named, with the connection broken."""
        pg = self._pg
        gone = pg is None or pg.closed or pg.broken
        return gone and isinstance(exc, (self._psycopg.OperationalError,  # an administrator's shutdown is one
                                         self._psycopg.errors.IdleInTransactionSessionTimeout))

    def _reconnect(self, give_up: float, exc: BaseException, *, say: bool = True) -> None:
        """Reopen the connection with backoff until ``give_up`` (monotonic seconds); say so once done (R-F1).

        Once any connection of this process has given up, every other gives up at once (the process is ending:
        its drain must not wait another ``WORKRUN_DB_RETRY``).

        Raises:
            DatabaseUnreachableError: not reconnected within ``WORKRUN_DB_RETRY`` seconds (the process exits 1).
        """
        psycopg = self._psycopg
        began, delay, tries, last = time.monotonic(), _BACKOFF_FIRST, 0, _first_line(exc)
        with contextlib.suppress(Exception):
            self._pg.close()
        while True:
            if PostgresJournal._gave_up:
                raise self._unreachable(PostgresJournal._gave_up)
            tries += 1
            try:
                self._pg = self._connect()
                break
            except psycopg.Error as again:
                last = _first_line(again)
            if time.monotonic() + delay > give_up:
                PostgresJournal._gave_up = last
                raise self._unreachable(last)
            time.sleep(delay)
            delay = min(delay * 2, _BACKOFF_MAX)
        self._listening = False
        if not say:
            return
        metrics.count_reconnect()
        took = time.monotonic() - began
        text = (f"reconnected to the journal's database after {tries} attempt(s) in {took:.1f} s "
                f"(the connection was lost: {_first_line(exc)})")
        logs.say("db_reconnected", "warning", text)

    def _unreachable(self, last: str) -> DatabaseUnreachableError:
        return DatabaseUnreachableError(f"lost the connection to the journal's database and could not reconnect "
                                        f"within WORKRUN_DB_RETRY={self._retry:g} s: {last}", file=self.path)

    def _attempt(self, body: Callable[[Any], _T], *, write: bool, unfenced: bool = False) -> _T:
        """Run ``body(connection)`` under the lock — in one transaction when ``write`` — reconnecting and running it
        again when the connection is lost (R-F1); a write is first fenced by the run claim when :meth:`fenced`.

        A write whose connection was lost after its body ran (its ``COMMIT`` outcome unknown) is settled by
        ``txid_status`` on the new connection: committed -> ``body``'s result is returned, never run again.
        ``unfenced``: a write that is not the driven run's (taking a claim).

        Raises:
            ClaimLostError: fenced, and another worker claimed the run since (nothing written).
            JournalError: a statement failed, or the connection could not be reopened in time.
            whatever ``body`` raises (the transaction is rolled back).
        """
        psycopg = self._psycopg
        give_up: float | None = None
        with self._lock:
            while True:
                txid: int | None = None
                ran, result = False, None
                try:
                    if not write:
                        return body(self._pg)
                    with self._pg.transaction():
                        fence = None if unfenced else self._fence
                        if fence is None:
                            txid = self._pg.execute("SELECT txid_current() AS tx").fetchone()["tx"]
                        else:
                            row = self._pg.execute(
                                "SELECT txid_current() AS tx, (SELECT epoch FROM run_claims WHERE run_id = %s "
                                "AND worker_id = %s FOR KEY SHARE) AS epoch", fence[:2]).fetchone()
                            txid = row["tx"]
                            if row["epoch"] != fence[2]:
                                raise ClaimLostError(fence[0])
                        result = body(self._pg)
                        ran = True
                    return result
                except psycopg.Error as exc:
                    if not self._lost(exc):
                        raise
                    if give_up is None:
                        give_up = time.monotonic() + self._retry
                    self._reconnect(give_up, exc)
                    if ran and txid is not None and self._committed(txid, give_up):
                        return result  # type: ignore[return-value]  # the body ran and its COMMIT landed

    def _committed(self, txid: int, give_up: float) -> bool:
        """Whether a transaction whose ``COMMIT`` outcome is unknown committed (``txid_status``), after a reconnect."""
        while True:
            try:
                status = self._pg.execute("SELECT txid_status(%s) AS s", (txid,)).fetchone()["s"]
            except self._psycopg.Error as exc:
                if not self._lost(exc):
                    raise
                self._reconnect(give_up, exc)
                continue
            if status != "in progress":  # the old backend has not noticed yet: wait for its abort
                return bool(status == "committed")
            time.sleep(0.05)

    def _version(self) -> int:
        self._pg.execute("CREATE TABLE IF NOT EXISTS workrun_schema (version INTEGER NOT NULL)")
        row = self._pg.execute("SELECT version FROM workrun_schema").fetchone()
        return int(row["version"]) if row else 0

    def _migrate(self) -> None:
        with self._lock:
            version = self._version_quiet()
            if version is not None and version > len(MIGRATIONS):
                raise self._too_new(version)
            if version == len(MIGRATIONS):
                return
            with self._pg.transaction():
                self._pg.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
                version = self._version()  # re-read under the lock: another worker may have migrated
                if version > len(MIGRATIONS):
                    raise self._too_new(version)
                for number in range(version, len(MIGRATIONS)):
                    for statement in MIGRATIONS[number].split(";"):
                        if statement.strip():
                            self._pg.execute(to_postgres(statement))
                self._pg.execute("DELETE FROM workrun_schema")
                self._pg.execute("INSERT INTO workrun_schema (version) VALUES (%s)", (len(MIGRATIONS),))

    def _version_quiet(self) -> int | None:
        row = self._pg.execute("SELECT to_regclass('workrun_schema') AS t").fetchone()
        if row["t"] is None:
            return 0
        got = self._pg.execute("SELECT version FROM workrun_schema").fetchone()
        return int(got["version"]) if got else 0

    def _too_new(self, version: int) -> JournalVersionError:
        return JournalVersionError(f"journal schema version {version} is newer than this Workrun knows "
                                   f"({len(MIGRATIONS)}); upgrade Workrun", file=str(self.path))

    @property
    def schema_version(self) -> int:
        """The applied schema version (number of migrations)."""
        with self._lock:
            return self._version_quiet() or 0

    def _tx(self, statements: Iterable[tuple[str, tuple[Any, ...]]], fault: str | tuple[str, ...] | None,
            checks: Iterable[tuple[str, tuple[Any, ...], str, str | None]] = ()) -> None:
        """One transaction: the state-machine checks on ``SELECT … FOR UPDATE``-locked rows, then the
        statements; then the fault point (as :meth:`SqliteJournal._tx`)."""
        statements, checks = list(statements), list(checks)
        with self._lock:
            held, points = self._take_held()

        def body(pg: Any) -> None:
            for sql, params in held:  # held writes (node starts) first: this write may depend on them
                pg.execute(to_pg(sql), _flags(params))
            for table, key, new, seen in checks:  # the state machine, on the locked row
                row = pg.execute(_status_query(table, "%s") + " FOR UPDATE", key).fetchone()
                _check_status(table, key, row["status"] if row else None, new, seen, self.path)
            for sql, params in statements:
                pg.execute(to_pg(sql), _flags(params))

        try:
            self._attempt(body, write=True)
        except BaseException as exc:
            with self._lock:  # nothing was written: they go in with the next write
                self._give_back_held(held, points)
            if isinstance(exc, self._psycopg.Error):
                raise JournalError(f"journal write failed: {_first_line(exc)}; nothing after this point was "
                                   "recorded. Fix the cause, then `workrun resume`", file=str(self.path)) from None
            raise
        faults.hit_all(tuple(points))
        faults.hit_all(fault)

    def _held_added(self) -> None:
        """Nothing to wake: messages are written at once here, so the engine's "running" message right after a
        node's start carries it, and readers on other machines see it as soon."""

    def _query(self, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
        try:
            return self._attempt(lambda pg: pg.execute(to_pg(sql), _flags(params)).fetchall(), write=False)
        except self._psycopg.Error as exc:
            raise JournalError(f"journal read failed: {_first_line(exc)}", file=str(self.path)) from None
        except ValueError as exc:  # a JSON column that does not hold JSON (see _row_factory)
            raise JournalError(f"journal read failed: a column does not hold JSON ({exc}); restore a backup "
                               "or repair that row", file=str(self.path)) from None

    def _exec(self, sql: str, params: dict[str, Any] | tuple[Any, ...]) -> list[dict[str, Any]]:
        """Run one native statement (``%s`` / ``%(name)s``) in its own transaction; return its rows."""
        def body(pg: Any) -> list[dict[str, Any]]:
            cur = pg.execute(sql, params)
            return cur.fetchall() if cur.description else []

        try:
            return self._attempt(body, write=True)
        except self._psycopg.Error as exc:
            raise JournalError(f"journal write failed: {_first_line(exc)}", file=str(self.path)) from None

    # -- the few inherited statements that are not portable -----------------

    def adopt_operation(self, operation_id: str, *, owner_pid: int, owner_start: str | None,
                        seen_pid: int | None, seen_start: str | None) -> bool:
        """See :meth:`workrun.journal.base.Journal.adopt_operation` (``IS NOT DISTINCT FROM`` for SQLite's ``IS``)."""
        rows = self._exec("UPDATE operations SET owner_pid = %s, owner_start = %s WHERE operation_id = %s "
                          "AND status IN ('starting', 'running') AND owner_pid IS NOT DISTINCT FROM %s "
                          "AND owner_start IS NOT DISTINCT FROM %s RETURNING operation_id",
                          (owner_pid, owner_start, operation_id, seen_pid, seen_start))
        return len(rows) == 1

    def change_token(self) -> object | None:
        """None: PostgreSQL has no cheap "another session committed" counter, so the scheduler reads every
        node's state at every look (as it did before issue 14's shortcut)."""
        return None

    def latest_app_calls(self) -> list[AppCallRow]:
        """As :meth:`SqliteJournal.latest_app_calls` (``DISTINCT ON`` for SQLite's bare columns with ``MAX``)."""
        return self._query(
            "SELECT DISTINCT ON (o.project, o.app) o.project, o.app, o.kind, o.config, o.fingerprint, "
            "o.fingerprint_files, o.created_at, COUNT(*) OVER (PARTITION BY o.project, o.app) AS calls "
            "FROM operations o ORDER BY o.project, o.app, o.created_at DESC, o.rowid DESC")

    def write_back(self) -> None:
        """Nothing to settle: the server keeps its own files (see :meth:`workrun.journal.base.Journal.write_back`)."""

    def close(self) -> None:
        """Close the connection."""
        with self._lock:
            self._pg.close()

    def flush_messages(self) -> None:
        """Write the node starts held for the next write (:meth:`_hold`), now; messages are written at once here
        (see :meth:`add_message`)."""
        with self._lock:
            if self._held:
                self._tx([], None)

    def add_message(self, run_id: str, node_key: str | None, level: str, text: str) -> None:
        """Append a message at once: a shared journal's readers (other workers, dashboards) see it now."""
        self._tx([_insert("messages", {"run_id": run_id, "node_key": node_key, "at": time.time(),
                                       "level": level, "text": text})], None)

    # -- workers and run claims (R-S2) ---------------------------------------

    def register_worker(self, worker_id: str, host: str, pid: int, lease: float, now: float) -> None:
        """Record a worker (its id, host and pid) before it claims anything."""
        self._exec("INSERT INTO workers (worker_id, host, pid, lease, started_at, heartbeat_at) "
                   "VALUES (%s, %s, %s, %s, %s, %s)", (worker_id, host, pid, lease, now, now))

    def worker(self, worker_id: str) -> dict[str, Any] | None:
        """One worker's row, or None."""
        rows = self._query("SELECT * FROM workers WHERE worker_id = ?", (worker_id,))
        return rows[0] if rows else None

    def workers(self) -> list[dict[str, Any]]:
        """All workers ever registered, oldest first."""
        return self._query("SELECT * FROM workers ORDER BY started_at")

    def heartbeat(self, worker_id: str, now: float, lease: float, run_ids: Iterable[str]) -> set[str]:
        """Renew the worker's heartbeat and the leases of ``run_ids`` it holds; return those still its own.

        A run missing from the answer was taken over by another worker (its lease had passed): the
        worker lost it. A late renewal of a claim nobody took is still a renewal.
        """
        with self._lock:
            self._exec("UPDATE workers SET heartbeat_at = %s WHERE worker_id = %s", (now, worker_id))
            rows = self._exec("UPDATE run_claims SET lease_until = %s WHERE worker_id = %s AND run_id = ANY(%s) "
                              "RETURNING run_id", (now + lease, worker_id, list(run_ids)))
        return {r["run_id"] for r in rows}

    def worker_stopped(self, worker_id: str, now: float) -> None:
        """Mark a worker gone (a clean exit) and free its claims at once."""
        with self._lock:
            self._exec("UPDATE workers SET stopped_at = %s WHERE worker_id = %s", (now, worker_id))
            self._exec("UPDATE run_claims SET lease_until = %s, claimed_at = %s WHERE worker_id = %s "
                       "AND lease_until > %s", (now, now, worker_id, now))
            self._exec("UPDATE dispatched_calls SET lease_until = %s WHERE worker_id = %s AND status = 'claimed' "
                       "AND lease_until > %s", (now, worker_id, now))

    _NEEDS_WORK = """(
        r.status = 'running'
        OR EXISTS (SELECT 1 FROM compensations c WHERE c.run_id = r.run_id AND c.status IN ('pending', 'running'))
        OR EXISTS (SELECT 1 FROM ticket_actions x WHERE x.run_id = r.run_id AND x.status IN ('pending', 'running'))
        OR EXISTS (SELECT 1 FROM notifications n WHERE n.run_id = r.run_id AND n.status IN ('pending', 'sending'))
        OR (r.eval = 0 AND (r.status = 'failed'
                            OR (r.status IN ('stopped', 'terminated') AND r.compensate_requested = 1))
            AND EXISTS (SELECT 1 FROM operations o WHERE o.run_id = r.run_id AND o.status = 'succeeded'
                        AND NOT EXISTS (SELECT 1 FROM compensations c2 WHERE c2.operation_id = o.operation_id)))
        OR (r.status IN ('failed', 'stopped') AND EXISTS (
            SELECT 1 FROM remote_tasks t WHERE t.run_id = r.run_id AND (t.cancel_status = 'sending'
              OR (t.cancel_status IS NULL AND t.task_id IS NOT NULL
                  AND COALESCE(t.state, '') NOT IN ('completed', 'failed', 'canceled', 'rejected')))))
    )"""

    def claim_run(self, worker_id: str, now: float, lease: float, run_id: str | None = None,
                  exclude: Iterable[str] = ()) -> RunClaimRow | None:
        """Claim one run that needs work (oldest first), or the given one; return the claim or None.

        ``SELECT … FOR UPDATE SKIP LOCKED`` picks a run no other worker is claiming right now and
        whose claim is absent or expired; the upsert re-checks the lease on the latest row, so of
        two workers racing for one run exactly one wins. A run under a live claim is never claimed,
        not even by its holder (so one worker never drives one run twice). A given ``run_id`` is
        claimed whatever work it needs (an operator's command), unless a live claim holds it. ``exclude``: runs
        the caller drives already (a worker whose claim lapsed while the database was away must not claim its
        own run a second time; its heartbeat renews the claim when nobody else took it).

        Returns:
            ``{run_id, worker_id, epoch, previous_worker, previous_host, takeover}`` — ``epoch`` grows with
            every claim of the run (drive it inside :meth:`fenced` with it, R-F2); ``takeover`` is True when an
            expired claim of another worker was taken (its in-flight calls must be settled, R-R3).
        """
        cond = "r.run_id = %(run_id)s" if run_id else self._NEEDS_WORK

        def body(pg: Any) -> tuple[str, dict[str, Any] | None, int] | None:
            rows = pg.execute(
                f"SELECT r.run_id FROM runs r WHERE {cond} AND NOT EXISTS (SELECT 1 FROM run_claims k "
                "WHERE k.run_id = r.run_id AND k.lease_until >= %(now)s) AND NOT (r.run_id = ANY(%(exclude)s)) "
                "ORDER BY r.created_at LIMIT 1 FOR UPDATE OF r SKIP LOCKED",
                {"run_id": run_id, "now": now, "me": worker_id, "exclude": list(exclude)}).fetchall()
            if not rows:
                return None
            rid = rows[0]["run_id"]
            before = pg.execute(
                "SELECT k.worker_id, k.lease_until, k.claimed_at, w.host FROM run_claims k LEFT JOIN workers w "
                "USING (worker_id) WHERE k.run_id = %s FOR UPDATE OF k", (rid,)).fetchone()
            got = pg.execute(
                "INSERT INTO run_claims (run_id, worker_id, lease_until, claimed_at, epoch) "
                "VALUES (%(rid)s, %(me)s, %(until)s, %(now)s, 1) ON CONFLICT (run_id) DO UPDATE SET "
                "worker_id = EXCLUDED.worker_id, lease_until = EXCLUDED.lease_until, "
                "claimed_at = EXCLUDED.claimed_at, epoch = run_claims.epoch + 1, takeovers = run_claims.takeovers + "
                "CASE WHEN run_claims.worker_id <> EXCLUDED.worker_id "
                "AND run_claims.lease_until > run_claims.claimed_at THEN 1 ELSE 0 END "
                "WHERE run_claims.lease_until < %(now)s RETURNING run_id, epoch",
                {"rid": rid, "me": worker_id, "until": now + lease, "now": now}).fetchall()
            return (rid, before, int(got[0]["epoch"])) if got else None

        try:
            # a claim commits or not: a lost COMMIT is settled by txid_status, so a claim is never taken twice
            claimed = self._attempt(body, write=True, unfenced=True)
        except self._psycopg.Error as exc:
            raise JournalError(f"journal write failed: {_first_line(exc)}", file=str(self.path)) from None
        if claimed is None:
            return None
        rid, before, epoch = claimed
        faults.hit("run.claimed")
        # a released claim has lease_until == claimed_at; one whose holder never released it (killed, or
        # alive but too slow to renew) is taken over: its in-flight calls must be settled (R-R3)
        takeover = bool(before and before["worker_id"] != worker_id and before["lease_until"] > before["claimed_at"])
        return {"run_id": rid, "worker_id": worker_id, "epoch": epoch,
                "previous_worker": before["worker_id"] if before else None,
                "previous_host": before["host"] if before else None, "takeover": takeover}

    def run_needs_work(self, run_id: str) -> bool:
        """True when the run has nodes to run, compensations to attempt or plan, or a remote cancel owed."""
        return bool(self._query(f"SELECT 1 AS x FROM runs r WHERE r.run_id = ? AND {self._NEEDS_WORK}", (run_id,)))

    def release_run(self, run_id: str, worker_id: str, not_before: float) -> None:
        """Give a run back: nobody (this worker included) claims it before ``not_before`` (epoch seconds)."""
        self._exec("UPDATE run_claims SET lease_until = %s, claimed_at = %s WHERE run_id = %s AND worker_id = %s",
                   (not_before, not_before, run_id, worker_id))

    def held_runs_needing_work(self, now: float) -> list[RunClaimRow]:
        """Runs that need work under a live claim its holder never released (``run_id``, ``worker_id``,
        ``lease_until``, and the worker's ``host`` and ``pid``): what a ``resume`` cannot claim yet."""
        return self._query(
            "SELECT r.run_id, k.worker_id, k.lease_until, w.host, w.pid FROM runs r JOIN run_claims k USING (run_id) "
            "LEFT JOIN workers w USING (worker_id) WHERE k.lease_until >= ? AND k.lease_until > k.claimed_at "
            f"AND {self._NEEDS_WORK} ORDER BY r.created_at", (now,))

    def run_claim(self, run_id: str) -> RunClaimRow | None:
        """The run's claim row (``worker_id``, ``lease_until``, ``takeovers``) joined with its worker, or None."""
        rows = self._query("SELECT k.*, w.host, w.pid FROM run_claims k LEFT JOIN workers w USING (worker_id) "
                           "WHERE k.run_id = ?", (run_id,))
        return rows[0] if rows else None

    # -- claims of single calls: node calls and compensation attempts (R-S2) --------

    def dispatch_call(self, call_id: str, run_id: str | None, call: JsonObject, now: float) -> bool:
        """Queue one App process for any worker's executor; False when a row already holds ``call_id``
        (recovery fenced it first: the call can then never start). It is claimable once it has a timeout
        (:meth:`set_call_timeout`).

        Args:
            call: ``{project, entry, envelope, warm, offline, snapshot}`` (JSON).
        """
        rows = self._exec("INSERT INTO dispatched_calls (call_id, run_id, status, call, queued_at) "
                          "VALUES (%s, %s, 'queued', %s, %s) ON CONFLICT (call_id) DO NOTHING RETURNING call_id",
                          (call_id, run_id, json.dumps(call), now))
        return bool(rows)

    def set_call_timeout(self, call_id: str, timeout: float) -> None:
        """Give a queued call its timeout (seconds, counted by the executor from the process's start), once;
        executors may claim it from now on."""
        rows = self._exec("UPDATE dispatched_calls SET timeout = %s WHERE call_id = %s AND timeout IS NULL "
                          "AND status = 'queued' RETURNING call_id", (timeout, call_id))
        if rows:
            self._exec("NOTIFY workrun_calls", ())

    def claim_calls(self, worker_id: str, host: str, now: float, lease: float, limit: int, exec_root: str,
                    run_ids: list[str] | None = None) -> list[DispatchedCallRow]:
        """Claim up to ``limit`` queued calls, oldest first, with ``SELECT … FOR UPDATE SKIP LOCKED``: of
        racing executors each row goes to exactly one. Each claim records the worker, its host, the lease
        (``now + lease``) and the directory it will run in (``exec_root`` + call id + ``.`` + claim number:
        a fresh one per claim).

        Args:
            run_ids: claim only calls of these runs (a lone ``workrun run`` executes its own), None: any.

        Returns:
            The claimed rows (``call`` decoded).
        """
        only = "AND run_id = ANY(%(runs)s) " if run_ids is not None else ""
        rows = self._exec(
            "UPDATE dispatched_calls SET status = 'claimed', worker_id = %(me)s, host = %(host)s, "
            "lease_until = %(until)s, claimed_at = %(now)s, claims = claims + 1, "
            "exec_dir = %(root)s || call_id || '.' || (claims + 1) WHERE call_id IN (SELECT call_id "
            "FROM dispatched_calls WHERE status = 'queued' AND timeout IS NOT NULL " + only +
            "ORDER BY queued_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED) RETURNING *",
            {"me": worker_id, "host": host, "until": now + lease, "now": now, "root": exec_root, "limit": limit,
             "runs": run_ids})
        if rows:
            faults.hit("call.claimed")
        return [_decode_call(r) for r in rows]

    def call_started(self, call_id: str, worker_id: str, pid: int, proc_start: str | None, deadline: float) -> bool:
        """Record the started process of a claimed call; False when this worker no longer holds the claim."""
        return bool(self._exec("UPDATE dispatched_calls SET pid = %s, proc_start = %s, deadline = %s "
                               "WHERE call_id = %s AND status = 'claimed' AND worker_id = %s RETURNING call_id",
                               (pid, proc_start, deadline, call_id, worker_id)))

    def finish_call(self, call_id: str, worker_id: str, outcome: JsonObject, collected: JsonObject,
                    now: float) -> bool:
        """Store a call's outcome, only while ``worker_id`` still holds its claim and its lease has not passed
        (fencing by the conditional write: a worker that lost the claim stores nothing; the run's scheduler
        decides the call from its exit record); True when stored."""
        rows = self._exec("UPDATE dispatched_calls SET status = 'done', outcome = %s, collected = %s, done_at = %s, "
                          "decided_by = 'executor' WHERE call_id = %s AND status = 'claimed' AND worker_id = %s "
                          "AND lease_until >= %s RETURNING call_id",
                          (json.dumps(outcome), json.dumps(collected), now, call_id, worker_id, now))
        return bool(rows)

    def settle_call(self, call_id: str, worker_id: str, outcome: JsonObject, collected: JsonObject,
                    now: float) -> bool:
        """A scheduler's R-R3 decision on a call whose executor's lease passed: stored only if that executor
        (``worker_id``) still holds the expired claim; True when stored."""
        rows = self._exec("UPDATE dispatched_calls SET status = 'done', outcome = %s, collected = %s, done_at = %s, "
                          "decided_by = 'takeover' WHERE call_id = %s AND status = 'claimed' AND worker_id = %s "
                          "AND lease_until < %s RETURNING call_id",
                          (json.dumps(outcome), json.dumps(collected), now, call_id, worker_id, now))
        return bool(rows)

    def requeue_call(self, call_id: str, worker_id: str, now: float, *, unsent: bool = False) -> bool:
        """Queue again a call whose executor (``worker_id``) let its lease pass before its process started
        (the caller fenced that executor's directory first, so it can never start there); True when done.

        Args:
            unsent: an HTTP request: only while its claim has no "about to send" mark (``pid`` NULL, see
                :meth:`http_sending`), so a request that may have left is never queued again (R-H2).
        """
        rows = self._exec("UPDATE dispatched_calls SET status = 'queued', worker_id = NULL, host = NULL, "
                          "lease_until = NULL, exec_dir = NULL, pid = NULL, proc_start = NULL, deadline = NULL "
                          "WHERE call_id = %s AND status = 'claimed' AND worker_id = %s AND lease_until < %s "
                          + ("AND pid IS NULL " if unsent else "") +
                          "RETURNING call_id", (call_id, worker_id, now))
        if rows:
            self._exec("NOTIFY workrun_calls", ())
        return bool(rows)

    def http_sending(self, call_id: str, worker_id: str, mark: JsonObject, now: float, deadline: float) -> bool:
        """Commit "about to send" for an HTTP request a worker claimed (R-H1, R-H2, R-S2), in one transaction:
        the claim's mark (``pid`` 0, ``deadline``) and the operation's (``op.started``) or attempt's
        (``attempt.started``) ``running``, both conditional: False, nothing written, when ``worker_id`` no
        longer holds the claim or the operation/attempt is no longer ``starting`` (a restarted scheduler
        settled it as never sent). The request may leave only after True.

        Args:
            mark: ``{"operation_id": ID}`` or ``{"compensation_id": ID, "number": N}``.
            now: seconds since the epoch (the operation's ``started_at``).
            deadline: when the exchange's timeout ends (seconds since the epoch).
        """
        key: tuple[Any, ...]
        if "operation_id" in mark:
            table, key, fault = "operations", (mark["operation_id"],), "op.started"
            fields: dict[str, Any] = {"status": "running", "pid": None, "proc_start": None, "started_at": now,
                                      "deadline": deadline}
        else:
            table, key, fault = "attempts", (mark["compensation_id"], int(mark["number"])), "attempt.started"
            fields = {"status": "running", "pid": None, "proc_start": None, "deadline": deadline}
        def body(pg: Any) -> None:
            held = pg.execute("UPDATE dispatched_calls SET pid = 0, deadline = %s WHERE call_id = %s "
                              "AND status = 'claimed' AND worker_id = %s RETURNING call_id",
                              (deadline, call_id, worker_id)).fetchall()
            where = " AND ".join(f"{k} = %s" for k in _KEYS[table])
            row = pg.execute(f"SELECT status FROM {table} WHERE {where} FOR UPDATE", key).fetchone()
            if not held or row is None or row["status"] != "starting":
                raise _Refused
            sql, params = _update(table, key, fields)
            pg.execute(to_pg(sql), _flags(params))

        wrote = True
        try:
            self._attempt(body, write=True)
        except _Refused:
            wrote = False
        except self._psycopg.Error as exc:
            raise JournalError(f"journal write failed: {_first_line(exc)}; nothing after this point was "
                               "recorded. Fix the cause, then `workrun resume`", file=str(self.path)) from None
        if not wrote:  # rolled back: nothing written, the request must not leave
            return False
        faults.hit(fault)
        return True

    def fence_call(self, call_id: str, run_id: str | None, now: float) -> bool:
        """Make a call that no executor claimed unable to ever start: a queued row becomes ``fenced``, a
        missing one is written ``fenced``. True when the call is fenced (it never started)."""
        with self._lock:
            rows = self._exec("UPDATE dispatched_calls SET status = 'fenced', done_at = %s "
                              "WHERE call_id = %s AND status IN ('queued', 'fenced') RETURNING call_id", (now, call_id))
            if rows:
                return True
            return bool(self._exec(
                "INSERT INTO dispatched_calls (call_id, run_id, status, call, timeout, queued_at, done_at) "
                "VALUES (%s, %s, 'fenced', '{}', 0, %s, %s) ON CONFLICT (call_id) DO NOTHING RETURNING call_id",
                (call_id, run_id, now, now)))

    def request_call_stop(self, call_ids: Iterable[str]) -> None:
        """Ask the executors of these calls to end their processes (R-C9)."""
        self._exec("UPDATE dispatched_calls SET stop_requested = 1 WHERE call_id = ANY(%s) AND status = 'claimed'",
                   (list(call_ids),))

    def renew_calls(self, worker_id: str, now: float, lease: float, call_ids: Iterable[str]) -> dict[str, bool]:
        """Renew the leases of the calls ``worker_id`` executes; return ``{call_id: stop_requested}`` for
        those still its own. A lease that has passed is not renewed (unlike a run claim's): its run's scheduler
        may be deciding the call from its exit record right now (R-R3, R-F2), so the executor lost it."""
        rows = self._exec("UPDATE dispatched_calls SET lease_until = %s WHERE worker_id = %s AND status = 'claimed' "
                          "AND call_id = ANY(%s) AND lease_until >= %s RETURNING call_id, stop_requested",
                          (now + lease, worker_id, list(call_ids), now))
        return {r["call_id"]: bool(r["stop_requested"]) for r in rows}

    def dispatched_call(self, call_id: str) -> DispatchedCallRow | None:
        """One dispatched call's row (``call``, ``outcome``, ``collected`` decoded), or None."""
        rows = self._query("SELECT * FROM dispatched_calls WHERE call_id = ?", (call_id,))
        return _decode_call(rows[0]) if rows else None

    def queued_call_count(self) -> int:
        """How many dispatched calls are queued and not claimed (``workrun_dispatch_queue_depth``, R-F4)."""
        return int(self._query("SELECT COUNT(*) AS n FROM dispatched_calls WHERE status = 'queued'")[0]["n"])

    def dispatched_calls(self, run_id: str) -> list[DispatchedCallRow]:
        """A run's dispatched calls, in the order they were queued."""
        return [_decode_call(r) for r in self._query(
            "SELECT * FROM dispatched_calls WHERE run_id = ? ORDER BY queued_at, rowid", (run_id,))]

    def wait_for_calls(self, timeout: float) -> None:
        """Block up to ``timeout`` seconds until a call is queued (``LISTEN workrun_calls``) on this connection,
        which must be used for nothing else meanwhile."""
        def body(pg: Any) -> None:
            if not self._listening:  # again after a reconnect: LISTEN belongs to the connection
                pg.execute("LISTEN workrun_calls")
                self._listening = True
            for _ in pg.notifies(timeout=timeout, stop_after=1):
                pass

        self._attempt(body, write=False)

    # -- code snapshots in the database (R-S4) -------------------------------

    def put_snapshot(self, snapshot: str, manifest: JsonObject, read: Any, now: float) -> None:
        """Store a snapshot's manifest and each missing object (``read(digest) -> bytes``), in one transaction,
        unless the database holds it; it waits while :meth:`prune_snapshots` prunes (the objects it finds there
        are never deleted under it)."""
        def body(pg: Any) -> None:
            pg.execute("SELECT pg_advisory_xact_lock_shared(%s)", (_SNAPSHOT_LOCK,))  # never while a gc prunes
            if pg.execute("SELECT 1 AS x FROM snapshots WHERE snapshot = %s", (snapshot,)).fetchall():
                return
            have = {r["digest"] for r in pg.execute(
                "SELECT digest FROM snapshot_objects WHERE digest = ANY(%s)",
                (list(manifest["files"].values()),)).fetchall()}
            for digest in dict.fromkeys(manifest["files"].values()):
                if digest not in have:
                    pg.execute("INSERT INTO snapshot_objects (digest, data) VALUES (%s, %s) "
                               "ON CONFLICT DO NOTHING", (digest, read(digest)))
            pg.execute("INSERT INTO snapshots (snapshot, manifest, created_at) VALUES (%s, %s, %s) "
                       "ON CONFLICT DO NOTHING", (snapshot, json.dumps(manifest), now))

        try:
            self._attempt(body, write=True)
        except self._psycopg.Error as exc:
            raise JournalError(f"journal write failed: {_first_line(exc)}", file=str(self.path)) from None

    def gc_lock(self) -> Any:
        """A context manager holding the database's gc lock (a session advisory lock): a second ``workrun gc`` on
        the same database waits for the first (R-F3)."""
        import contextlib

        @contextlib.contextmanager
        def held() -> Any:
            self._attempt(lambda pg: pg.execute("SELECT pg_advisory_lock(%s)", (_GC_LOCK,)), write=False)
            try:
                yield
            finally:  # a session lock: a reconnect meanwhile has already let it go
                self._attempt(lambda pg: pg.execute("SELECT pg_advisory_unlock(%s)", (_GC_LOCK,)), write=False)

        return held()

    def prune_snapshots(self, needed: set[str], *, dry_run: bool = False) -> tuple[int, int]:
        """Delete the database's snapshots not in ``needed`` and the stored files no remaining snapshot names, in
        one transaction that no :meth:`put_snapshot` overlaps (R-F3). What the journal says is needed at that
        moment is kept too (``needed`` was read before: an operation journaled since, on any machine, is seen
        here, and one journaled later stores its snapshot again once this ends). Returns ``(removed, kept)``
        snapshots."""
        def body(pg: Any) -> tuple[int, int]:
            pg.execute("SELECT pg_advisory_xact_lock(%s)", (_SNAPSHOT_LOCK,))
            needed_now = needed | {r["snapshot"] for r in pg.execute(_NEEDED_SNAPSHOTS, {
                "unfinished": ["running", "waiting"], "ended": ["failed", "stopped", "terminated"],
                "done": sorted(COMPENSATION_DONE)}).fetchall()}
            rows = pg.execute("SELECT snapshot, manifest FROM snapshots").fetchall()
            gone = [r["snapshot"] for r in rows if r["snapshot"] not in needed_now]
            if dry_run or not gone:
                return len(gone), len(rows) - len(gone)
            pg.execute("DELETE FROM snapshots WHERE snapshot = ANY(%s)", (gone,))
            live = {d for r in rows if r["snapshot"] in needed_now for d in json.loads(r["manifest"])["files"].values()}
            pg.execute("DELETE FROM snapshot_objects WHERE NOT (digest = ANY(%s))", (list(live),))
            return len(gone), len(rows) - len(gone)

        try:
            return self._attempt(body, write=True)
        except self._psycopg.Error as exc:
            raise JournalError(f"journal write failed: {_first_line(exc)}", file=str(self.path)) from None

    def has_snapshot(self, snapshot: str) -> bool:
        """True when the database holds the snapshot's manifest."""
        return bool(self._query("SELECT 1 AS x FROM snapshots WHERE snapshot = ?", (snapshot,)))

    def snapshot_manifest(self, snapshot: str) -> dict[str, Any] | None:
        """The snapshot's manifest ``{files: {path: sha256}, project}``, or None."""
        rows = self._query("SELECT manifest FROM snapshots WHERE snapshot = ?", (snapshot,))
        return json.loads(rows[0]["manifest"]) if rows else None

    def snapshot_object(self, digest: str) -> bytes:
        """One stored file's bytes.

        Raises:
            KeyError: the object is not in the database.
        """
        rows = self._query("SELECT data FROM snapshot_objects WHERE digest = ?", (digest,))
        if not rows:
            raise KeyError(digest)
        return bytes(rows[0]["data"])


def _decode_call(row: dict[str, Any]) -> DispatchedCallRow:
    for name in ("call", "outcome", "collected"):
        if isinstance(row.get(name), str):
            row[name] = json.loads(row[name])
    return cast(DispatchedCallRow, row)


def _flags(params: Any) -> Any:
    """Parameters with Python bools as 0/1: flags are INTEGER columns on both backends."""
    if isinstance(params, tuple) and any(isinstance(p, bool) for p in params):
        return tuple(int(p) if isinstance(p, bool) else p for p in params)
    return params


def _redact(url: str) -> str:
    """The URL without its password (for messages)."""
    return settings.redact_url(url)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
