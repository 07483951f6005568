"""Benchmark: tool calls per second of an agent node, against spawning the tool directly (issue 5).

Usage::

    .venv/bin/python bench/bench_agent.py [--calls 200]

What it measures, in one temporary data directory and one temporary Tool App
project (a trivial ``echo`` tool, no compensation entry):

1. ``workrun run`` of a workflow whose scripted agent node makes N tool calls.
   Each call is a journaled operation (intent, started, finished committed to
   SQLite) and its own App process (``.venv/bin/python -m workrun_sdk._launch``).
   Reported twice: the whole command's wall time per call (includes CLI start,
   tool discovery from cache, run bookkeeping) and the calls' own span, from
   the first call's start to the last call's end as journaled.
2. The same tool spawned N times directly with the project's venv python
   (``python -c "import tools; tools.echo(i)"``), sequentially, no journal.

Prints calls/s and ms/call for each and the ratio workrun / direct. Numbers
depend on the machine; nothing is written outside the temporary directory.
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
"""

TOOLS = """from workrun_sdk.tool import tool


@tool(name="echo", description="Return its input.")
def echo(i: int) -> dict:
    return {"i": i}
"""


def _uv() -> str:
    import uv

    return uv.find_uv_bin()


def _workflow(project: Path, calls: int) -> str:
    steps = ",\n".join(f'  {{ tool = "echo", args = {{ i = {i} }} }}' for i in range(calls))
    return (f'name = "bench-agent"\n\n[nodes.agent]\nkind = "agent"\n'
            f'tools = [{{ project = "{project}", app = "bench-tool" }}]\nprompt = "echo"\nmax_steps = {calls + 1}\n'
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
    with tempfile.TemporaryDirectory(prefix="workrun-bench-") as tmp:
        base = Path(tmp)
        project = base / "bench_tools"
        project.mkdir()
        (project / "pyproject.toml").write_text(PYPROJECT)
        (project / "tools.py").write_text(TOOLS)
        clean = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "WORKRUN_CONCURRENCY")}
        subprocess.run([_uv(), "lock", "--quiet"], cwd=project, check=True, env=clean)
        env = {**clean, "WORKRUN_HOME": str(base / "home"), "NO_COLOR": "1"}
        warm = base / "warm.toml"
        warm.write_text(_workflow(project, 1))
        res = _cli(["run", str(warm), "--json"], env)  # syncs the env, caches the tool listing
        if res.returncode != 0:
            print(f"warm-up run failed: {res.stderr.strip() or res.stdout[-500:]}", file=sys.stderr)
            return 1

        wf = base / "bench.toml"
        wf.write_text(_workflow(project, calls))
        t0 = time.perf_counter()
        res = _cli(["run", str(wf), "--json"], env)
        wall = time.perf_counter() - t0
        if res.returncode != 0:
            print(f"benchmark run failed: {res.stderr.strip() or res.stdout[-500:]}", file=sys.stderr)
            return 1
        ops = json.loads(res.stdout)["operations"]
        assert len(ops) == calls and all(o["status"] == "succeeded" for o in ops), "not every call succeeded"
        span = _ts(max(o["ended_at"] for o in ops)) - _ts(min(o["started_at"] for o in ops))

        python = project / ".venv" / "bin" / "python"
        direct_env = {**clean, "PYTHONPATH": str(ROOT)}  # workrun_sdk from this checkout
        code = "import sys, json; import tools; print(json.dumps(tools.echo(int(sys.argv[1]))))"
        t0 = time.perf_counter()
        for i in range(calls):
            subprocess.run([str(python), "-c", code, str(i)], cwd=project, env=direct_env, check=True,
                           stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        direct = time.perf_counter() - t0

    def line(label: str, seconds: float) -> str:
        return f"{label:<44} {calls / seconds:8.1f} calls/s {1000 * seconds / calls:8.1f} ms/call"

    print(f"agent tool calls: {calls} (scripted model, one App process + journaled operation per call)")
    print(line("workrun run, whole command", wall))
    print(line("workrun run, first call start -> last call end", span))
    print(line("direct spawn of the venv python", direct))
    print(f"ratio workrun/direct: {wall / direct:.2f}x (whole command), {span / direct:.2f}x (calls only)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
