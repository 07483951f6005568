#!/usr/bin/env python3
"""Benchmark (issues 2, 14.4 a/b, 33): a chain of N small Process Apps (value -> value + 1) through ``workrun run``.

Measured in the same run, repetitions interleaved; each figure is paired within a repetition (a ratio of two
runs made one after the other, a slope of two runs made one after the other), then the median over ``--repeat``
repetitions, with the spread:

(a) ``workrun run --json`` of an N-step chain, whole process (CLI start-up
    included), against a loop that spawns the App's venv python directly N
    times (the bare App reads and writes its JSON files itself). Target: <= 0.35x (issue 33; was 0.6x).
(b) steady-state per-step cost of workrun (slope between N and 2N steps, which
    cancels start-up) against a minimal loop in one process that runs the same
    App the way the fork server does (fork a supervisor, fork the App, exec its
    compiled entry, wait) with no journal. Target: <= 3 ms/step over it; the start-up (intercept of the line
    through N and 2N) <= 0.2 s.

Both launchers are measured (``WORKRUN_LAUNCH=fork``, the default, and ``spawn``). Beside the wall
times it prints the CPU time (user + sys of every process: runner, fork server, supervisors, Apps) per step
of workrun and of the minimal loop: on a machine with few cores, work off a call's path still competes
with the path for a core. Target: <= 2x the minimal loop's. The spawn launcher's steady state per step against the
bare spawn loop's: target <= 1.2x.

    python bench/bench_chain.py [--nodes 50] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
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
BARE = """import json, sys
with open(sys.argv[1]) as fh:
    value = json.load(fh)["value"]
with open(sys.argv[2], "w") as fh:
    json.dump({"value": value + 1}, fh)
"""

# Runs under the App's venv python with the SDK on PYTHONPATH: the fork server's work, minus everything else.
MINIMAL_LOOP = r"""
import json, os, sys, time, types, builtins
from workrun_sdk import _supervise, _wire, process  # what a fork server has loaded
project, base, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
entry = os.path.join(project, "main.py")
value = 0
t0 = time.perf_counter()
for i in range(n):
    call = os.path.join(base, f"c{i}")
    os.mkdir(call)
    _wire.write_json_atomic(os.path.join(call, "input.json"), {"v": 1, "kind": "process", "input": {"value": value}})
    supervisor = os.fork()
    if supervisor == 0:
        os.environ["WORKRUN_CALL_DIR"] = call
        app = os.fork()
        if app == 0:
            with open(entry, "rb") as fh:
                code = compile(fh.read(), entry, "exec")
            module = types.ModuleType("__main__")
            module.__dict__.update(__file__=entry, __builtins__=builtins)
            sys.modules["__main__"] = module
            exec(code, module.__dict__)
            os._exit(0)
        os.waitpid(app, 0)
        os._exit(0)
    os.waitpid(supervisor, 0)
    with open(os.path.join(call, "result.json")) as fh:
        value = json.load(fh)["result"]["value"]
assert value == n, value
print(time.perf_counter() - t0)
"""


def make(tmp: Path) -> Path:
    project = tmp / "plusone"
    project.mkdir()
    (project / "pyproject.toml").write_text(APP)
    (project / "main.py").write_text(MAIN)
    (project / "bare.py").write_text(BARE)
    (project / "compensate.py").write_text("print('undo')\n")
    subprocess.run([uv.find_uv_bin(), "lock", "--quiet"], cwd=project, check=True)
    subprocess.run([uv.find_uv_bin(), "sync", "--locked", "--quiet"], cwd=project, check=True)
    return project


def chain(tmp: Path, project: Path, n: int) -> Path:
    text = 'name = "chain"\n'
    for i in range(n):
        value = "0" if i == 0 else f'"{{{{ nodes.n{i - 1}.result.value }}}}"'
        text += f'[nodes.n{i}]\nproject = "{project}"\napp = "plusone"\ninput = {{ value = {value} }}\n'
        if i:
            text += f'needs = ["n{i - 1}"]\n'
    path = tmp / f"chain{n}.toml"
    path.write_text(text)
    return path


def bare_spawn_loop(project: Path, n: int, tmp: Path) -> float:
    """N spawns of the venv python running the bare App (it reads and writes JSON itself)."""
    python = str(project / ".venv" / "bin" / "python")
    base = Path(tempfile.mkdtemp(dir=tmp))
    (base / "v0.json").write_text(json.dumps({"value": 0}))
    t0 = time.perf_counter()
    for i in range(n):
        subprocess.run([python, "bare.py", str(base / f"v{i}.json"), str(base / f"v{i + 1}.json")], cwd=project,
                       check=True, stdin=subprocess.DEVNULL)
    took = time.perf_counter() - t0
    assert json.loads((base / f"v{n}.json").read_text())["value"] == n
    return took


def _cpu() -> float:
    """Seconds of CPU (user + sys) of every finished child process and its waited-for descendants."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


CPU: dict[str, list[float]] = {}
"""CPU seconds of each measured command, by the same keys as the wall times."""


def minimal_fork_loop(project: Path, n: int, sdk_dir: Path, tmp: Path) -> float:
    base = tempfile.mkdtemp(dir=tmp)
    env = {**os.environ, "PYTHONPATH": str(sdk_dir)}
    cpu = _cpu()
    out = subprocess.run([str(project / ".venv" / "bin" / "python"), "-c", MINIMAL_LOOP, str(project), base, str(n)],
                         env=env, capture_output=True, text=True, check=True, cwd=project)
    CPU.setdefault(f"min_{n}", []).append(_cpu() - cpu)
    return float(out.stdout.strip())


def workrun(wf: Path, home: Path, launch: str, n: int) -> float:
    env = {**os.environ, "WORKRUN_HOME": str(home), "WORKRUN_LAUNCH": launch}
    env.pop("VIRTUAL_ENV", None)
    cpu = _cpu()
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "workrun", "run", str(wf), "--json"], env=env,
                          capture_output=True, text=True)
    took = time.perf_counter() - t0
    CPU.setdefault(f"{launch}_{n}", []).append(_cpu() - cpu)
    if proc.returncode != 0:
        raise SystemExit(f"workrun run failed: {proc.stderr[-500:]}")
    ops = json.loads(proc.stdout)["operations"]
    assert ops[-1]["result"] == {"value": n}, ops[-1]
    return took


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=50)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    n = args.nodes
    compile_bytecode()
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        project = make(tmp)
        from workrun.runner.env import sdk_path

        home = tmp / "home"
        home.mkdir(mode=0o700)
        sdk_dir = sdk_path(home)
        wf_n, wf_2n = chain(tmp, project, n), chain(tmp, project, 2 * n)
        for launch in ("fork", "spawn"):
            workrun(chain(tmp, project, 1), home, launch, 1)  # warm: env marker, SDK copy, page cache
        t: dict[str, list[float]] = {k: [] for k in ("bare", "min_n", "min_2n", "fork_n", "fork_2n", "spawn_n",
                                                      "spawn_2n")}
        for _ in range(args.repeat):
            t["bare"].append(bare_spawn_loop(project, n, tmp))
            t["min_n"].append(minimal_fork_loop(project, n, sdk_dir, tmp))
            t["min_2n"].append(minimal_fork_loop(project, 2 * n, sdk_dir, tmp))
            for launch in ("fork", "spawn"):
                t[f"{launch}_n"].append(workrun(wf_n, home, launch, n))
                t[f"{launch}_2n"].append(workrun(wf_2n, home, launch, 2 * n))
        # Paired per repetition (the runs of one repetition are adjacent in time, so a slow spell of the machine
        # moves both sides of a ratio or a slope alike), then the median over repetitions; the spread is printed.
        reps = range(args.repeat)
        m = {k: statistics.median(v) for k, v in t.items()}
        bare = m["bare"]

        cpu_t = {f"{k}_{size}": CPU[f"{k}_{count}"] for k in ("min", "fork", "spawn")
                 for size, count in (("n", n), ("2n", 2 * n))}

        def slope(key: str, i: int, table: dict[str, list[float]] = t) -> float:
            """Repetition ``i``'s slope from n to 2n steps of ``table[key_*]`` (seconds), in ms per step."""
            return (table[f"{key}_2n"][i] - table[f"{key}_n"][i]) / n * 1000

        def spread(values: list[float], fmt: str, unit: str) -> str:
            """``MEDIAN UNIT (repetitions LOW to HIGH)``."""
            return (f"{format(statistics.median(values), fmt)}{unit} (repetitions {format(min(values), fmt)} to "
                    f"{format(max(values), fmt)})")

        min_slopes = [slope("min", i) for i in reps]
        min_slope = statistics.median(min_slopes)
        print(f"chain of {n} Process Apps (value -> value + 1), {args.repeat} repetitions, interleaved; "
              "each figure paired within a repetition, then the median")
        print(f"  bare spawn loop (venv python, App does its own JSON): {bare:.3f} s = {bare / n * 1000:.1f} ms/step")
        print(f"  minimal fork loop (supervisor + App fork, no journal): {m['min_n']:.3f} s; "
              f"slope {n}->{2 * n}: {min_slope:.2f} ms/step")
        for launch in ("fork", "spawn"):
            ratios = [t[f"{launch}_n"][i] / t["bare"][i] for i in reps]
            slopes = [slope(launch, i) for i in reps]
            over = [slopes[i] - min_slopes[i] for i in reps]
            intercepts = [t[f"{launch}_n"][i] - slopes[i] * n / 1000 for i in reps]
            print(f"  workrun run --json, WORKRUN_LAUNCH={launch}:")
            print(f"    (a) whole process {m[f'{launch}_n']:.3f} s; to the bare spawn loop {spread(ratios, '.2f', 'x')}"
                  + (" (target <= 0.35x)" if launch == "fork" else ""))
            print(f"    (b) slope {n}->{2 * n}: {statistics.median(slopes):.2f} ms/step; over the minimal fork loop "
                  f"{spread(over, '+.2f', ' ms/step')}" + (" (target <= +3)" if launch == "fork" else "")
                  + f"; start-up (intercept) {spread(intercepts, '.3f', ' s')}"
                  + (" (target <= 0.2)" if launch == "fork" else ""))
            if launch == "spawn":
                steady = [slopes[i] / (t["bare"][i] / n * 1000) for i in reps]
                print(f"    steady state to the bare spawn loop's per step: {spread(steady, '.2f', 'x')} "
                      "(target <= 1.2x)")
        cpu_min = [slope("min", i, cpu_t) for i in reps]
        cpu = {launch: [slope(launch, i, cpu_t) for i in reps] for launch in ("fork", "spawn")}
        print(f"  CPU per step (user + sys of every process, slope {n}->{2 * n}; on this machine's "
              f"{os.cpu_count()} cores):")
        print(f"    minimal fork loop {statistics.median(cpu_min):.2f} ms/step; workrun fork "
              f"{statistics.median(cpu['fork']):.2f} ms/step; to the minimal loop "
              f"{spread([cpu['fork'][i] / cpu_min[i] for i in reps], '.2f', 'x')} (target <= 2x); workrun spawn "
              f"{statistics.median(cpu['spawn']):.2f} ms/step")


if __name__ == "__main__":
    main()
