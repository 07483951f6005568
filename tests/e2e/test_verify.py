"""``workrun verify`` (R-V1): scenarios per compensable node, the idempotency re-run, the check App, --crash,
verify runs kept out of ``runs list`` unless --all, and a compensation that is not idempotent caught."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TUTORIAL = ROOT / "demo_apps" / "workflows" / "tutorial.toml"

CHECK_APP = """
[tool.workrun.apps.clean]
kind = "process"
entry = "check.py"
"""
CHECK = """
import json, os
from pathlib import Path
from workrun_sdk import process
data = process.input()
with open(os.environ["CHECK_LOG"], "a") as fh:
    fh.write(json.dumps({"failed_after": data["failed_after"], "n": len(data["operations"])}) + "\\n")
left = [o["result"]["file_path"] for o in data["operations"] if "file_path" in (o["result"] or {})
        and Path(o["result"]["file_path"]).exists()]
if left:
    raise SystemExit("left behind: " + ", ".join(left))
process.result({"clean": True})
"""

ONCE_APP = """
[tool.workrun.apps.once]
kind = "process"
entry = "main.py"
compensation = { entry = "undo.py", max_retries = 0 }
"""
ONCE_MAIN = """
import os, uuid
from workrun_sdk import process
path = os.path.join(os.environ["CHECK_DIR"], uuid.uuid4().hex + ".txt")
open(path, "w").write("x")
process.result({"file_path": path})
"""
ONCE_UNDO = """
import os
from workrun_sdk import compensation
os.remove(compensation.context().original_result["file_path"])   # not idempotent: a second run fails
"""


def test_the_tutorial_verifies_with_a_check_app_and_verify_runs_are_hidden(workrun, make_project, tmp_path):
    check = make_project("checker", CHECK_APP, {"check.py": CHECK})
    env = {"CHECK_LOG": str(tmp_path / "check.log")}
    res = workrun("verify", TUTORIAL, "--check", f"{check}:clean", env=env)
    assert res.code == 0, res
    assert res.out.splitlines() == ["create  ok", "verify: 1 of 1 scenario(s) hold"], res.out
    seen = [json.loads(line) for line in (tmp_path / "check.log").read_text().splitlines()]
    assert seen == [{"failed_after": "create", "n": 1}]
    as_json = workrun("verify", TUTORIAL, "--json")
    [scenario] = as_json.json()
    assert scenario["node"] == "create" and scenario["status"] == "ok" and scenario["failures"] == []
    shown = workrun("runs", "show", scenario["runs"][0], "--json").json()
    assert shown["verify"] is True and shown["status"] == "failed" and "injected" in shown["reason"]
    assert [n["status"] for n in shown["nodes"]] == ["succeeded", "skipped"]  # boom never ran
    assert workrun("runs", "list", "--json").json() == []
    assert len(workrun("runs", "list", "--json", "--all").json()) == 2
    table = workrun("runs", "list", "--all").out.splitlines()[1:]  # the table marks them as verify's
    assert len(table) == 2 and all("  cleanup-tutorial (verify)  " in line for line in table), table
    # their compensations are left out of the operator's list the same way (new-user review), unless asked for
    assert workrun("compensations", "list", "--json").json() == []
    assert len(workrun("compensations", "list", "--all", "--json").json()) == 2
    assert len(workrun("compensations", "list", "--run", scenario["runs"][0], "--json").json()) == 1


def test_a_compensation_that_is_not_idempotent_is_caught(workrun, make_project, tmp_path, write_workflow):
    once = make_project("once", ONCE_APP, {"main.py": ONCE_MAIN, "undo.py": ONCE_UNDO})
    wf = write_workflow("once", f'[nodes.make]\nproject = "{once}"\napp = "once"\n')
    res = workrun("verify", wf, "--json", env={"CHECK_DIR": str(tmp_path)})
    assert res.code == 1, res
    [scenario] = res.json()
    assert scenario["status"] == "failed" and "not idempotent" in scenario["failures"][0], scenario


def test_crash_at_every_compensation_point_then_resume(workrun, tmp_path):
    res = workrun("verify", TUTORIAL, "--crash", "--json")
    assert res.code == 0, res
    [scenario] = res.json()
    # the runner really was killed at each compensation-phase point in turn, then resumed (conformance review:
    # ``run.failed`` and ``comp.status`` were left out)
    assert scenario["killed_at"] == ["run.failed", "comp.status", "attempt.intent", "attempt.started",
                                     "attempt.finished"], scenario
    shown = workrun("runs", "show", scenario["runs"][0], "--json").json()
    assert any("resuming" in m["text"] or "recovered" in m["text"] or "never started" in m["text"]
               for m in shown["messages"] + [m for n in shown["nodes"] for m in n["messages"]]), shown["messages"]
    create = next(o for o in shown["operations"] if o["node_key"] == "create")
    assert create["compensation"]["status"] == "succeeded"
    assert [a["status"] for a in create["compensation"]["attempts"]].count("succeeded") == 1
    # the text keeps R-V1's scenario line exactly (``N  ok``: conformance review); the kill points are in the summary
    text = workrun("verify", TUTORIAL, "--crash").out.splitlines()
    assert text[0] == "create  ok" and len(text) == 2, text
    assert text[1].startswith(f"verify: 1 of 1 scenario(s) hold (each run killed at {scenario['killed_at'][0]}"), text


@pytest.mark.parametrize("args, field", [
    (["--node", "nope"], "--node"), (["--check", "nocolon"], "--check"),
    # a Tool App cannot be a check (API review: an internal error, after a run was made)
    (["--check", f"{ROOT / 'demo_apps' / 'cleanup_demo'}:cleanup-tool"], "--check"),
])
def test_bad_arguments_exit_2(cli, args, field):
    res = cli("verify", TUTORIAL, *args)
    assert res.code == 2 and res.err.startswith(f"error: {field}: "), res
    assert cli("runs", "list", "--all", "--json").json() == []  # before any scenario ran


def test_crash_with_nothing_to_compensate_holds_as_without_it(workrun, make_project, write_workflow):
    """R-V1/R-V3 (API review): a scenario whose calls owe no compensation has no compensation-phase point to
    kill at; with --crash it holds as it does without, and no Python warning reaches stderr."""
    project = make_project("plain", '[tool.workrun.apps.plain]\nentry = "main.py"\n',
                           {"main.py": "from workrun_sdk import process\nprocess.result({})\n"})
    wf = write_workflow("plain", f'[nodes.x]\nproject = "{project}"\napp = "plain"\n')
    for extra in ([], ["--crash"]):
        res = workrun("verify", wf, "--node", "x", *extra)
        assert (res.code, res.out.splitlines()[0], res.err) == (0, "x  ok", ""), res


FORGETFUL_APP = """
[tool.workrun.apps.make]
kind = "process"
entry = "main.py"
compensation = { entry = "undo.py", max_retries = 0 }
"""
MAKE = """
import os, uuid
from workrun_sdk import process
path = os.path.join(os.environ["CHECK_DIR"], process.input()["name"] + "-" + uuid.uuid4().hex[:6] + ".txt")
open(path, "w").write("x")
process.result({"file_path": path})
"""
FORGETFUL_UNDO = """
import os
from pathlib import Path
from workrun_sdk import compensation
ctx = compensation.context()
if ctx.original_input["name"] != "b":   # forgets b's file
    Path(ctx.original_result["file_path"]).unlink(missing_ok=True)
"""


def test_a_three_node_chain_holds_and_a_forgotten_file_is_caught(workrun, make_project, write_workflow, tmp_path):
    """A correct chain: every scenario ok, exit 0; a compensation that forgets a file: FAILED by the check App."""
    careful_undo = FORGETFUL_UNDO.replace('if ctx.original_input["name"] != "b":   # forgets b\'s file\n    ', "")
    good = make_project("good", FORGETFUL_APP, {"main.py": MAKE, "undo.py": careful_undo})
    bad = make_project("bad", FORGETFUL_APP, {"main.py": MAKE, "undo.py": FORGETFUL_UNDO})
    env = {"CHECK_DIR": str(tmp_path)}
    for project, want in ((good, 0), (bad, 1)):
        wf = write_workflow(f"chain-{project.name}", "".join(
            f'[nodes.{n}]\nproject = "{project}"\napp = "make"\ninput = {{ name = "{n}" }}\n'
            + (f'needs = ["{p}"]\n' if p else "") for n, p in (("a", None), ("b", "a"), ("c", "b"))))
        res = workrun("verify", wf, "--check", f"{ROOT / 'demo_apps' / 'leftovers_check'}:leftovers", "--json",
                      env=env)
        assert res.code == want, res
        by_node = {s["node"]: s for s in res.json()}
        assert sorted(by_node) == ["a", "b", "c"]
        if want == 0:
            assert all(s["status"] == "ok" for s in by_node.values())
        else:  # failed after a: only a's file, which is removed; after b or c, b's file is left behind
            assert by_node["a"]["status"] == "ok"
            for node in ("b", "c"):
                assert by_node[node]["status"] == "failed"
                assert "check App leftovers says the world is not clean" in by_node[node]["failures"][0]
                assert "left behind" in by_node[node]["failures"][0]


RESOURCE_MAKE = """
import os
from workrun_sdk import process
path = os.path.join(os.environ["CHECK_DIR"], "booked.txt")
open(path, "w").write("x")
process.resource("file", path)
process.result({"booked": True})
"""


def test_the_demo_check_app_sees_a_file_recorded_as_a_resource(workrun, make_project, write_workflow, tmp_path):
    """New-user review: a compensation that undoes nothing passed when the call's file was a resource, not a
    ``file_path`` in its result: the demo check App reads ``resources`` of kind ``file`` too."""
    lazy = make_project("lazy", FORGETFUL_APP, {"main.py": RESOURCE_MAKE, "undo.py": "print('pretend')\n"})
    wf = write_workflow("lazy", f'[nodes.book]\nproject = "{lazy}"\napp = "make"\n')
    res = workrun("verify", wf, "--check", f"{ROOT / 'demo_apps' / 'leftovers_check'}:leftovers", "--json",
                  env={"CHECK_DIR": str(tmp_path)})
    assert res.code == 1, res
    [scenario] = res.json()
    assert scenario["status"] == "failed" and "left behind" in scenario["failures"][0], scenario
    assert str(tmp_path / "booked.txt") in scenario["failures"][0]


def test_a_node_that_never_succeeds_is_not_verified(workrun, marker_project, write_workflow, tmp_path):
    """A scenario injects its failure right after its node succeeds: a node that fails by itself gives nothing
    to verify, and its scenario says so instead of ``ok`` (new-user review)."""
    wf = write_workflow("pays", f"""
[nodes.a]
project = "{marker_project}"
app = "mark"
input = {{ name = "a" }}
[nodes.pay]
project = "{marker_project}"
app = "mark"
needs = ["a"]
input = {{ name = "pay", fail = true }}
""")
    res = workrun("verify", wf, "--json", env={"TEST_LOG": str(tmp_path / "comp.log")})
    assert res.code == 1, res
    scenarios = {s["node"]: s for s in res.json()}
    assert scenarios["a"]["status"] == "ok", scenarios["a"]
    assert scenarios["pay"]["status"] == "failed"
    assert scenarios["pay"]["failures"] == ["node pay ended failed, not succeeded: no failure was injected after "
                                            "it, so what undoes it was not verified"], scenarios["pay"]


def test_a_rerun_of_a_verify_run_whose_file_is_gone_injects_nothing(workrun, marker_project, write_workflow,
                                                                    tmp_path):
    """R-W5/R-V3 (API review): a re-run from the recorded workflow is the workflow as written: not failed after
    the verified node again, and not a verify run (hidden from `runs list`)."""
    wf = write_workflow("twice", f"""
[nodes.a]
project = "{marker_project}"
app = "mark"
input = {{ name = "a" }}
[nodes.b]
project = "{marker_project}"
app = "mark"
needs = ["a"]
input = {{ name = "b" }}
""")
    env = {"TEST_LOG": str(tmp_path / "comp.log")}
    assert workrun("verify", wf, "--node", "a", env=env).code == 0
    [verified] = workrun("runs", "list", "--all", "--json").json()
    wf.unlink()
    again = workrun("rerun", verified["run_id"], "--json", env=env)
    assert again.code == 0, again
    assert (again.json()["status"], again.json()["verify"]) == ("succeeded", False), again.json()
    assert [r["run_id"] for r in workrun("runs", "list", "--json").json()] == [again.json()["run_id"]]
