"""The SQLite journal (R-J1, R-J3): the embedded dialect of :class:`workrun.journal.portable.SqlJournal`.

The statements both backends share live in :mod:`workrun.journal.portable`; this
module has SQLite's plumbing: the connection, migrations, transactions, the
integrity check, and messages held for the next write.

WAL mode; each write is one transaction committed before the caller goes on
(and before any side effect it precedes). ``synchronous=NORMAL`` by default:
durable against the runner being killed (the threat model of R-R4); set
``WORKRUN_SYNC=full`` to also survive power loss at some cost per write.

After each committed write :func:`workrun.core.faults.hit` is called with the
write's point name (``FAULT_POINTS``) so tests can kill the runner there.
``WORKRUN_MAX_PAGES=N`` (test-only) caps the file at N pages so writes fail
as on a full disk. A failed write raises JournalError; the transaction is
rolled back, so nothing is marked done that was not.
"""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import threading
import time
import urllib.parse
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from workrun.core import faults, settings
from workrun.core.errors import ConfigError, JournalError, JournalVersionError
from workrun.core.rows import (
    AppCallRow,
)
from workrun.journal.base import FAULT_POINTS
from workrun.journal.migrations import MIGRATIONS
from workrun.journal.portable import (
    _JSON_COLUMNS,
    SqlJournal,
    _Check,
    _check_status,
    _insert,
    _Statement,
    _status_query,
)
from workrun_sdk._lightjson import loads as _loads  # json.loads' value and errors, through its C scanner directly

__all__ = ["FAULT_POINTS", "MESSAGE_DELAY", "SqliteJournal"]

MESSAGE_DELAY = 0.1
"""Seconds a progress message may wait for the next journal write before it is written on its own."""

def _row(cursor: sqlite3.Cursor, row: tuple[Any, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for (name, *_), value in zip(cursor.description, row, strict=True):
        if name in _JSON_COLUMNS and isinstance(value, str):
            value = _loads(value)
        out[name] = value
    return out


def _connect_read_only(path: Path) -> sqlite3.Connection:
    """Open ``path`` read-only in a directory this user cannot write (no ``-shm`` can be made there).

    With the WAL's ``-wal`` and ``-shm`` present, SQLite reads through them (``mode=ro``); without them
    every commit is in the main file, which then cannot change under us (``immutable=1``).

    Raises:
        ConfigError: (exit 2, naming the directory, SPEC §17) no journal file exists: the data directory holds
            none and this user cannot write one there.
    """
    if not path.is_file():
        raise ConfigError(f"{path.parent} is not writable by this user and holds no journal yet", field="WORKRUN_HOME")
    wal = all(Path(f"{path}{suffix}").exists() for suffix in ("-wal", "-shm"))
    uri = f"{path.resolve().as_uri()}?{'mode=ro' if wal else 'immutable=1'}"
    return sqlite3.connect(uri, uri=True, timeout=30.0, isolation_level=None, check_same_thread=False)


_AHEAD: dict[str, tuple[threading.Thread, list[Any]]] = {}
_AHEAD_LOCK = threading.Lock()


def check_ahead(path: Path) -> None:
    """Start ``PRAGMA quick_check`` of the existing journal file ``path`` now, in a background thread on a
    read-only connection, so that it runs while the command still loads (SQLite checks without the GIL, on
    the other core); the next :class:`SqliteJournal` opened with ``check`` on this file uses its result
    instead of checking again (issue 14: the check reads every page, and a journal only grows).

    Nothing when the file does not exist (it is created and migrated on open), a check is under way, or the file
    is as Workrun's last close left it (:func:`vouched`). Never raises: a check that cannot run
    ahead is run on open as usual.
    """
    key = os.path.abspath(path)
    if not os.path.isfile(key) or vouched(Path(key)) is not None:
        return
    box: list[Any] = []

    def work() -> None:
        try:
            db = sqlite3.connect(f"file:{urllib.parse.quote(key)}?mode=ro", uri=True, timeout=30.0,
                                 check_same_thread=False)
            try:
                box.append([row[0] for row in db.execute("PRAGMA quick_check").fetchall()])
            finally:
                db.close()
        except sqlite3.Error as exc:  # checked again on open, which reports it
            box.append(exc)

    with _AHEAD_LOCK:
        if key in _AHEAD:
            return
        thread = threading.Thread(target=work, name="workrun-journal-check", daemon=True)
        _AHEAD[key] = (thread, box)
    thread.start()


_CLEAN_SUFFIX = ".closed"  # beside the journal: the file's stat when Workrun last closed it, the check passed


def _stat_of(path: Path) -> list[int] | None:
    """What changes whenever a file's content does: device, inode, size, mtime and ctime (ns); None if missing.
    No tool can set a file's ctime: any write, truncation, copy over it or ``touch`` changes it."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


#: seconds a clean close vouches for the file since its last page-by-page check: every page is read again at least
#: this often while the journal is used, whatever no stat shows (damage below the file system, or written into the
#: file while a run had it open)
CHECK_EVERY = 600.0
_MARKER_MAX = 4096  # bytes: a record is ~100


def _read_marker(path: Path) -> dict[str, Any] | None:
    """The record of the journal's last clean close, or None: missing, not a small regular file (never
    followed through a link, never waited on as a FIFO), or not a record."""
    try:
        fd = os.open(f"{path}{_CLEAN_SUFFIX}", os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > _MARKER_MAX:
            return None
        record = json.loads(os.read(fd, _MARKER_MAX))
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)
    if not isinstance(record, dict) or not isinstance(record.get("checked_at"), float):
        return None
    return record


def vouched(path: Path, now: float | None = None) -> float | None:
    """When the journal ``path`` is exactly as a Workrun process left it when it closed it last, and its pages
    were all checked less than :data:`CHECK_EVERY` seconds ago: the time of that check (None otherwise).

    That process opened it checked (``PRAGMA quick_check`` passed, or this same test did), wrote it only through
    SQLite, was its last connection (no write-ahead log is left) and recorded the file's stat on close. Such a
    file need not be read page by page again on the next open (issue 33: the check reads every page, 40 ms per
    open of a 14 MB journal on a 2-core machine). Any change since (a crash mid-write, another program, a copy
    or a restore) changes the stat, and the next open checks every page again."""
    if os.path.exists(f"{path}-wal"):
        return None
    record = _read_marker(path)
    if record is None or record.get("stat") != _stat_of(path):
        return None
    at, now = record["checked_at"], time.time() if now is None else now
    return at if 0 <= now - at < CHECK_EVERY else None


def _record_clean_close(path: Path, checked_at: float) -> None:
    """After a checked journal's last close: record its stat and when its pages were last all checked, for
    :func:`vouched` (best effort; nothing recorded while another connection keeps a write-ahead log)."""
    marker = f"{path}{_CLEAN_SUFFIX}"
    try:
        if os.path.exists(f"{path}-wal"):
            os.unlink(marker)
            return
        current = _stat_of(path)
        if current is None:
            return
        tmp = f"{marker}.{os.getpid()}"
        with open(tmp, "w", encoding="ascii") as fh:
            json.dump({"stat": current, "checked_at": float(checked_at)}, fh)
        os.replace(tmp, marker)
    except OSError:
        pass


def _refuse_emptied(path: Path) -> None:
    """Refuse a journal file of 0 bytes that was not empty when Workrun last closed it (a truncation, a failed
    copy or restore): SQLite would take it for a new database and start an empty journal over the record of
    what must be undone (hostile review), nor one beside a write-ahead log that is not empty (emptied after a
    crash: the log holds what was written since). A 0-byte file with neither (a first open that was killed) is
    taken as new.

    Raises:
        JournalError: naming the file and the size it had.
    """
    try:
        if os.stat(path).st_size != 0:
            return
    except OSError:
        return
    record = _read_marker(path)
    was = record.get("stat") if record is not None else None
    if isinstance(was, list) and len(was) > 2 and isinstance(was[2], int) and was[2] > 0:
        raise JournalError(f"the journal is empty (0 bytes) but was {was[2]} bytes when Workrun last closed it; "
                           "nothing was written. Restore a backup or move the file away", file=str(path))
    try:  # after a crash there is no such record, but a write-ahead log: no new database has one beside 0 bytes
        wal = os.stat(f"{path}-wal").st_size
    except OSError:
        wal = 0
    if wal > 0:
        raise JournalError(f"the journal is empty (0 bytes) beside a write-ahead log of {wal} bytes; nothing was "
                           "written. Restore a backup or move both files away", file=str(path))


def _checkpoint(path: Path) -> None:
    """Copy the write-ahead log of the journal ``path`` into it, on a connection of this thread's own, without
    waiting for readers or writers (``PASSIVE``); any failure is left to the last close's own checkpoint."""
    try:
        db = sqlite3.connect(str(path), timeout=0.0, isolation_level=None)
        try:
            db.execute("PRAGMA wal_checkpoint(PASSIVE)")
        finally:
            db.close()
    except sqlite3.Error:
        pass


def _checked(path: Path, db: sqlite3.Connection) -> tuple[list[str], float]:
    """``PRAGMA quick_check``'s lines for the journal ``path`` and when its pages were read: ``["ok"]`` and the
    time of the last check when the file is as Workrun's last close left it (:func:`vouched`), else from
    :func:`check_ahead` when it checked this file (waiting for it), else from ``db`` now."""
    with _AHEAD_LOCK:
        ahead = _AHEAD.pop(os.path.abspath(path), None)
    at = time.time()
    if ahead is None:
        last = vouched(path, at)
        if last is not None:
            return ["ok"], last
    if ahead is not None:
        ahead[0].join()
        if ahead[1] and isinstance(ahead[1][0], list):
            return [str(line) for line in ahead[1][0]], at
    return [r["quick_check"] for r in db.execute("PRAGMA quick_check").fetchall()], at


class SqliteJournal(SqlJournal):
    """The SQLite backend of :class:`workrun.journal.base.Journal` (see there for each method's contract).

    Thread-safe: one connection, one lock; every write is its own transaction.

    Args:
        path: the database file (created and migrated when new).
        check: run ``PRAGMA quick_check`` on open (every page: a damaged journal is refused before any App
            runs). Its result comes from :func:`check_ahead` when that started it for this file.
        read_only: open for reading only, for read commands on a data dir this user cannot write
            (SPEC §17): nothing is created or migrated.

    Raises (from the constructor):
        JournalVersionError: the file's schema is newer than this Workrun.
        JournalError: the file is not a database or fails ``PRAGMA quick_check``; ``read_only`` and the
            file is missing or needs a migration.
    """

    def __init__(self, path: Path, *, check: bool = True, read_only: bool = False) -> None:
        self.path = Path(path)
        self._lock = threading.RLock()
        self._pending: list[_Statement] = []  # messages not written yet (see add_message)
        self._init_batching()
        self._has_pending = threading.Event()
        self._flusher: threading.Thread | None = None
        self._closing = False
        self._writing_back: threading.Thread | None = None  # write_back's checkpoint, joined by close
        self._read_only = read_only
        tunables = settings.current()
        _refuse_emptied(self.path)
        try:
            if read_only:
                self._db = _connect_read_only(self.path)
            else:
                self._db = sqlite3.connect(str(self.path), timeout=30.0, isolation_level=None,
                                           check_same_thread=False)
            self._db.row_factory = _row
            self._db.execute("PRAGMA busy_timeout = 30000")
            self._checked_at: float | None = None  # a clean close is recorded: the file was checked at this time
            if check:
                problems, checked_at = _checked(self.path, self._db)
                if problems != ["ok"]:
                    raise JournalError(f"integrity check failed: {problems[0]}; nothing was written. "
                                       "Restore a backup or move the file away", file=str(self.path))
                self._checked_at = None if read_only else checked_at
            if read_only:
                if self._db.execute("PRAGMA user_version").fetchone()["user_version"] != len(MIGRATIONS):
                    raise JournalError("the journal needs a migration, and its directory is not writable by "
                                       "this user", file=str(self.path))
                return
            self._db.execute("PRAGMA journal_mode = WAL")
            self._db.execute(f"PRAGMA synchronous = {'FULL' if tunables.sync_full else 'NORMAL'}")
            self._db.execute("PRAGMA foreign_keys = ON")
            if tunables.max_pages is not None:  # test-only: simulate a full disk (SQLITE_FULL)
                self._db.execute(f"PRAGMA max_page_count = {tunables.max_pages}")
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
        return int(self._db.execute("PRAGMA user_version").fetchone()["user_version"])

    def _tx(self, statements: Iterable[_Statement], fault: str | tuple[str, ...] | None,
            checks: Iterable[_Check] = (), *, held: bool = True) -> None:
        with self._lock:
            pending, self._pending = self._pending, []  # messages said before this write go in with it
            kept, points = self._take_held() if held else ([], [])
            try:
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    for sql, params in (*kept, *pending):  # held writes first: this write may depend on them
                        self._db.execute(sql, params)
                    for table, key, new, seen in checks:  # the state machine (workrun/core/states.py), under the lock
                        row = self._db.execute(_status_query(table), key).fetchone()
                        _check_status(table, key, row["status"] if row else None, new, seen, str(self.path))
                    for sql, params in statements:
                        self._db.execute(sql, params)
                    self._db.execute("COMMIT")
                except BaseException:
                    if self._db.in_transaction:  # SQLite may have rolled back itself (disk full): its error stands
                        self._db.execute("ROLLBACK")
                    self._pending[:0] = pending
                    self._give_back_held(kept, points)
                    raise
            except sqlite3.Error as exc:
                raise JournalError(f"journal write failed: {exc}; nothing after this point was recorded. "
                                   "Fix the cause, then `workrun resume`", file=str(self.path)) from None
        faults.hit_all(tuple(points))
        faults.hit_all(fault)

    def flush_messages(self) -> None:
        """Write the messages :meth:`add_message` holds, and the writes :meth:`_hold` keeps, now.

        Raises:
            JournalError: the journal cannot be written (they stay held).
        """
        self._flush(held=True)

    def _flush(self, *, held: bool) -> None:
        with self._lock:
            if self._pending or (held and self._held):
                self._tx([], None, held=held)

    def _flush_later(self) -> None:
        """The background writer of held messages: at most :data:`MESSAGE_DELAY` s after one is said."""
        while True:
            self._has_pending.wait()
            if self._closing:
                return
            time.sleep(MESSAGE_DELAY)
            self._has_pending.clear()
            with self._lock:  # a node start held for less than MESSAGE_DELAY waits for its call's intent
                young = bool(self._held) and time.monotonic() - self._held_at < MESSAGE_DELAY
            try:
                self._flush(held=not young)
            except (JournalError, sqlite3.ProgrammingError):  # the next write reports it; closed meanwhile
                pass
            if young:
                self._has_pending.set()  # back for it once it is older

    def _query(self, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
        with self._lock:
            try:
                cursor = self._db.cursor()
                cursor.row_factory = None  # plain tuples: the dicts are built below, column names looked up once
                rows = cursor.execute(sql, params).fetchall()
                description = cursor.description
                cursor.close()
            except sqlite3.Error as exc:
                raise JournalError(f"journal read failed: {exc}", file=str(self.path)) from None
        if not rows:
            return []
        names = [d[0] for d in description]
        decode = [(i, name) for i, name in enumerate(names) if name in _JSON_COLUMNS]
        out = []
        for row in rows:
            item = dict(zip(names, row, strict=True))
            for i, name in decode:
                if isinstance(row[i], str):
                    try:
                        item[name] = _loads(row[i])  # ~2 µs less per value than json.loads (issue 33)
                    except ValueError as exc:
                        raise JournalError(f"journal read failed: column {name!r} does not hold JSON ({exc}); "
                                           "restore a backup or repair that row", file=str(self.path)) from None
            out.append(item)
        return out

    def write_back(self) -> None:
        """Write the messages still held, then copy the write-ahead log into the database file on a connection
        and thread of their own (``PRAGMA wal_checkpoint(PASSIVE)``), so that the copy's two syncs (~8 ms) are
        made while the caller reads and prints its results, not when it closes (issue 33). The last close then
        finds nothing left to copy and only removes the log. Writes meanwhile are safe (SQLite's checkpoint
        copies what is committed and leaves the rest to the next one). Best effort: never raises."""
        try:
            self.flush_messages()
        except JournalError:
            pass
        with self._lock:
            if self._closing or self._writing_back is not None or self._read_only:
                return
            self._writing_back = threading.Thread(target=_checkpoint, args=(self.path,), name="workrun-write-back",
                                                  daemon=True)
            self._writing_back.start()

    def close(self) -> None:
        """Write the messages still held (best effort), wait for :meth:`write_back`'s copy, then close the
        connection (the last one to close removes the write-ahead log)."""
        with self._lock:
            try:
                self.flush_messages()
            except JournalError:
                pass
            if self._writing_back is not None:
                self._writing_back.join()
            self._closing = True
            self._has_pending.set()
            self._db.close()
            checked_at = getattr(self, "_checked_at", None)
            if checked_at is not None:
                _record_clean_close(self.path, checked_at)

    def _held_added(self) -> None:
        """The background writer writes a held write once it was held :data:`MESSAGE_DELAY` seconds and nothing
        else was written (readers see a slow node start soon); a quick call's intent takes it first, so a node's
        start and its first call's intent are one transaction."""
        self._wake_writer()

    def add_message(self, run_id: str, node_key: str | None, level: str, text: str) -> None:
        """Append a message to a node (or the run when ``node_key`` is None).

        Held, not written at once: it goes into the journal with this process's next write (the state change
        it tells of, usually within a millisecond), or by a background writer within :data:`MESSAGE_DELAY`
        seconds, or on :meth:`close` — one transaction fewer per message (issue 14). A process killed in
        between loses only messages said after its last write; no state is held back.
        """
        stmt = _insert("messages", {"run_id": run_id, "node_key": node_key, "at": time.time(), "level": level,
                                    "text": text})
        with self._lock:
            self._pending.append(stmt)
        self._wake_writer()

    def _wake_writer(self) -> None:
        """Start the background writer (once) and tell it something is held."""
        with self._lock:
            if self._flusher is None:
                self._flusher = threading.Thread(target=self._flush_later, name="workrun-messages", daemon=True)
                self._flusher.start()
        self._has_pending.set()

    # -- reads -------------------------------------------------------------------

    def change_token(self) -> object | None:
        """``PRAGMA data_version``: it changes when another connection commits, never for this one's writes."""
        return int(self._query("PRAGMA data_version")[0]["data_version"])

    def adopt_operation(self, operation_id: str, *, owner_pid: int, owner_start: str | None,
                        seen_pid: int | None, seen_start: str | None) -> bool:
        """See :meth:`workrun.journal.base.Journal.adopt_operation`."""
        sql = ("UPDATE operations SET owner_pid = ?, owner_start = ? WHERE operation_id = ? "
               "AND status IN ('starting', 'running') AND owner_pid IS ? AND owner_start IS ?")
        with self._lock:
            try:
                cur = self._db.execute(sql, (owner_pid, owner_start, operation_id, seen_pid, seen_start))
            except sqlite3.Error as exc:
                raise JournalError(f"journal write failed: {exc}", file=str(self.path)) from None
        return cur.rowcount == 1

    def latest_app_calls(self) -> list[AppCallRow]:
        """The newest operation of each (project, App): ``{project, app, kind, config, fingerprint,
        fingerprint_files, created_at, calls}``, by project then App."""
        return self._query("SELECT project, app, kind, config, fingerprint, fingerprint_files, MAX(created_at) "
                           "AS created_at, COUNT(*) AS calls FROM operations GROUP BY project, app "
                           "ORDER BY project, app")


