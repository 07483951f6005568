#!/usr/bin/env python3
"""Benchmark (issue 13, R-U8): server time of the dashboard's Runs page with 10,000 runs in the journal.

Fills a fresh journal (schema through the journal's migrations, then bare inserts: N runs of a 3-node workflow, each
failed run with 2 operations and their compensations, statuses mixed), then times in-process
(Starlette's TestClient, so no network or browser time is counted):

- ``GET /`` (the first page of 50, newest first, with the roll-up and the workflow filter list),
- ``GET /?status=failed&page=50`` (a filtered page deep in the list),
- ``GET /api/runs?limit=50`` (the same page as JSON),
- ``GET /compensations`` (the operator's queue: the most urgent 100 of all compensations).

Baseline measured in the same run on the same file: a bare ``sqlite3`` select of the same page
(runs ORDER BY created_at DESC LIMIT 50 plus their compensation counts). Target: < 300 ms median.

    python bench/bench_ui.py [--runs 10000] [--repeat 30]
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path


def _insert(db: sqlite3.Connection, table: str, row: dict) -> None:
    values = [json.dumps(v) if isinstance(v, (dict, list)) else v for v in row.values()]
    db.execute(f"INSERT INTO {table} ({', '.join(row)}) VALUES ({', '.join('?' for _ in row)})", values)


def build(home: Path, n_runs: int) -> None:
    """The schema through the journal (migrations), then bulk rows with bare inserts (no bulk API exists)."""
    from workrun.journal import SqliteJournal

    SqliteJournal(home / "journal.sqlite3").close()
    db = sqlite3.connect(home / "journal.sqlite3", isolation_level=None)
    db.execute("BEGIN")
    now = time.time() - n_runs
    statuses = ["failed", "succeeded", "failed", "stopped", "failed"]
    comp_status = ["succeeded", "failed", "blocked", "pending", "skipped"]
    spec = {"nodes": {k: {"key": k, "needs": [p] if p else []} for k, p in (("a", None), ("b", "a"), ("c", "b"))}}
    for i in range(n_runs):
        run_id = f"run_{i:012d}"
        status = statuses[i % len(statuses)]
        _insert(db, "runs", {"run_id": run_id, "workflow": f"workflow-{i % 7}", "workflow_path": "/w.toml",
                             "spec": spec, "inputs": {"i": i}, "status": status, "created_at": now + i,
                             "ended_at": now + i + 1.5})
        for n, key in enumerate("abc"):
            _insert(db, "nodes", {"run_id": run_id, "node_key": key, "position": n, "status": "succeeded"})
        if status != "failed":
            continue
        for n, key in enumerate("ab"):
            op_id = f"op_{i:010d}{n}"
            _insert(db, "operations", {
                "operation_id": op_id, "run_id": run_id, "node_key": key, "app": "a", "project": "/p",
                "kind": "process", "config": {}, "input": {"i": i}, "result": {"ok": True}, "fingerprint": "f",
                "fingerprint_files": {}, "status": "succeeded", "call_dir": "/c", "created_at": now + i})
            _insert(db, "compensations", {
                "compensation_id": f"cmp_{i:010d}{n}", "operation_id": op_id, "run_id": run_id, "node_key": key,
                "status": comp_status[(i + n) % len(comp_status)], "max_attempts": 4, "timeout": 60, "backoff": 1,
                "created_at": now + i, "updated_at": now + i})
    db.execute("COMMIT")
    db.close()


def median_ms(fn, repeat: int) -> float:
    fn()  # warm up
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=10000)
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        home.mkdir(mode=0o700)
        os.environ["WORKRUN_HOME"] = str(home)
        t0 = time.perf_counter()
        build(home, args.runs)
        print(f"built a journal of {args.runs} runs in {time.perf_counter() - t0:.1f} s")

        from starlette.testclient import TestClient

        from workrun.ui.app import create_app

        token = "bench-token"
        app = create_app(data_dir=home, token=token, port=8421)
        with TestClient(app, base_url="http://127.0.0.1:8421") as client:
            assert client.get(f"/?token={token}", follow_redirects=False).status_code == 303

            def page(url: str):
                def get() -> None:
                    r = client.get(url)
                    assert r.status_code == 200, r.text[:200]
                return get

            first = median_ms(page("/"), args.repeat)
            deep = median_ms(page("/?status=failed&page=50"), args.repeat)
            api = median_ms(page("/api/runs?limit=50"), args.repeat)
            queue = median_ms(page("/compensations"), max(5, args.repeat // 3))
            html = client.get("/").text
            assert html.count('class="run-row"') == 50

        db = sqlite3.connect(f"file:{home / 'journal.sqlite3'}?mode=ro", uri=True)

        def bare() -> None:
            rows = db.execute("SELECT run_id, workflow, workflow_path, status, eval, rerun_of, created_at, ended_at "
                              "FROM runs ORDER BY created_at DESC, rowid DESC LIMIT 50").fetchall()
            ids = [r[0] for r in rows]
            db.execute(f"SELECT run_id, status, COUNT(*) FROM compensations WHERE run_id IN "
                       f"({','.join('?' for _ in ids)}) GROUP BY run_id, status", ids).fetchall()

        baseline = median_ms(bare, args.repeat)
        db.close()
    print(f"runs page, first page of 50 (GET /):           {first:7.2f} ms median")
    print(f"runs page, filtered, page 50 (status=failed):   {deep:7.2f} ms median")
    print(f"/api/runs?limit=50:                              {api:7.2f} ms median")
    print(f"compensations queue (most urgent 100 of all):   {queue:7.2f} ms median")
    print(f"baseline: bare sqlite3 select of the same page: {baseline:7.2f} ms median")
    print(f"ratio runs page / baseline: {first / baseline:.1f}x; target < 300 ms: "
          f"{'met' if max(first, deep) < 300 else 'NOT met'}")


if __name__ == "__main__":
    main()
