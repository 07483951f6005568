"""Journal faults (issue 3): a failed write stops the runner with one clear line and loses nothing;
a damaged journal is refused without writes; a newer schema is refused naming both versions."""

from __future__ import annotations

import sqlite3

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


def test_a_damaged_table_page_is_refused_where_it_is_read_without_writes(workrun, isolated_env):
    """The open reads only the header and the schema (O(1), issue 14); damage in a table's page is found where
    that page is read: one clear line, exit 1, and the file stays as it was."""
    assert workrun("runs", "list").code == 0
    path = isolated_env / "journal.sqlite3"
    db = sqlite3.connect(path)
    page_size = db.execute("PRAGMA page_size").fetchone()[0]
    root = db.execute("SELECT rootpage FROM sqlite_master WHERE name = 'runs'").fetchone()[0]
    db.close()
    data = bytearray(path.read_bytes())
    data[(root - 1) * page_size:root * page_size] = b"\x13" * page_size  # clobber the runs table's root page
    path.write_bytes(bytes(data))
    for args in (("runs", "list"), ("resume",)):
        res = workrun(*args)
        assert res.code == 1, (args, res)
        assert res.err.count("\n") == 1 and res.err.startswith("error: ") and str(path) in res.err, res.err
        assert "Traceback" not in res.err
    assert path.read_bytes() == bytes(data)


def test_newer_schema_is_refused(workrun, isolated_env):
    assert workrun("runs", "list").code == 0
    db = sqlite3.connect(isolated_env / "journal.sqlite3")
    db.execute("PRAGMA user_version = 99")
    db.commit()
    db.close()
    res = workrun("runs", "list")
    assert res.code == 1 and "schema version 99 is newer" in res.err
