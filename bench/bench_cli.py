#!/usr/bin/env python3
"""Benchmark (issue 14.4 d, R-P3): CLI start-up of ``workrun`` against ``python -c pass``.

Usage::

    .venv/bin/python bench/bench_cli.py [--repeat 15] [--runs 3]

In one temporary data directory holding a few real runs (a two-step chain of a
small Process App, run ``--runs`` times with ``workrun run``), each command is
started as a whole process ``--repeat`` times, the commands interleaved so a
loaded machine slows them all alike, and the medians are printed with their
ratio to ``python -c pass`` (the same interpreter, started the same way).
Commands: ``workrun --version``, ``workrun runs list``, ``workrun runs list
--json``, ``workrun runs show RUN``, ``workrun compensations list``, ``workrun check`` of the
tutorial workflow.
Targets: ``--version`` <= 100 ms, ``runs list`` <= 150 ms and ``check`` <= 150 ms (median; SPEC §24).
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
from _bytecode import compile_bytecode

APP = """[project]
name = "plusone"
version = "0.1.0"
requires-python = ">=3.11"
dependencies = []

[tool.workrun.apps.plusone]
entry = "main.py"
compensation = { entry = "compensate.py" }
"""
MAIN = "from workrun_sdk import process\nprocess.result({'value': process.input()['value'] + 1})\n"
WORKFLOW = """name = "bench-cli"
[nodes.first]
project = "{project}"
app = "plusone"
input = {{ value = 0 }}
[nodes.second]
project = "{project}"
app = "plusone"
needs = ["first"]
input = {{ value = "{{{{ nodes.first.result.value }}}}" }}
"""


def workrun_command() -> list[str]:
    """The installed console script next to this interpreter, else ``python -m workrun``."""
    script = Path(sys.executable).parent / "workrun"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "workrun"]


def prepare(tmp: Path, env: dict[str, str], runs: int) -> str:
    """A data dir with ``runs`` finished runs; return the last run's id."""
    project = tmp / "plusone"
    project.mkdir()
    (project / "pyproject.toml").write_text(APP)
    (project / "main.py").write_text(MAIN)
    (project / "compensate.py").write_text("print('undo')\n")
    subprocess.run([uv.find_uv_bin(), "lock", "--quiet"], cwd=project, check=True)
    subprocess.run([uv.find_uv_bin(), "sync", "--locked", "--quiet"], cwd=project, check=True)
    wf = tmp / "wf.toml"
    wf.write_text(WORKFLOW.format(project=project))
    run_id = ""
    for _ in range(runs):
        proc = subprocess.run([*workrun_command(), "run", str(wf), "--json"], env=env, capture_output=True,
                              text=True)
        if proc.returncode != 0:
            raise SystemExit(f"workrun run failed: {proc.stderr[-500:]}")
        run_id = json.loads(proc.stdout)["run_id"]
    return run_id


def timed(cmd: list[str], env: dict[str, str]) -> float:
    """Wall seconds of one whole process; it must exit 0."""
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    took = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr.decode()[-500:]}")
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15, help="Starts of each command (interleaved).")
    parser.add_argument("--runs", type=int, default=3, help="Runs in the journal.")
    args = parser.parse_args()
    compile_bytecode()
    with tempfile.TemporaryDirectory(prefix="bench-cli-") as tmp_name:
        tmp = Path(tmp_name)
        env = {**os.environ, "WORKRUN_HOME": str(tmp / "home"), "NO_COLOR": "1"}
        env.pop("VIRTUAL_ENV", None)
        run_id = prepare(tmp, env, args.runs)
        wr = workrun_command()
        commands = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "workrun --version": [*wr, "--version"],
            "workrun runs list": [*wr, "runs", "list"],
            "workrun runs list --json": [*wr, "runs", "list", "--json"],
            "workrun runs show RUN": [*wr, "runs", "show", run_id],
            "workrun compensations list": [*wr, "compensations", "list"],
            "workrun check TUTORIAL": [*wr, "check", str(Path(__file__).resolve().parents[1] / "demo_apps"
                                                        / "workflows" / "tutorial.toml")],
        }
        times: dict[str, list[float]] = {name: [] for name in commands}
        for cmd in commands.values():  # warm the file cache once
            timed(cmd, env)
        for _ in range(args.repeat):
            for name, cmd in commands.items():
                times[name].append(timed(cmd, env))
    base = statistics.median(times["python -c pass"])
    print(f"CLI start-up, {args.repeat} interleaved starts each, {args.runs} runs in the journal; "
          f"command: {' '.join(wr)}")
    print(f"{'command':<30} {'median ms':>10} {'min ms':>8} {'x python -c pass':>17}")
    for name, values in times.items():
        med = statistics.median(values)
        print(f"{name:<30} {med * 1000:>10.1f} {min(values) * 1000:>8.1f} {med / base:>17.2f}")
    version = statistics.median(times["workrun --version"]) * 1000
    listing = statistics.median(times["workrun runs list"]) * 1000
    check = statistics.median(times["workrun check TUTORIAL"]) * 1000
    print(f"targets: --version {version:.0f} ms (<= 100: {'met' if version <= 100 else 'NOT met'}), "
          f"runs list {listing:.0f} ms (<= 150: {'met' if listing <= 150 else 'NOT met'}), "
          f"check {check:.0f} ms (<= 150: {'met' if check <= 150 else 'NOT met'}); "
          f"python -c pass {base * 1000:.0f} ms")


if __name__ == "__main__":
    main()
