"""Benchmark: compensations per second with 1, 2 and 4 workers on one PostgreSQL journal (R-S2).

Usage::

    .venv/bin/python bench/bench_workers.py [--runs 200] [--workers 1,2,4] [--concurrency 2]

What it measures: a PostgreSQL server is started in a temp dir (the test kit's,
``tests/_kit/pg.py``: the distribution's binaries, loopback, a free port). For
each worker count W, a fresh database gets RUNS submitted runs (chains and
diamonds of a tiny marker App that finally fail, ``tests/_kit/fleet.py``), then
W ``workrun worker`` processes (each with its own data dir, ``--concurrency``
runs at once) drive them until every run ended and every compensation
succeeded. The time is from the workers' start to the last compensation's
marker, so it covers the whole of each run (its nodes, then its
compensations); compensations/s = compensations / that time. Each round is checked
like the test (each compensation exactly once, in reverse dependency order).

Prints compensations/s per W and the ratio to 1 worker measured in the same
invocation. Each worker drives ``--concurrency`` runs at once and runs as many
App processes at once (its executor slots claim any run's node calls and
compensation attempts), so W workers have W times as many runs in flight; most
of a run's time is waiting on App processes (start, exit, journal round trips),
so throughput grows with W until the cores are saturated — on the 2-core
development machine that happens at about 2 workers. Measured there while
others ran tests (200 runs, 700 compensations)::

    1 worker(s):    11.9 compensations/s   ratio to 1: 1.00
    2 worker(s):    13.1 compensations/s   ratio to 1: 1.11
    4 worker(s):    10.5 compensations/s   ratio to 1: 0.88

(The same machine, same hour, before calls were claimed one by one — each
worker ran all of a run's calls itself: 9.2, 13.4 and 10.7 compensations/s.)
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from _kit import fleet  # noqa: E402
from _kit.pg import PgServer, unavailable_reason  # noqa: E402


def one_round(server: PgServer, root: Path, workers: int, runs: int, concurrency: int) -> dict[str, float]:
    from workrun.journal import open_journal

    url = server.new_database()
    os.environ["WORKRUN_JOURNAL"] = url
    log = root / f"markers-{workers}.jsonl"
    os.environ["TEST_LOG"] = str(log)
    project = fleet.make_project(root / f"w{workers}")
    flows = {s: fleet.write_workflow(root / f"w{workers}", s, project) for s in fleet.SHAPES}
    ids = fleet.submit(flows, runs)
    journal = open_journal(root)
    t0 = time.time()
    procs = [fleet.start_worker(root / f"w{workers}" / f"home{i}", root, f"w{workers}-{i}",
                                concurrency=concurrency) for i in range(workers)]
    try:
        fleet.wait_all_ended(journal, ids, timeout=3600, procs=procs)
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            p.wait(timeout=120)
    got = fleet.check_runs(journal, ids, log)
    end = max(m["t1"] for m in fleet.markers(log))
    journal.close()
    server.drop_database(url)
    seconds = end - t0
    return {"seconds": seconds, "compensations": got["compensations"], "per_s": got["compensations"] / seconds}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=int(os.environ.get("BENCH_RUNS", "200")))
    ap.add_argument("--workers", default="1,2,4")
    ap.add_argument("--concurrency", type=int, default=2)
    args = ap.parse_args()
    reason = unavailable_reason()
    if reason:
        print(f"skipped: {reason}")
        return 0
    counts = [int(x) for x in args.workers.split(",")]
    server = PgServer().start()
    results = {}
    try:
        with tempfile.TemporaryDirectory(prefix="workrun-bench-workers-") as tmp:
            os.environ["WORKRUN_HOME"] = str(Path(tmp) / "submitter")
            os.environ.setdefault("WORKRUN_LEASE", "10")
            for w in counts:
                results[w] = one_round(server, Path(tmp), w, args.runs, args.concurrency)
                r = results[w]
                print(f"{w} worker(s): {r['compensations']} compensations of {args.runs} runs in {r['seconds']:.1f} s"
                      f" = {r['per_s']:.1f}/s", flush=True)
    finally:
        server.stop()
    base = results[counts[0]]["per_s"]
    print(f"\ncpu count: {os.cpu_count()}; worker --concurrency {args.concurrency}")
    for w in counts:
        print(f"{w} worker(s): {results[w]['per_s']:7.1f} compensations/s   ratio to {counts[0]}: "
              f"{results[w]['per_s'] / base:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
