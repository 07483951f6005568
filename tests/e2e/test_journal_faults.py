"""Journal faults (issue 3): a failed write stops the runner with one clear line and loses nothing;
a damaged journal is refused without writes; a newer schema is refused naming both versions."""

from __future__ import annotations

import os
import sqlite3

import pytest

BIG = """
[tool.workrun.apps.big]
entry = "main.py"
compensation = { entry = "compensate.py" }
"""
BIG_MAIN = """
from workrun_sdk import process
process.result({"blob": "x" * 400_000})
"""


def test_journal_full_stops_cleanly_and_resume_completes(workrun, write_workflow, make_project, isolated_env):
    proj = make_project("big", BIG, {"main.py": BIG_MAIN, "compensate.py": "print('undo')\n"})
    wf = write_workflow("big", f"""
        [nodes.big]
        project = "{proj}"
        app = "big"
        [nodes.second]
        project = "{proj}"
        app = "big"
        input = {{ x = 1 }}
        needs = ["big"]
    """)
    # create the journal, then cap it just above its current size: the 400 KB result cannot be written
    assert workrun("runs", "list", "--json").code == 0
    pages = sqlite3.connect(isolated_env / "journal.sqlite3").execute("PRAGMA page_count").fetchone()[0]
    res = workrun("run", wf, "--json", env={"WORKRUN_MAX_PAGES": str(pages + 12)})
    assert res.code == 1, res
    assert res.err.count("\n") == 1 and res.err.startswith("error: ")
    assert "journal write failed" in res.err and "workrun resume" in res.err
    assert "full" in res.err and "rollback" not in res.err, res.err  # SQLite's own error, not a later one
    view = workrun("runs", "show", workrun("runs", "list", "--json").json()[0]["run_id"], "--json").json()
    assert view["status"] == "running"
    assert [o["status"] for o in view["operations"]] == ["running"]  # not marked done: the write failed
    res = workrun("resume", "--json")
    assert res.code == 0, res
    view = res.json()["runs"][0]
    assert view["status"] == "succeeded"
    assert [len(o["result"]["blob"]) for o in view["operations"]] == [400_000, 400_000]


def test_damaged_journal_is_refused_without_writes(workrun, isolated_env):
    assert workrun("runs", "list").code == 0
    path = isolated_env / "journal.sqlite3"
    data = bytearray(path.read_bytes())
    data[100:4096] = b"\x13" * (4096 - 100)  # clobber the schema page
    path.write_bytes(bytes(data))
    res = workrun("resume")
    assert res.code == 1
    assert res.err.count("\n") == 1 and str(path) in res.err
    assert path.read_bytes() == bytes(data)


def test_an_emptied_journal_is_refused_not_started_again(workrun, isolated_env):
    """Hostile review: a journal truncated to 0 bytes (a failed copy or restore) was taken for a new one: every
    command started an empty journal over it, and the record of what must be undone was gone for good."""
    assert workrun("resume").code == 0  # created, checked and closed cleanly (its size recorded)
    path = isolated_env / "journal.sqlite3"
    assert path.stat().st_size > 0 and (isolated_env / "journal.sqlite3.closed").is_file()
    path.write_bytes(b"")
    for args in (("compensations", "list"), ("resume",), ("runs", "list", "--json")):
        res = workrun(*args)
        assert res.code == 1, res
        assert res.err.count("\n") == 1 and str(path) in res.err and "0 bytes" in res.err, res.err
    assert path.stat().st_size == 0  # nothing written over it


def test_a_journal_emptied_beside_its_write_ahead_log_is_refused(workrun, isolated_env):
    """Hostile review: after a crash there is no clean-close record, but the write-ahead log holds what was
    written since; a journal emptied then (a bad restore) was started again empty, and the log deleted."""
    from pathlib import Path

    assert workrun("resume").code == 0
    path = isolated_env / "journal.sqlite3"
    keep = sqlite3.connect(path)  # a connection left open keeps a log, as a killed runner leaves one
    keep.execute("PRAGMA journal_mode = WAL")
    keep.execute("INSERT INTO events (run_id, at, actor, action, args) VALUES ('run_x', 1.0, 'me', 'note', '{}')")
    keep.commit()
    wal = Path(f"{path}-wal")
    assert wal.stat().st_size > 0
    path.write_bytes(b"")
    (isolated_env / "journal.sqlite3.closed").unlink(missing_ok=True)
    size = wal.stat().st_size
    for args in (("runs", "list"), ("resume",)):
        res = workrun(*args)
        assert res.code == 1 and res.err.count("\n") == 1 and "write-ahead log" in res.err, res
    assert path.stat().st_size == 0 and wal.stat().st_size == size  # nothing written, the log kept
    keep.close()


@pytest.mark.parametrize("table", ["runs", "compensations", "messages"])
def test_a_damaged_table_page_is_refused_before_anything_runs(workrun, write_workflow, make_project, isolated_env,
                                                              tmp_path, table):
    """Damage in any table's page (not only the schema) is found by the integrity check when the journal is
    opened (``workrun run`` starts that check ahead, while it loads): one clear line, exit 1, no App runs and
    the file stays as it was."""
    proj = make_project("touch", TOUCH_APP, {"main.py": TOUCH_MAIN})
    marker = tmp_path / "ran"
    wf = write_workflow("touch", f"""
        [nodes.a]
        project = "{proj}"
        app = "touch"
        input = {{ path = "{marker}" }}
    """)
    assert workrun("runs", "list").code == 0
    path = isolated_env / "journal.sqlite3"
    db = sqlite3.connect(path)
    page_size = db.execute("PRAGMA page_size").fetchone()[0]
    root = db.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,)).fetchone()[0]
    db.close()
    data = bytearray(path.read_bytes())
    data[(root - 1) * page_size:root * page_size] = b"\x13" * page_size  # clobber the table's root page
    path.write_bytes(bytes(data))
    workrun("runs", "list")  # a read command may answer from undamaged pages; it never writes
    for args in (("run", str(wf)), ("resume",)):  # a scheduling command checks every page before anything runs
        res = workrun(*args)
        assert res.code == 1, (args, res)
        assert res.err.count("\n") == 1 and res.err.startswith("error: ") and str(path) in res.err, res.err
        assert "integrity check failed" in res.err or "malformed" in res.err, res.err
    assert not marker.exists()  # nothing ran
    assert path.read_bytes() == bytes(data)


TOUCH_APP = """
[tool.workrun.apps.touch]
entry = "main.py"
"""
TOUCH_MAIN = """
from pathlib import Path
from workrun_sdk import process
Path(process.input()["path"]).write_text("ran")
process.result({})
"""


def test_newer_schema_is_refused(workrun, isolated_env):
    assert workrun("runs", "list").code == 0
    db = sqlite3.connect(isolated_env / "journal.sqlite3")
    db.execute("PRAGMA user_version = 99")
    db.commit()
    db.close()
    for args in (["runs", "list"], ["ui", "--no-open", "--port", "0"]):  # the dashboard too: one line, not 500s
        res = workrun(*args)
        assert res.code == 1 and "schema version 99 is newer" in res.err and res.err.count("\n") == 1, (args, res)


def test_the_check_started_ahead_is_the_one_the_open_uses(tmp_path, monkeypatch):
    """check_ahead runs PRAGMA quick_check on a read-only connection in a thread; the next open of that file
    uses its result (it does not check again), and an open without one checks itself."""
    from workrun.core.errors import JournalError
    from workrun.journal import sqlite as backend

    path = tmp_path / "journal.sqlite3"
    backend.check_ahead(path)  # no file yet: nothing to check (it is created on open)
    assert backend._AHEAD == {}
    backend.SqliteJournal(path).close()
    checked: list[str] = []
    real = backend._checked

    def spy(p, db):
        checked.append("ahead" if str(p.resolve()) in backend._AHEAD else "here")
        return real(p, db)

    closed = path.with_name(path.name + ".closed")  # a clean close vouches for the file: forget it, so it is checked
    monkeypatch.setattr(backend, "_checked", spy)
    closed.unlink()
    backend.check_ahead(path)
    backend.SqliteJournal(path).close()
    closed.unlink()
    backend.SqliteJournal(path).close()
    assert checked == ["ahead", "here"] and backend._AHEAD == {}
    monkeypatch.setattr(backend, "_checked", real)
    closed.unlink()
    backend.check_ahead(path)  # a result of "not ok" from ahead refuses the open, as a check on open would
    with backend._AHEAD_LOCK:
        thread, box = backend._AHEAD[str(path.resolve())]
    thread.join()
    box[:] = [["row 7 missing from index x"]]
    with pytest.raises(JournalError, match="integrity check failed: row 7 missing"):
        backend.SqliteJournal(path)


def test_a_journal_as_workrun_closed_it_is_not_read_again_and_any_change_is(tmp_path, monkeypatch):
    """The page-by-page check is skipped only for a file exactly as Workrun's last (checked, writing) close left
    it: same inode, size, mtime and ctime, no write-ahead log. A write (even with its mtime put back), a left
    write-ahead log or a bad record means every page is read again, and damage is refused."""
    from workrun.core.errors import JournalError
    from workrun.journal import sqlite as backend

    path = tmp_path / "journal.sqlite3"
    backend.SqliteJournal(path).close()
    checked_at = backend.vouched(path)
    assert checked_at is not None
    assert backend.vouched(path, checked_at + backend.CHECK_EVERY + 1) is None  # every page again, at least so often
    backend.check_ahead(path)
    assert backend._AHEAD == {}  # nothing to check ahead
    pragmas: list[str] = []
    real_connect = backend.sqlite3.connect

    def traced(*args, **kwargs):
        db = real_connect(*args, **kwargs)
        db.set_trace_callback(pragmas.append)
        return db

    monkeypatch.setattr(backend.sqlite3, "connect", traced)
    backend.SqliteJournal(path).close()
    assert not [p for p in pragmas if "quick_check" in p]
    # a write with the mtime put back: the ctime still tells
    st = path.stat()
    db = sqlite3.connect(path)
    page_size = db.execute("PRAGMA page_size").fetchone()[0]
    root = db.execute("SELECT rootpage FROM sqlite_master WHERE name = 'runs'").fetchone()[0]
    db.close()
    data = bytearray(path.read_bytes())
    data[(root - 1) * page_size:root * page_size] = b"\x13" * page_size
    path.write_bytes(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_size == st.st_size and backend.vouched(path) is None
    with pytest.raises(JournalError, match="integrity check failed|malformed"):
        backend.SqliteJournal(path)
    assert [p for p in pragmas if "quick_check" in p]
    # a write-ahead log left beside the file, or a record that is not a stat, vouches for nothing
    other = tmp_path / "other.sqlite3"
    backend.SqliteJournal(other).close()
    wal = other.with_name(other.name + "-wal")
    wal.write_bytes(b"")
    assert backend.vouched(other) is None
    wal.unlink()
    marker = other.with_name(other.name + ".closed")
    assert backend.vouched(other) is not None
    record = marker.read_text()
    for bad in ("not json", "[1, 2]", '{"stat": [], "checked_at": 1}'):
        marker.write_text(bad)
        assert backend.vouched(other) is None
    # a marker that is no small regular file is never read through or waited on (hostile review)
    marker.unlink()
    os.mkfifo(marker)
    assert backend.vouched(other) is None
    marker.unlink()
    marker.symlink_to("/dev/zero")
    assert backend.vouched(other) is None
    marker.unlink()
    marker.write_text(record + " " * 5000)
    assert backend.vouched(other) is None
