"""End-to-end tests of the core (issue 2) with real uv Apps and the real CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _op(view, node):
    return next(o for o in view["operations"] if o["node_key"] == node)


def test_tutorial_compensates_created_file(workrun, tmp_path):
    """R-C1, R-C2: create succeeds, boom fails, create's compensation deletes exactly that file."""
    res = workrun("run", ROOT / "demo_apps/workflows/tutorial.toml", "--json")
    assert res.code == 1, res
    view = res.json()
    assert view["status"] == "failed"
    nodes = {n["node_key"]: n["status"] for n in view["nodes"]}
    assert nodes == {"create": "succeeded", "boom": "failed"}
    create = _op(view, "create")
    path = Path(create["result"]["file_path"])
    assert path.parent == tmp_path / "tmp" / "workrun-cleanup-demo"
    assert not path.exists()
    comp = create["compensation"]
    assert comp["status"] == "succeeded"
    assert comp["result"] == {"removed_file": str(path.resolve())}
    assert comp["context"]["original_operation_id"] == create["operation_id"]
    assert comp["context"]["original_result"] == create["result"]
    assert comp["context"]["resources"] == [{"kind": "file", "id": str(path)}]
    assert len(comp["attempts"]) == 1 and comp["attempts"][0]["exit_code"] == 0
    assert _op(view, "boom")["compensation"] is None
    shown = workrun("runs", "show", view["run_id"], "--json").json()
    assert shown["operations"][0]["compensation"]["compensation_id"] == comp["compensation_id"]
    # the compensation status is on the node's messages (R-C6)
    texts = [m["text"] for n in shown["nodes"] if n["node_key"] == "create" for m in n["messages"]]
    assert any(comp["compensation_id"] in t and ": succeeded" in t for t in texts)


def test_tutorial_human_output(workrun):
    res = workrun("run", ROOT / "demo_apps/workflows/tutorial.toml")
    assert res.code == 1
    assert "create: succeeded" in res.out
    assert "boom: failed" in res.out
    assert "of create: succeeded" in res.out
    assert "): failed" in res.out or "run failed" in res.out


def test_success_runs_no_compensation(workrun, write_workflow, marker_project, tmp_path):
    log = tmp_path / "log.jsonl"
    wf = write_workflow("ok", f"""
        [nodes.a]
        project = "{marker_project}"
        app = "mark"
        input = {{ name = "a" }}
        [nodes.b]
        project = "{marker_project}"
        app = "mark"
        input = {{ name = "b", approved = false }}
        needs = ["a"]
    """)
    res = workrun("run", wf, "--json", env={"TEST_LOG": str(log)})
    assert res.code == 0, res
    view = res.json()
    assert view["status"] == "succeeded"
    assert [o["status"] for o in view["operations"]] == ["succeeded", "succeeded"]
    assert all(o["compensation"] is None for o in view["operations"])
    assert _op(view, "b")["result"]["approved"] is False  # R-W4: saying "no" is a success
    assert not log.exists()


def test_skipped_without_entry_and_failed_call_not_compensated(workrun, write_workflow, make_project, marker_project,
                                                                tmp_path):
    plain = make_project("plain", """
        [tool.workrun.apps.plain]
        entry = "main.py"
    """, {"main.py": "from workrun_sdk import process\nprocess.result({'ok': 1})\n",
          "compensate.py": "raise SystemExit('must never run: the file alone does not enable compensation')\n"})
    log = tmp_path / "log.jsonl"
    wf = write_workflow("skip", f"""
        [nodes.plain]
        project = "{plain}"
        app = "plain"
        [nodes.bad]
        project = "{marker_project}"
        app = "mark"
        input = {{ name = "bad", fail = true }}
        needs = ["plain"]
    """)
    res = workrun("run", wf, "--json", env={"TEST_LOG": str(log)})
    assert res.code == 1, res
    view = res.json()
    assert _op(view, "plain")["compensation"]["status"] == "skipped"
    assert _op(view, "bad")["status"] == "failed"
    assert _op(view, "bad")["compensation"] is None
    assert not log.exists()


def test_app_run_is_never_compensated(workrun):
    res = workrun("app", "run", ROOT / "demo_apps/cleanup_demo", "cleanup-demo", "--input", "text=hi", "--json")
    assert res.code == 0, res
    out = res.json()
    assert out["status"] == "succeeded" and out["compensation"] is None
    path = Path(out["result"]["file_path"])
    assert path.exists()  # standalone: nothing undoes it (R-A6)
    assert workrun("compensations", "list", "--json").json() == []
    path.unlink()


def test_contract_violation_fails_call_naming_field(workrun, write_workflow, make_project):
    proj = make_project("contract", """
        [tool.workrun.apps.c]
        entry = "main.py"
        [tool.workrun.apps.c.output]
        file_path = { type = "string", required = true }
        count = { type = "integer" }
    """, {"main.py": "from workrun_sdk import process\nprocess.result({'file_path': 'x', 'count': 'two'})\n"})
    wf = write_workflow("contract", f"""
        [nodes.c]
        project = "{proj}"
        app = "c"
    """)
    res = workrun("run", wf, "--json")
    assert res.code == 1
    op = res.json()["operations"][0]
    assert op["status"] == "failed"
    assert "'count'" in op["error"] and "integer" in op["error"]
    (proj / "main.py").write_text("print('done, but no result saved')\n")  # exit 0 without process.result()
    op = workrun("run", wf, "--json").json()["operations"][0]
    assert op["status"] == "failed" and op["error"] == (
        "c: no result: the App exited 0 without calling process.result() "
        "(output field 'file_path' is required but missing)"), op["error"]


@pytest.mark.parametrize("comp, message", [
    ('{ entry = "../escape.py" }', "inside the project"),
    ('{ entry = "main.py" }', "must differ"),
    ('{ entry = "/etc/passwd" }', "relative path"),
    ('{ entry = "missing.py" }', "does not exist"),
    ('{ entry = "undo\\u0000.py" }', "NUL character"),  # hostile review: an internal error, exit 1
])
def test_bad_compensation_entry_exit_2_before_anything_runs(workrun, write_workflow, make_project, comp, message):
    proj = make_project("bad", f"""
        [tool.workrun.apps.b]
        entry = "main.py"
        compensation = {comp}
    """, {"main.py": "print('ran')\n"})
    wf = write_workflow("bad", f"""
        [nodes.b]
        project = "{proj}"
        app = "b"
        [nodes.b2]
        project = "{proj}"
        app = "b"
    """)
    res = workrun("run", wf)
    assert res.code == 2, res
    lines = res.err.strip().splitlines()  # two nodes use the bad App: its error is said once
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    assert "pyproject.toml" in lines[0] and "tool.workrun.apps.b.compensation.entry" in lines[0]
    assert message in lines[0]
    assert workrun("runs", "list", "--json").json() == []


def test_symlink_escape_rejected(workrun, write_workflow, make_project, tmp_path):
    outside = tmp_path / "outside.py"
    outside.write_text("print('outside')\n")
    proj = make_project("sym", """
        [tool.workrun.apps.s]
        entry = "main.py"
        compensation = { entry = "link.py" }
    """, {"main.py": "print('ran')\n"})
    (proj / "link.py").symlink_to(outside)
    wf = write_workflow("sym", f"""
        [nodes.s]
        project = "{proj}"
        app = "s"
    """)
    res = workrun("run", wf)
    assert res.code == 2 and "symlink escape" in res.err


def test_template_to_missing_node_exit_2(workrun, write_workflow, marker_project):
    wf = write_workflow("tpl", f"""
        [nodes.a]
        project = "{marker_project}"
        app = "mark"
        input = {{ x = "{{{{ nodes.nope.result.name }}}}" }}
    """)
    res = workrun("run", wf)
    assert res.code == 2
    assert res.err.count("\n") == 1
    assert "nodes.a.input.x" in res.err and "unknown node 'nope'" in res.err
    assert workrun("runs", "list", "--json").json() == []


def test_malformed_toml_and_unknown_app(workrun, write_workflow, marker_project):
    wf = write_workflow("broken", "[nodes.a\nproject = 1\n")
    res = workrun("run", wf)
    assert res.code == 2 and res.err.startswith(f"error: {wf}: not valid TOML")
    wf2 = write_workflow("unknown", f"""
        [nodes.a]
        project = "{marker_project}"
        app = "nope"
    """)
    res = workrun("run", wf2)
    assert res.code == 2 and "nodes.a.app" in res.err and "unknown App 'nope'" in res.err


def _branches(write_workflow, proj, *, publish_comp_fail=False):
    return write_workflow("branches", f"""
        [nodes.upload]
        project = "{proj}"
        app = "mark"
        input = {{ name = "upload", comp_sleep = 0.3 }}
        [nodes.publish]
        project = "{proj}"
        app = "mark"
        input = {{ name = "publish", after = "{{{{ nodes.upload.result.name }}}}", comp_fail = {str(publish_comp_fail).lower()}, comp_sleep = 0.3 }}
        [nodes.notify]
        project = "{proj}"
        app = "mark"
        input = {{ name = "notify" }}
        [nodes.boom]
        project = "{proj}"
        app = "mark"
        input = {{ name = "boom", fail = true }}
        needs = ["publish", "notify"]
    """)


def test_two_branches_reverse_order(workrun, write_workflow, marker_project, tmp_path, journal_backend):
    """R-C3: publish depends on upload, so upload's compensation starts after publish's succeeded."""
    log = tmp_path / "log.jsonl"
    res = workrun("run", _branches(write_workflow, marker_project), "--json", env={"TEST_LOG": str(log)})
    assert res.code == 1, res
    view = res.json()
    comps = {o["node_key"]: o["compensation"] for o in view["operations"] if o["compensation"]}
    assert {k: c["status"] for k, c in comps.items()} == {"upload": "succeeded", "publish": "succeeded",
                                                          "notify": "succeeded"}
    assert _op(view, "publish")["depends_on"] == [_op(view, "upload")["operation_id"]]
    assert comps["upload"]["attempts"][0]["started_at"] >= comps["publish"]["attempts"][0]["ended_at"]
    names = [json.loads(line)["name"] for line in log.read_text().splitlines()]
    assert sorted(names) == ["notify", "publish", "upload"]
    assert names.index("publish") < names.index("upload")


def test_failing_compensation_holds_back_dependency_not_branch(workrun, write_workflow, make_project, tmp_path,
                                                             journal_backend):
    """R-C4: publish's compensation fails -> upload blocked (reason names it); notify still compensated."""
    from _kit.apps import MARKER_APP, MARKER_COMPENSATE, MARKER_MAIN

    proj = make_project("m2", MARKER_APP.replace("backoff = 0.05", "backoff = 0.01, max_retries = 1"),
                        {"main.py": MARKER_MAIN, "compensate.py": MARKER_COMPENSATE})
    log = tmp_path / "log.jsonl"
    res = workrun("run", _branches(write_workflow, proj, publish_comp_fail=True), "--json",
                  env={"TEST_LOG": str(log)})
    assert res.code == 1, res
    view = res.json()
    comps = {o["node_key"]: o["compensation"] for o in view["operations"] if o["compensation"]}
    assert comps["publish"]["status"] == "failed"
    assert len(comps["publish"]["attempts"]) == 2  # max_retries + 1
    assert comps["notify"]["status"] == "succeeded"
    assert comps["upload"]["status"] == "blocked"
    assert comps["upload"]["attempts"] == []
    assert "publish" in comps["upload"]["reason"] and comps["publish"]["compensation_id"] in comps["upload"]["reason"]
    names = [json.loads(line)["name"] for line in log.read_text().splitlines()]
    assert names == ["notify"]
