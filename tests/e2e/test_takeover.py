"""A frozen worker's run taken over on PostgreSQL: no call is ever started twice, and the frozen worker, once
woken, writes nothing more to the run (R-R3, SPEC §20 R-F2 fencing).

Worker A alone (``--concurrency 1``) claims a submitted run ``slow -> mid -> boom`` and
gets SIGSTOP while one of its calls runs (a node call, or a compensation attempt).
Worker B, on the same machine and the same data directory, takes the run over once
A's lease passes. The frozen worker's process is alive, so its calls must be decided
from their call directory and exit record (the App's supervisor lives on), never
started again; the run ends with no operation or attempt left in flight. Then A
is woken (SIGCONT): every row of the run is byte-identical before and after.
"""

from __future__ import annotations

import os
import signal
import subprocess
import textwrap
import time
from pathlib import Path

import pytest

from _kit import fleet
from _kit.processes import wait_for

APP = """
[tool.workrun.apps.slowapp]
kind = "process"
entry = "main.py"
timeout = 60
compensation = { entry = "compensate.py", backoff = 0.05 }
"""

# every start of a call appends one line to a file of its own, so a second start shows
MAIN = """
import os, time
from workrun_sdk import process
data = process.input()
log = os.environ["TEST_LOG"]
with open(log + ".call." + data["name"], "a") as fh:
    fh.write(str(os.getpid()) + "\\n")
time.sleep(float(data.get("sleep", 0)))
if data.get("fail"):
    raise SystemExit(3)
process.result({"name": data["name"]})
"""

COMPENSATE = """
import os, time
from workrun_sdk import compensation
ctx = compensation.context()
log = os.environ["TEST_LOG"]
with open(log + ".comp." + ctx.original_result["name"], "a") as fh:
    fh.write(str(os.getpid()) + "\\n")
time.sleep(float(ctx.original_input.get("comp_sleep", 0)))
compensation.result({"undone": ctx.original_result["name"]})
"""


def _project(root: Path) -> Path:
    project = root / "slow-app"
    project.mkdir()
    (project / "pyproject.toml").write_text('[project]\nname = "slow-app"\nversion = "0.1.0"\n'
                                            'requires-python = ">=3.11"\ndependencies = []\n' + APP)
    (project / "main.py").write_text(textwrap.dedent(MAIN))
    (project / "compensate.py").write_text(textwrap.dedent(COMPENSATE))
    subprocess.run([fleet._uv(), "lock", "--quiet"], cwd=project, check=True,
                   env={k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"})
    return project


def _workflow(root: Path, project: Path, frozen_in: str) -> Path:
    slow = 'sleep = 6' if frozen_in == "node" else 'comp_sleep = 6'
    text = f"""
        name = "takeover"
        [inputs]
        run = "?"
        [nodes.slow]
        project = "{project}"
        app = "slowapp"
        input = {{ name = "slow", {slow} }}
        [nodes.mid]
        project = "{project}"
        app = "slowapp"
        needs = ["slow"]
        input = {{ name = "mid" }}
        [nodes.boom]
        project = "{project}"
        app = "slowapp"
        needs = ["mid"]
        input = {{ name = "boom", fail = true }}
    """
    path = root / "takeover.toml"
    path.write_text(textwrap.dedent(text))
    return path


@pytest.mark.parametrize("frozen_in", ["node", "compensation"])
def test_a_frozen_workers_call_is_decided_not_started_again(pg_url, tmp_path, monkeypatch, frozen_in):
    """R-R3 across a takeover: A is frozen (SIGSTOP) mid-call; B takes the run over after the lease and decides
    the call from its exit record (A's App supervisor lives on); the App ran once; nothing is left running."""
    from workrun.journal import open_journal

    monkeypatch.setenv("WORKRUN_JOURNAL", pg_url)
    monkeypatch.setenv("WORKRUN_LEASE", "3")
    log = tmp_path / "log"
    monkeypatch.setenv("TEST_LOG", str(log))
    home = tmp_path / "home"  # shared by both workers (one machine)
    journal = open_journal(tmp_path)
    project = _project(tmp_path)
    [run_id] = fleet.submit({"takeover": _workflow(tmp_path, project, frozen_in)}, 1)
    started = Path(f"{log}.{'call' if frozen_in == 'node' else 'comp'}.slow")
    a = fleet.start_worker(home, tmp_path, "A", concurrency=1)
    b = None
    try:
        wait_for(started.exists, 120, "slow's call to start")
        os.kill(a.pid, signal.SIGSTOP)
        b = fleet.start_worker(home, tmp_path, "B", concurrency=1)
        fleet.wait_all_ended(journal, [run_id], timeout=180, procs=[b])  # B took over after the lease
        fleet.stop_workers([b])
        before = _rows_of(pg_url, run_id)
        os.kill(a.pid, signal.SIGCONT)  # A wakes up mid-call with a claim that is no longer its own
        wait_for(lambda: "lost its claim on run " + run_id in a.log_path.read_text(), 60,
                 "the woken worker to find out it lost the run")
        time.sleep(1.0)  # anything it would still write lands by now
        after = _rows_of(pg_url, run_id)
        assert a.poll() is None, a.log_path.read_text()[-2000:]  # it says so and goes on (no fail-stop)
    finally:
        for p in (a, b):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
        journal_runs = journal.run(run_id)
    out = (tmp_path / "B.out").read_text()
    assert b.returncode == 0, out[-3000:]
    assert journal_runs["status"] == "failed", out[-3000:]
    assert Path(f"{log}.call.slow").read_text().count("\n") == 1, out[-3000:]  # slow's App started once
    slow_ops = journal.operations(run_id, "slow")
    assert [o["status"] for o in slow_ops] == ["succeeded"], slow_ops
    assert not [o for o in journal.operations(run_id) if o["status"] in ("starting", "running")]
    comps = {c["node_key"]: c for c in journal.compensations(run_id)}
    assert {k: c["status"] for k, c in comps.items()} == {"slow": "succeeded", "mid": "succeeded"}, comps
    assert Path(f"{log}.comp.slow").read_text().count("\n") == 1  # its compensation ran once
    assert len(journal.attempts(comps["slow"]["compensation_id"])) == 1
    assert journal.run_claim(run_id)["takeovers"] == 1
    journal.close()
    assert after == before, a.log_path.read_text()[-3000:]  # R-F2: not one row written or changed by A


def _rows_of(url: str, run_id: str) -> dict[str, list[tuple]]:
    """Every row of the run, table by table (every table with a ``run_id`` column, and the run's attempts), as
    the database holds them."""
    import psycopg

    with psycopg.connect(url) as conn:
        tables = [r[0] for r in conn.execute(
            "SELECT table_name FROM information_schema.columns WHERE column_name = 'run_id' "
            "AND table_schema = 'public' ORDER BY table_name")]
        rows = {t: conn.execute(f"SELECT * FROM {t} WHERE run_id = %s ORDER BY rowid", (run_id,)).fetchall()
                for t in tables}
        rows["attempts"] = conn.execute(
            "SELECT a.* FROM attempts a JOIN compensations c USING (compensation_id) WHERE c.run_id = %s "
            "ORDER BY a.rowid", (run_id,)).fetchall()
    assert rows["runs"] and rows["operations"] and rows["messages"]
    return rows
