"""Driving a scheduler in the background from a test: start it, wait for a state, find a running call."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def spawn_cli(*args: Any, env: dict[str, str]) -> subprocess.Popen[str]:
    """Start ``workrun ARGS`` in the background (stdout/stderr captured)."""
    return subprocess.Popen([sys.executable, "-m", "workrun", *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, **env})


def wait_for(predicate: Callable[[], Any], timeout: float = 120.0, what: str = "condition",
             proc: subprocess.Popen[str] | None = None) -> Any:
    """Poll ``predicate`` every 50 ms until it returns something truthy (returned); fail on timeout or when
    ``proc`` exits first. The default deadline is generous: a loaded machine may take long to sync an App's
    environment and start it, and a deadline only costs time when the test fails."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"workrun exited {proc.returncode} while waiting for {what}: {proc.communicate()}")
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    detail = ""
    if proc is not None:
        proc.kill()
        detail = str(proc.communicate())
    raise AssertionError(f"timed out waiting for {what}: {detail}")


def current_view(workrun: Callable[..., Any]) -> dict[str, Any] | None:
    """``runs show --json`` of the newest run, or None before any run exists."""
    runs = workrun("runs", "list", "--json").json()
    if not runs:
        return None
    return workrun("runs", "show", runs[0]["run_id"], "--json").json()


def op_running(workrun: Callable[..., Any], node: str) -> dict[str, Any] | None:
    """``{"run_id": ...}`` once a call of ``node`` is ``running`` (its process started), else None.

    Reads the journal file directly (a read-only query takes milliseconds, a CLI call about a second on a
    loaded machine), so a short-lived call is not missed between two polls.
    """
    sql = "SELECT run_id FROM operations WHERE node_key = ? AND status = 'running' AND run_id IS NOT NULL"
    url = os.environ.get("WORKRUN_JOURNAL", "")
    if url.startswith("postgres"):  # a shared journal (R-S1): the same query on the server
        import psycopg

        with psycopg.connect(url) as conn:
            try:
                got = conn.execute(sql.replace("?", "%s"), (node,)).fetchone()
            except psycopg.errors.UndefinedTable:  # not migrated yet
                return None
        return {"run_id": got[0]} if got else None
    path = Path(os.environ["WORKRUN_HOME"]) / "journal.sqlite3"
    if not path.exists():
        return None
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5.0)
        try:
            row = db.execute(sql, (node,)).fetchone()
        finally:
            db.close()
    except sqlite3.OperationalError:  # created but not migrated yet
        return None
    return {"run_id": row[0]} if row else None
