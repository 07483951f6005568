#!/usr/bin/env python3
"""Benchmark (issue 11): a chain of N ``http`` nodes through ``workrun run`` vs. the same N requests sent directly.

Both go to one loopback server (the shop service of ``demo_apps/``). Baseline, measured in the same
run: N POSTs with one ``httpx.Client``, a new connection each (as Workrun makes; no guard, no journal).
Prints the per-request overhead of Workrun in ms as the slope between an N-node and a 2N-node chain
(which cancels CLI start-up), and the ratio to the baseline.

    python bench/bench_http.py [--nodes 20] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]


def workflow(port: int, n: int) -> str:
    lines = [f'name = "http-chain"\nhttp_allow = ["127.0.0.1:{port}"]\n']
    for i in range(n):
        lines.append(f'[nodes.n{i}]\nkind = "http"\nmethod = "POST"\nurl = "http://127.0.0.1:{port}/api/orders"\n'
                     f'body = {{ i = {i} }}\n' + (f'needs = ["n{i - 1}"]\n' if i else ""))
    return "\n".join(lines)


def run_chain(tmp: Path, port: int, n: int) -> float:
    wf = tmp / f"chain{n}.toml"
    wf.write_text(workflow(port, n))
    env = {**os.environ, "WORKRUN_HOME": str(tmp / f"home{n}-{time.monotonic_ns()}")}
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "workrun", "run", str(wf)], env=env, check=True, capture_output=True)
    return time.perf_counter() - t0


def direct(port: int, n: int) -> float:
    t0 = time.perf_counter()
    with httpx.Client() as client:
        for i in range(n):
            client.post(f"http://127.0.0.1:{port}/api/orders", json={"i": i},
                        headers={"Connection": "close"}).raise_for_status()
    return time.perf_counter() - t0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    shop = subprocess.Popen([sys.executable, str(ROOT / "demo_apps" / "shop_service.py"), "0"],
                            stdout=subprocess.PIPE, text=True)
    try:
        port = int(shop.stdout.readline().rsplit(":", 1)[1])  # type: ignore[union-attr]
        with tempfile.TemporaryDirectory() as tmp:
            n = args.nodes
            small = statistics.median(run_chain(Path(tmp), port, n) for _ in range(args.repeat))
            big = statistics.median(run_chain(Path(tmp), port, 2 * n) for _ in range(args.repeat))
            base = statistics.median(direct(port, n) for _ in range(args.repeat))
    finally:
        shop.terminate()
        shop.wait()
    per_node = (big - small) / n
    per_direct = base / n
    print(f"workrun run, {n} http nodes: {small:.2f} s; {2 * n} nodes: {big:.2f} s")
    print(f"steady state: {per_node * 1000:.1f} ms per http node; direct httpx: {per_direct * 1000:.1f} ms per request")
    print(f"ratio (per node / per direct request): {per_node / per_direct:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
