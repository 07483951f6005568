#!/usr/bin/env python3
"""Benchmark (issue 2): a chain of N trivial Process Apps through ``workrun run`` vs. the bare App.

Baseline, measured in the same run: a loop that spawns the same App N times
with the project's venv python directly (same SDK, same call-directory
protocol, no journal, no scheduler). Prints the ratio and our overhead per
step in ms, both whole-command (CLI start-up included) and steady-state (the
slope between an N-node and a 2N-node chain, which cancels start-up).

    python bench/bench_chain.py [--nodes 50] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import uv

APP = """[project]
name = "trivial"
version = "0.1.0"
requires-python = ">=3.11"
dependencies = []

[tool.workrun.apps.trivial]
entry = "main.py"
compensation = { entry = "compensate.py" }
"""
MAIN = "from workrun_sdk import process\nprocess.result({'i': process.input().get('i', 0)})\n"


def make(tmp: Path) -> Path:
    project = tmp / "trivial"
    project.mkdir()
    (project / "pyproject.toml").write_text(APP)
    (project / "main.py").write_text(MAIN)
    (project / "compensate.py").write_text("print('undo')\n")
    subprocess.run([uv.find_uv_bin(), "lock", "--quiet"], cwd=project, check=True)
    subprocess.run([uv.find_uv_bin(), "sync", "--locked", "--quiet"], cwd=project, check=True)
    return project


def chain(tmp: Path, project: Path, n: int) -> Path:
    text = 'name = "chain"\n'
    for i in range(n):
        text += f'[nodes.n{i}]\nproject = "{project}"\napp = "trivial"\ninput = {{ i = {i} }}\n'
        if i:
            text += f'needs = ["n{i - 1}"]\n'
    path = tmp / f"chain{n}.toml"
    path.write_text(text)
    return path


def baseline(project: Path, n: int, sdk_dir: Path) -> float:
    python = project / ".venv" / "bin" / "python"
    t0 = time.perf_counter()
    for i in range(n):
        call = Path(tempfile.mkdtemp())
        (call / "input.json").write_text(json.dumps({"v": 1, "kind": "process", "input": {"i": i}}))
        env = {**os.environ, "PYTHONPATH": str(sdk_dir), "WORKRUN_CALL_DIR": str(call)}
        subprocess.run([str(python), "main.py"], cwd=project, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def workrun(wf: Path, home: Path) -> float:
    env = {**os.environ, "WORKRUN_HOME": str(home), "WORKRUN_CONCURRENCY": "4"}
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "workrun", "run", str(wf), "--json"], env=env,
                          capture_output=True, text=True)
    took = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"workrun run failed: {proc.stderr[-500:]}")
    return took


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=50)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    n = args.nodes
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        project = make(tmp)
        from workrun.runner.env import sdk_path

        home = tmp / "home"
        home.mkdir()
        sdk_dir = sdk_path(home)
        wf_n, wf_2n = chain(tmp, project, n), chain(tmp, project, 2 * n)
        workrun(chain(tmp, project, 1), home)  # warm: env marker, SDK copy, page cache
        base, full, double = [], [], []
        for _ in range(args.repeat):
            base.append(baseline(project, n, sdk_dir))
            full.append(workrun(wf_n, home))
            double.append(workrun(wf_2n, home))
        b, w, w2 = statistics.median(base), statistics.median(full), statistics.median(double)
        per_base = b / n * 1000
        slope = (w2 - w) / n * 1000
        print(f"chain of {n} trivial Process Apps (median of {args.repeat})")
        print(f"  baseline (venv python directly): {b:.3f} s  = {per_base:.1f} ms/step")
        print(f"  workrun run:                     {w:.3f} s  = {w / n * 1000:.1f} ms/step")
        print(f"  ratio workrun / baseline:        {w / b:.2f}x (whole command, CLI start-up included)")
        print(f"  overhead per step, whole command: {(w - b) / n * 1000:.1f} ms")
        print(f"  steady-state per step (slope {n}->{2 * n} nodes): {slope:.1f} ms "
              f"=> overhead {slope - per_base:.1f} ms/step, ratio {slope / per_base:.2f}x")


if __name__ == "__main__":
    main()
