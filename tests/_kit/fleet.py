"""Many runs on a shared PostgreSQL journal, driven by real ``workrun worker`` processes (R-S2, R-S3).

Used by ``tests/e2e/test_workers.py`` and ``bench/bench_workers.py``. Every
run finally fails (its last node exits 3) after its other nodes succeeded, so
each succeeded call is compensated; each compensation appends one marker line
``{cid, name, run, t0, t1}`` (start and end, epoch seconds) to ``$TEST_LOG``.
Two shapes: a chain ``a -> b -> c -> boom`` and a diamond
``top -> (left, right) -> bottom -> boom``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

APP = """
[tool.workrun.apps.mark]
kind = "process"
entry = "main.py"
timeout = 60
compensation = { entry = "compensate.py", backoff = 0.05 }
"""

MAIN = """
from workrun_sdk import process
data = process.input()
if data.get("fail"):
    raise SystemExit(3)
process.result({"name": data["name"]})
"""

COMPENSATE = """
import json, os, time
from workrun_sdk import compensation
t0 = time.time()
ctx = compensation.context()
sleep = float(ctx.original_input.get("comp_sleep", 0) or 0)
if sleep:  # say it started (a test may kill its runner now), then take a while
    with open(os.environ["TEST_LOG"] + ".started." + ctx.original_result["name"], "w") as fh:
        fh.write(str(os.getpid()))
    time.sleep(sleep)
line = json.dumps({"cid": ctx.compensation_id, "name": ctx.original_result["name"],
                   "run": ctx.original_input.get("run"), "t0": t0, "t1": time.time()})
fd = os.open(os.environ["TEST_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
os.write(fd, (line + "\\n").encode())
os.close(fd)
compensation.result({"undone": ctx.original_result["name"]})
"""

# node -> the nodes it needs; "boom" fails, the others succeed and are compensated
SHAPES: dict[str, dict[str, list[str]]] = {
    "chain": {"a": [], "b": ["a"], "c": ["b"], "boom": ["c"]},
    "diamond": {"top": [], "left": ["top"], "right": ["top"], "bottom": ["left", "right"], "boom": ["bottom"]},
}


def _uv() -> str:
    import uv

    return uv.find_uv_bin()


def make_project(root: Path) -> Path:
    """Write and lock the marker App project under ``root``; return its directory."""
    project = root / "fleet-app"
    project.mkdir(parents=True, exist_ok=True)
    (project / "pyproject.toml").write_text('[project]\nname = "fleet-app"\nversion = "0.1.0"\n'
                                            'requires-python = ">=3.11"\ndependencies = []\n' + APP)
    (project / "main.py").write_text(textwrap.dedent(MAIN))
    (project / "compensate.py").write_text(textwrap.dedent(COMPENSATE))
    subprocess.run([_uv(), "lock", "--quiet"], cwd=project, check=True,
                   env={k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"})
    return project


def write_workflow(root: Path, shape: str, project: Path, *, comp_sleep: dict[str, float] | None = None) -> Path:
    """A workflow file of ``shape`` over the marker App; ``comp_sleep`` slows some nodes' compensation."""
    lines = [f'name = "fleet-{shape}"', "[inputs]", 'run = "?"']
    for node, needs in SHAPES[shape].items():
        sleep = (comp_sleep or {}).get(node, 0)
        fail = "true" if node == "boom" else "false"
        lines += [f"[nodes.{node}]", f'project = "{project}"', 'app = "mark"',
                  f'input = {{ name = "{node}", run = "{{{{ inputs.run }}}}", fail = {fail}, comp_sleep = {sleep} }}',
                  f"needs = {json.dumps(needs)}"]
    path = root / f"{shape}.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def submit(workflows: dict[str, Path], count: int) -> list[str]:
    """Record ``count`` runs alternating the shapes (in this process, on ``WORKRUN_JOURNAL``); return their ids."""
    from workrun.config.workflow import load_workflow
    from workrun.engine.driver import create_run
    from workrun.nodes import default_executors
    from workrun.runner.services import Services

    executors = default_executors()
    svc = Services(check=False)
    ids = []
    try:
        shapes = sorted(workflows)
        for i in range(count):
            shape = shapes[i % len(shapes)]
            spec, inputs = load_workflow(workflows[shape], {"run": f"r{i}"}, executors)
            ids.append(create_run(svc, spec, inputs))
    finally:
        svc.close()
    return ids


def start_worker(home: Path, log_dir: Path, name: str, *, concurrency: int = 2, idle_exit: float | None = None,
                 env: dict[str, str] | None = None, executors: int | None = None) -> subprocess.Popen[bytes]:
    """Start ``workrun worker`` with its own data directory (as if on its own machine); output to a file.

    ``executors=0`` starts a worker that only schedules runs (their calls run on other workers).
    """
    home.mkdir(parents=True, exist_ok=True)
    args = [sys.executable, "-m", "workrun", "--debug", "worker", "--concurrency", str(concurrency)]
    if executors is not None:
        args += ["--executors", str(executors)]
    if idle_exit is not None:
        args += ["--idle-exit", str(idle_exit)]
    out = open(log_dir / f"{name}.out", "wb")
    proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT,
                            env={**os.environ, "WORKRUN_HOME": str(home), **(env or {})})
    proc.log_path = log_dir / f"{name}.out"  # type: ignore[attr-defined]
    return proc


def wait_all_ended(journal: Any, run_ids: list[str], timeout: float, procs: list[Any] = ()) -> None:
    """Wait until every run ended and none has a compensation pending or running.

    Raises:
        AssertionError: timeout (naming how many are left), or a worker exited with an error.
    """
    end = time.monotonic() + timeout
    left = list(run_ids)
    while time.monotonic() < end:
        for p in procs:
            if p.poll() not in (None, 0):
                tail = p.log_path.read_text(errors="replace")[-3000:] if hasattr(p, "log_path") else ""
                raise AssertionError(f"worker pid {p.pid} exited {p.returncode}: {tail}")
        rows = journal._query(
            "SELECT r.run_id FROM runs r WHERE r.status = 'running' OR EXISTS (SELECT 1 FROM compensations c "
            "WHERE c.run_id = r.run_id AND c.status IN ('pending', 'running'))")
        waiting = {r["run_id"] for r in rows}
        left = [r for r in left if r in waiting]
        if not left:
            return
        time.sleep(0.5)
    raise AssertionError(f"{len(left)} of {len(run_ids)} runs not ended after {timeout:g} s: {left[:5]}")


def markers(log: Path) -> list[dict[str, Any]]:
    """The marker lines the compensations wrote."""
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def check_runs(journal: Any, run_ids: list[str], log: Path) -> dict[str, int]:
    """Assert every run failed and every compensation ran exactly once, in reverse dependency order.

    Returns:
        ``{"runs": n, "compensations": m}``.
    """
    marks = markers(log)
    by_cid: dict[str, list[dict[str, Any]]] = {}
    for m in marks:
        by_cid.setdefault(m["cid"], []).append(m)
    twice = {c: len(v) for c, v in by_cid.items() if len(v) != 1}
    assert not twice, f"compensations run more than once: {twice}"
    total = 0
    for run_id in run_ids:
        run = journal.run(run_id)
        assert run["status"] == "failed", (run_id, run["status"])
        comps = {c["node_key"]: c for c in journal.compensations(run_id)}
        shape = "diamond" if "top" in comps else "chain"
        expected = [k for k in SHAPES[shape] if k != "boom"]
        assert sorted(comps) == sorted(expected), (run_id, sorted(comps))
        for key, c in comps.items():
            assert c["status"] == "succeeded", (run_id, key, c["status"], c["reason"])
            assert len(by_cid.get(c["compensation_id"], [])) == 1, (run_id, key, "marker count")
            assert len(journal.attempts(c["compensation_id"])) == 1, (run_id, key, "attempts")
        for key, needs in SHAPES[shape].items():  # B needs A: B's compensation ended before A's began (R-C3)
            for dep in needs:
                if key == "boom":
                    continue
                later = by_cid[comps[dep]["compensation_id"]][0]
                first = by_cid[comps[key]["compensation_id"]][0]
                assert first["t1"] <= later["t0"], (run_id, f"{key} must be undone before {dep}", first, later)
        total += len(comps)
    return {"runs": len(run_ids), "compensations": total}


def stop_workers(procs: list[Any]) -> None:
    """SIGTERM each worker still running (it finishes the runs in hand), then wait up to 60 s each, else kill."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
