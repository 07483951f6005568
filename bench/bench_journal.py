#!/usr/bin/env python3
"""Benchmark (issue 3): resume scan over a large journal, and the journal's cost per state transition.

1. Builds a synthetic journal of N operations (default 100k: N/10 finished runs
   of 10 calls, each with a compensation), plus one unfinished run, then times
   what ``workrun resume`` does before running anything: open (integrity check
   + migrations), find unfinished runs, settle in-flight calls. Baseline in the
   same run: a bare ``sqlite3`` full scan of the operations table.
2. Times one committed transition (``SqliteJournal.operation_running``/``finish_operation``,
   WAL, synchronous=NORMAL) against a bare sqlite3 UPDATE + COMMIT on the same file.

    python bench/bench_journal.py [--ops 100000] [--transitions 2000]
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import tempfile
import time
from pathlib import Path

from workrun.journal import SqliteJournal


def _insert(db: sqlite3.Connection, table: str, row: dict) -> None:
    values = [json.dumps(v) if isinstance(v, (dict, list)) else v for v in row.values()]
    db.execute(f"INSERT INTO {table} ({', '.join(row)}) VALUES ({', '.join('?' for _ in row)})", values)


def build(path: Path, n_ops: int) -> None:
    """Fill a migrated journal file with synthetic finished runs (bulk inserts, one transaction per 5000)."""
    now = time.time()
    per_run = 10
    db = sqlite3.connect(path, isolation_level=None)
    for start in range(0, n_ops, 5000):
        db.execute("BEGIN")
        for i in range(start, min(n_ops, start + 5000)):
            run_id = f"run_{i // per_run:012d}"
            if i % per_run == 0:
                _insert(db, "runs", {
                    "run_id": run_id, "workflow": "synthetic", "workflow_path": "/x.toml", "spec": {"nodes": {}},
                    "inputs": {}, "status": "failed", "created_at": now, "ended_at": now})
            op_id = f"op_{i:012d}"
            _insert(db, "operations", {
                "operation_id": op_id, "run_id": run_id, "node_key": f"n{i % per_run}", "app": "a", "project": "/p",
                "kind": "process", "config": {"name": "a", "entry": "main.py"}, "input": {"i": i},
                "result": {"ok": True}, "fingerprint": "f" * 64, "fingerprint_files": {"main.py": "0" * 64},
                "depends_on": [f"op_{i - 1:012d}"] if i % per_run else [], "status": "succeeded",
                "call_dir": "/gone", "created_at": now, "ended_at": now})
            _insert(db, "compensations", {
                "compensation_id": f"cmp_{i:012d}", "operation_id": op_id, "run_id": run_id, "node_key": "n",
                "status": "succeeded", "max_attempts": 4, "timeout": 120, "backoff": 1, "created_at": now,
                "updated_at": now})
        db.execute("COMMIT")
    db.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ops", type=int, default=100_000)
    ap.add_argument("--transitions", type=int, default=2000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        t0 = time.perf_counter()
        SqliteJournal(home / "journal.sqlite3").close()  # schema
        build(home / "journal.sqlite3", args.ops)
        size = (home / "journal.sqlite3").stat().st_size
        print(f"built a journal of {args.ops} operations ({size / 1e6:.1f} MB) in {time.perf_counter() - t0:.1f} s")

        from workrun.engine.recovery import recover_operations, unfinished_runs
        from workrun.runner.services import Services

        t0 = time.perf_counter()
        raw = sqlite3.connect(home / "journal.sqlite3")
        raw.execute("SELECT COUNT(*), MAX(length(input)) FROM operations").fetchone()
        raw.close()
        base = time.perf_counter() - t0

        t0 = time.perf_counter()
        svc = Services(home, check=True)
        _ = svc.journal  # open: quick_check + migrations
        t_open = time.perf_counter() - t0
        pending = unfinished_runs(svc)
        recover_operations(svc, None)
        t_scan = time.perf_counter() - t0
        print(f"resume scan: {t_scan * 1000:.0f} ms (open + integrity check {t_open * 1000:.0f} ms; "
              f"{len(pending)} unfinished runs found)")
        print(f"  baseline full table scan with bare sqlite3: {base * 1000:.0f} ms; ratio {t_scan / base:.2f}x")
        svc.close()

        n = args.transitions
        now = time.time()
        db = sqlite3.connect(home / "journal.sqlite3", isolation_level=None)
        db.execute("BEGIN")
        for i in range(2 * n):
            _insert(db, "operations", {
                "operation_id": f"new_{i:08d}", "run_id": "run_x", "node_key": "n", "app": "a", "project": "/p",
                "kind": "process", "config": {}, "input": {}, "fingerprint": "f", "fingerprint_files": {},
                "status": "starting", "call_dir": "/gone", "created_at": now})
        db.execute("COMMIT")
        db.close()
        j = SqliteJournal(home / "journal.sqlite3", check=False)
        t0 = time.perf_counter()
        for i in range(0, n, 2):  # the real transitions of a call: starting -> running -> succeeded
            j.operation_running(f"new_{i:08d}", pid=1, proc_start=None, started_at=now, deadline=now + 60)
            j.finish_operation(f"new_{i:08d}", status="succeeded", result={}, at=now)
        ours = (time.perf_counter() - t0) / n
        j.close()
        raw = sqlite3.connect(home / "journal.sqlite3", isolation_level=None)
        raw.execute("PRAGMA synchronous = NORMAL")
        t0 = time.perf_counter()
        for i in range(n, 2 * n, 2):
            for status in ("running", "succeeded"):
                raw.execute("BEGIN IMMEDIATE")
                raw.execute("UPDATE operations SET status = ? WHERE operation_id = ?", (status, f"new_{i:08d}"))
                raw.execute("COMMIT")
        bare = (time.perf_counter() - t0) / n
        raw.close()
        print(f"journal write per transition (state machine checked): {ours * 1000:.3f} ms (bare sqlite3 UPDATE+COMMIT "
              f"{bare * 1000:.3f} ms; ratio {ours / bare:.2f}x)")


if __name__ == "__main__":
    main()
