"""Benchmark (issues 5, 14.4 c): tool calls per second of a scripted agent node, by launcher.

Usage::

    .venv/bin/python bench/bench_agent.py [--calls 200]

In one temporary data directory and one temporary Tool App project (a trivial
``echo`` tool, no compensation entry, declared twice: once with ``warm = true``),
``workrun run`` of a workflow whose scripted agent node makes N tool calls, each
a journaled operation in its own App process, measured three ways in the same
run: the fork server with ``warm = true`` (the tool module imported once in the
server), the fork server without warm, and ``WORKRUN_LAUNCH=spawn`` (a new
interpreter per call: the launcher before the fork server). Also the same tool
spawned N times directly with the venv python (no journal). Prints calls/s,
ms/call, the whole command's wall time and the calls' own span (first call's
start to the last call's end as journaled), and the speed-up over spawn.
Targets: >= 5x with warm, >= 2x without (calls' span).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

from _bytecode import compile_bytecode

ROOT = Path(__file__).resolve().parents[1]

PYPROJECT = """[project]
name = "bench-tools"
version = "0.1.0"
requires-python = ">=3.11"
dependencies = []

[tool.workrun.apps.bench-tool]
kind = "tool"
entry = "tools.py"
timeout = 60

[tool.workrun.apps.bench-tool-warm]
kind = "tool"
entry = "tools.py"
timeout = 60
warm = true
"""

TOOLS = """from workrun_sdk.tool import tool


@tool(name="echo", description="Return its input.")
def echo(i: int) -> dict:
    return {"i": i}
"""


def _uv() -> str:
    import uv

    return uv.find_uv_bin()


def _workflow(project: Path, calls: int, app: str = "bench-tool") -> str:
    steps = ",\n".join(f'  {{ tool = "echo", args = {{ i = {i} }} }}' for i in range(calls))
    return (f'name = "bench-agent"\n\n[nodes.agent]\nkind = "agent"\n'
            f'tools = [{{ project = "{project}", app = "{app}" }}]\nprompt = "echo"\nmax_steps = {calls + 1}\n'
            f"script = [\n{steps}\n]\n")


def _cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "workrun", *args], env=env, capture_output=True, text=True,
                          check=False, cwd=ROOT)


def _ts(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def main() -> int:
    """Run the benchmark and print its numbers; exit 1 if a run did not succeed."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200, help="tool calls per measurement (default 200)")
    calls = parser.parse_args().calls
    compile_bytecode()
    with tempfile.TemporaryDirectory(prefix="workrun-bench-") as tmp:
        base = Path(tmp)
        project = base / "bench_tools"
        project.mkdir()
        (project / "pyproject.toml").write_text(PYPROJECT)
        (project / "tools.py").write_text(TOOLS)
        clean = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "WORKRUN_CONCURRENCY")}
        subprocess.run([_uv(), "lock", "--quiet"], cwd=project, check=True, env=clean)
        env = {**clean, "WORKRUN_HOME": str(base / "home"), "NO_COLOR": "1"}
        ways = {"fork, warm = true": ("fork", "bench-tool-warm"), "fork, no warm": ("fork", "bench-tool"),
                "spawn (WORKRUN_LAUNCH=spawn)": ("spawn", "bench-tool")}
        for launch, app in ways.values():  # syncs the env, caches the tool listings
            warm = base / f"warm-{app}.toml"
            warm.write_text(_workflow(project, 1, app))
            res = _cli(["run", str(warm), "--json"], {**env, "WORKRUN_LAUNCH": launch})
            if res.returncode != 0:
                print(f"warm-up run failed: {res.stderr.strip() or res.stdout[-500:]}", file=sys.stderr)
                return 1

        measured: dict[str, tuple[float, float]] = {}
        for label, (launch, app) in ways.items():
            wf = base / f"bench-{app}.toml"
            wf.write_text(_workflow(project, calls, app))
            t0 = time.perf_counter()
            res = _cli(["run", str(wf), "--json"], {**env, "WORKRUN_LAUNCH": launch})
            wall = time.perf_counter() - t0
            if res.returncode != 0:
                print(f"benchmark run failed: {res.stderr.strip() or res.stdout[-500:]}", file=sys.stderr)
                return 1
            ops = json.loads(res.stdout)["operations"]
            assert len(ops) == calls and all(o["status"] == "succeeded" for o in ops), "not every call succeeded"
            span = _ts(max(o["ended_at"] for o in ops)) - _ts(min(o["started_at"] for o in ops))
            measured[label] = (wall, span)

        python = project / ".venv" / "bin" / "python"
        direct_env = {**clean, "PYTHONPATH": str(ROOT)}  # workrun_sdk from this checkout
        code = "import sys, json; import tools; print(json.dumps(tools.echo(int(sys.argv[1]))))"
        t0 = time.perf_counter()
        for i in range(calls):
            subprocess.run([str(python), "-c", code, str(i)], cwd=project, env=direct_env, check=True,
                           stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        direct = time.perf_counter() - t0

    def line(label: str, seconds: float) -> str:
        return f"{label:<58} {calls / seconds:8.1f} calls/s {1000 * seconds / calls:8.1f} ms/call"

    print(f"agent tool calls: {calls} (scripted model, one App process + journaled operation per call)")
    for label, (wall, span) in measured.items():
        print(line(f"workrun run, {label}, whole command", wall))
        print(line(f"workrun run, {label}, calls only", span))
    print(line("direct spawn of the venv python (no journal)", direct))
    spawn_wall, spawn_span = measured["spawn (WORKRUN_LAUNCH=spawn)"]
    for label in ("fork, warm = true", "fork, no warm"):
        wall, span = measured[label]
        print(f"speed-up {label} over spawn: {spawn_span / span:.2f}x (calls only), {spawn_wall / wall:.2f}x "
              f"(whole command)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
