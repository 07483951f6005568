"""Code changes and App environments (issue 4) with real uv Apps and the real CLI.

R-C8 (a changed fingerprint blocks that compensation, naming the files), R-C4
(what it depends on is held back, independent branches go on), R-A5 (config
snapshot per call), R-J2 (fingerprinted file set), R-A7/R-A8 (the App's own
locked environment, never rewritten, offline once synced), SPEC §10 (retry is
a scheduling command that runs what it releases).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ALPHA_APP = """
[tool.workrun.apps.alpha]
entry = "main.py"
compensation = {{ entry = "compensate.py", max_retries = 0{extra} }}
"""

ALPHA_MAIN = """
import sys
from workrun_sdk import process
data = process.input()
process.result({"name": data["name"], "prefix": sys.prefix, "version": "%d.%d.%d" % sys.version_info[:3]})
"""

# The compensation says which code ran (VERSION) and where (entry, cwd, sys.prefix).
ALPHA_COMPENSATE = """
import json, os, sys
from workrun_sdk import compensation
VERSION = "v1"
ENTRY = "compensate.py"
ctx = compensation.context()
if ctx.original_input.get("comp_fail"):
    raise SystemExit(4)
with open(os.environ["TEST_LOG"], "a") as fh:
    fh.write(json.dumps({"name": ctx.original_result["name"], "code": VERSION, "entry": ENTRY,
                         "prefix": sys.prefix, "cwd": os.getcwd()}) + "\\n")
compensation.result({"undone": ctx.original_result["name"], "code": VERSION, "entry": ENTRY})
"""

# Edits other projects' files while the run is going: the "developer" changing code after a call.
EDITOR_APP = """
[tool.workrun.apps.editor]
entry = "main.py"
"""

EDITOR_MAIN = """
import shutil
from pathlib import Path
from workrun_sdk import process
data = process.input()
for path, old, new in data.get("replace", []):
    text = Path(path).read_text()
    assert old in text, (path, old)
    if new not in text:
        Path(path).write_text(text.replace(old, new))
for path, text in data.get("write", []):
    Path(path).write_text(text)
for path in data.get("delete", []):
    shutil.rmtree(path)
process.result({"edited": True})
"""


def _uv() -> str:
    import uv

    return uv.find_uv_bin()


def _op(view, node):
    return next(o for o in view["operations"] if o["node_key"] == node)


def _comps(view):
    return {o["node_key"]: o["compensation"] for o in view["operations"] if o["compensation"]}


def _log(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _toml_list(items) -> str:
    return json.dumps(items)  # a JSON array of strings is a valid TOML array


@pytest.fixture
def alpha(make_project):
    def make(name: str = "alpha", extra: str = "", files: dict[str, str] | None = None) -> Path:
        return make_project(name, ALPHA_APP.format(extra=extra),
                            {"main.py": ALPHA_MAIN, "compensate.py": ALPHA_COMPENSATE, **(files or {})})

    return make


@pytest.fixture
def editor(make_project) -> Path:
    return make_project("editor", EDITOR_APP, {"main.py": EDITOR_MAIN})


def _locks(*projects: Path) -> dict[Path, bytes]:
    return {p: (p / "uv.lock").read_bytes() for p in projects}


def test_code_change_blocks_compensation_naming_files_then_accept(workrun, write_workflow, alpha, editor,
                                                                   marker_project, tmp_path):
    """R-C8/R-C4: edit after the call -> blocked naming the files; upstream held back; branch compensated;
    `retry --accept-code-change` runs today's code, records the choice and releases what it held back."""
    proj = alpha()
    locks = _locks(proj, editor, marker_project)
    log = tmp_path / "log.jsonl"
    edit = {"replace": [[str(proj / "compensate.py"), 'VERSION = "v1"', 'VERSION = "v2"']],
            "write": [[str(proj / "helper.py"), "X = 1\n"]]}
    wf = write_workflow("blocked", f"""
        [nodes.up]
        project = "{marker_project}"
        app = "mark"
        input = {{ name = "up" }}
        [nodes.a]
        project = "{proj}"
        app = "alpha"
        input = {{ name = "a" }}
        needs = ["up"]
        [nodes.edit]
        project = "{editor}"
        app = "editor"
        input = {{ replace = [{_toml_list(edit["replace"][0])}], write = [{_toml_list(edit["write"][0])}] }}
        needs = ["a"]
        [nodes.side]
        project = "{marker_project}"
        app = "mark"
        input = {{ name = "side" }}
        [nodes.boom]
        project = "{marker_project}"
        app = "mark"
        input = {{ name = "boom", fail = true }}
        needs = ["edit", "side"]
    """)
    res = workrun("run", wf, "--json", env={"TEST_LOG": str(log)})
    assert res.code == 1, res
    view = res.json()
    comps = _comps(view)
    assert {k: c["status"] for k, c in comps.items()} == {
        "up": "blocked", "a": "blocked", "edit": "skipped", "side": "succeeded"}
    a_cid = comps["a"]["compensation_id"]
    assert comps["a"]["reason"] == "code changed since the call: compensate.py changed, helper.py added"
    assert comps["a"]["attempts"] == [] and comps["a"]["accept_code_change"] is False
    assert comps["up"]["held_back_by"] == [a_cid]
    assert f"a ({a_cid}, blocked)" in comps["up"]["reason"]
    assert comps["up"]["attempts"] == []
    assert [e["name"] for e in _log(log)] == ["side"]
    messages = [m["text"] for n in view["nodes"] if n["node_key"] == "a" for m in n["messages"]]
    assert any(a_cid in t and "blocked" in t and "compensate.py changed" in t for t in messages)

    # without the flag a retry checks again and stays blocked: nothing runs
    again = workrun("compensations", "retry", a_cid[:9], "--json", env={"TEST_LOG": str(log)})
    assert again.code == 1, again
    assert again.json()["status"] == "blocked" and again.json()["attempts"] == []
    assert [e["name"] for e in _log(log)] == ["side"]
    said = workrun("compensations", "retry", a_cid, env={"TEST_LOG": str(log)})  # says how to go on (new-user review)
    assert said.code == 1 and f"next: {a_cid} blocked, its App's code changed since the call: `workrun compensations " \
        f"retry {a_cid} --accept-code-change`" in said.out.replace("\n", " "), said

    ok = workrun("compensations", "retry", a_cid, "--accept-code-change", "--json", env={"TEST_LOG": str(log)})
    assert ok.code == 0, ok
    shown = ok.json()
    assert shown["status"] == "succeeded"
    assert shown["result"] == {"undone": "a", "code": "v2", "entry": "compensate.py"}  # today's code
    assert shown["accept_code_change"] is True
    assert [a["trigger"] for a in shown["attempts"]] == ["operator"]
    retries = [e for e in shown["events"] if e["action"] == "retry"]
    assert [e["args"] for e in retries] == [{"accept_code_change": False}] * 2 + [{"accept_code_change": True}]
    assert all(e["actor"] for e in retries)
    # the held-back upstream was released and ran in the same command (SPEC §10), after a
    after = workrun("runs", "show", view["run_id"], "--json").json()
    assert {k: c["status"] for k, c in _comps(after).items()} == {
        "up": "succeeded", "a": "succeeded", "edit": "skipped", "side": "succeeded"}
    assert [(e["name"], e.get("code")) for e in _log(log)] == [("side", None), ("a", "v2"), ("up", None)]
    assert _locks(proj, editor, marker_project) == locks


@pytest.mark.parametrize("change", ["edit", "delete"])
def test_snapshot_runs_original_code(workrun, write_workflow, alpha, editor, tmp_path, isolated_env, change):
    """code = "snapshot": the compensation runs the code of the call, after the project was edited or deleted,
    in an environment synced offline from the snapshot's own uv.lock."""
    proj = alpha(extra=', code = "snapshot"')
    lock = (proj / "uv.lock").read_bytes()
    log = tmp_path / "log.jsonl"
    if change == "edit":
        replace = _toml_list([str(proj / "compensate.py"), 'VERSION = "v1"', 'VERSION = "v2"'])
        write = _toml_list([str(proj / "main.py"), "raise SystemExit(9)\n"])
        edit_input = f"{{ replace = [{replace}], write = [{write}] }}"
    else:
        edit_input = f'{{ delete = [{_toml_list(str(proj))}] }}'
    wf = write_workflow("snap", f"""
        [nodes.a]
        project = "{proj}"
        app = "alpha"
        input = {{ name = "a" }}
        [nodes.edit]
        project = "{editor}"
        app = "editor"
        input = {edit_input}
        needs = ["a"]
        [nodes.boom]
        project = "{editor}"
        app = "editor"
        input = {{ delete = ["{tmp_path / 'no-such-dir'}"] }}
        needs = ["edit"]
    """)
    res = workrun("run", wf, "--json", env={"TEST_LOG": str(log)})
    assert res.code == 1, res
    view = res.json()
    assert _op(view, "edit")["status"] == "succeeded" and _op(view, "boom")["status"] == "failed"
    comp = _op(view, "a")["compensation"]
    assert comp["status"] == "succeeded", comp
    assert comp["result"] == {"undone": "a", "code": "v1", "entry": "compensate.py"}
    [entry] = _log(log)
    snapshot = _op(view, "a")["fingerprint"]
    tree = isolated_env / "snapshot-trees" / snapshot
    assert Path(entry["cwd"]) == tree
    assert Path(entry["prefix"]) == tree / ".venv"
    assert sorted(p.name for p in tree.iterdir() if p.name != ".venv") == [
        ".complete", "compensate.py", "main.py", "pyproject.toml", "uv.lock"]
    assert (tree / "uv.lock").read_bytes() == lock
    assert (tree / "main.py").read_text() == ALPHA_MAIN
    if change == "edit":
        assert 'VERSION = "v2"' in (proj / "compensate.py").read_text()  # the live project did change
        assert (proj / "uv.lock").read_bytes() == lock
    else:
        assert not proj.exists()


def test_snapshot_env_syncs_offline_for_no_deps_project(tmp_path, make_project):
    """R-A8: the environment a snapshot needs is built by `uv sync --locked --offline` (no network)."""
    proj = make_project("offline", "", {"main.py": "print('hi')\n"})
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV" and not k.startswith("UV_")}
    env["UV_INDEX_URL"] = "http://127.0.0.1:9/simple"  # unreachable: any network use would fail
    proc = subprocess.run([_uv(), "sync", "--locked", "--offline", "--quiet"], cwd=proj, env=env,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert (proj / ".venv" / "bin" / "python").exists()


def test_config_snapshot_per_call(workrun, write_workflow, alpha, editor, make_project, tmp_path):
    """R-A5: a call made without a compensation entry is never compensated even if one is added before the
    run fails; a call made with one uses the entry it was made with; later calls use the new config."""
    late = make_project("late", """
        [tool.workrun.apps.late]
        entry = "main.py"
    """, {"main.py": "from workrun_sdk import process\nprocess.result({'name': 'late'})\n",
          "compensate.py": ALPHA_COMPENSATE})
    proj = alpha(files={"undo.py": ALPHA_COMPENSATE.replace('ENTRY = "compensate.py"', 'ENTRY = "undo.py"')})
    locks = _locks(late, proj)
    log = tmp_path / "log.jsonl"
    add_entry = [str(late / "pyproject.toml"), 'entry = "main.py"',
                 'entry = "main.py"\ncompensation = { entry = "compensate.py" }']
    rename = [str(proj / "pyproject.toml"), 'entry = "compensate.py"', 'entry = "undo.py"']
    wf = write_workflow("config", f"""
        [nodes.late]
        project = "{late}"
        app = "late"
        [nodes.a]
        project = "{proj}"
        app = "alpha"
        input = {{ name = "a" }}
        [nodes.edit]
        project = "{editor}"
        app = "editor"
        input = {{ replace = [{_toml_list(add_entry)}, {_toml_list(rename)}] }}
        needs = ["late", "a"]
        [nodes.boom]
        project = "{editor}"
        app = "editor"
        input = {{ delete = ["{tmp_path / 'no-such-dir'}"] }}
        needs = ["edit"]
    """)
    res = workrun("run", wf, "--json", env={"TEST_LOG": str(log)})
    assert res.code == 1, res
    view = res.json()
    assert 'compensation = { entry = "compensate.py" }' in (late / "pyproject.toml").read_text()
    comps = _comps(view)
    assert comps["late"]["status"] == "skipped"
    assert comps["late"]["reason"] == "App 'late' has no compensation entry"
    assert comps["a"]["status"] == "blocked"
    assert comps["a"]["reason"] == "code changed since the call: pyproject.toml changed"
    ok = workrun("compensations", "retry", comps["a"]["compensation_id"], "--accept-code-change", "--json",
                 env={"TEST_LOG": str(log)})
    assert ok.code == 0, ok
    assert ok.json()["result"]["entry"] == "compensate.py"  # the entry the call was made with, not undo.py
    assert workrun("resume", "--json", env={"TEST_LOG": str(log)}).code == 0
    after = _comps(workrun("runs", "show", view["run_id"], "--json").json())
    assert after["late"]["status"] == "skipped" and after["late"]["attempts"] == []
    assert [(e["name"], e["entry"]) for e in _log(log)] == [("a", "compensate.py")]
    # later calls use today's config: the new run's late call is compensated, a's uses undo.py
    again = workrun("rerun", view["run_id"], "--json", env={"TEST_LOG": str(log)})
    assert again.code == 1, again
    comps2 = _comps(again.json())
    assert comps2["late"]["status"] == "succeeded" and comps2["a"]["status"] == "succeeded"
    assert sorted((e["name"], e["entry"]) for e in _log(log)[1:]) == [("a", "undo.py"), ("late", "compensate.py")]
    assert _locks(late, proj) == locks


def _other_python(project: Path) -> str | None:
    """A Python that satisfies the project but is not the one uv picks by default (None if there is none)."""
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV" and not k.startswith("UV_")}
    default = subprocess.run([_uv(), "python", "find"], cwd=project, env=env, capture_output=True, text=True)
    listed = subprocess.run([_uv(), "python", "list", "--only-installed", "--output-format", "json"], cwd=project,
                            env=env, capture_output=True, text=True)
    if default.returncode or listed.returncode:
        return None
    want = subprocess.run([default.stdout.strip(), "-c", "import platform; print(platform.python_version())"],
                          capture_output=True, text=True).stdout.strip()
    for item in json.loads(listed.stdout):
        v = item.get("version", "")
        if v and v != want and v.startswith("3.") and int(v.split(".")[1]) >= 11:
            return v
    return None


def test_foreign_shell_uses_the_apps_own_venv(workrun, write_workflow, alpha, tmp_path):
    """R-A7: an activated foreign venv (VIRTUAL_ENV, PATH), UV_PROJECT_ENVIRONMENT, UV_PYTHON and a
    `.python-version` in the runner's cwd neither redirect nor rebuild the App's environment; calls and
    compensations both run in `<project>/.venv` with the Python uv picks for the project itself."""
    proj = alpha()
    lock = (proj / "uv.lock").read_bytes()
    other = _other_python(proj)
    shell = tmp_path / "shell"
    shell.mkdir()
    (shell / ".python-version").write_text((other or "3.11") + "\n")
    foreign = tmp_path / "foreign-env"
    subprocess.run([_uv(), "venv", "--quiet", *(["--python", other] if other else []), str(foreign)], check=True,
                   cwd=tmp_path, env={k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"})
    project_env = tmp_path / "project-env"
    log = tmp_path / "log.jsonl"
    wf = write_workflow("foreign", f"""
        [nodes.a]
        project = "{proj}"
        app = "alpha"
        input = {{ name = "a" }}
        [nodes.boom]
        project = "{proj}"
        app = "alpha"
        input = {{ }}
        needs = ["a"]
    """)
    # as in a shell where another venv is activated (and pinned to another Python)
    env = {"TEST_LOG": str(log), "VIRTUAL_ENV": str(foreign),
           "PATH": f"{foreign / 'bin'}{os.pathsep}{os.environ['PATH']}",
           "UV_PROJECT_ENVIRONMENT": str(project_env), **({"UV_PYTHON": other} if other else {})}
    res = workrun("run", wf, "--json", env=env, cwd=shell)
    assert res.code == 1, res
    view = res.json()
    result = _op(view, "a")["result"]
    assert Path(result["prefix"]) == proj / ".venv"
    assert not project_env.exists()
    if other:
        assert result["version"] != other
    assert _op(view, "a")["compensation"]["status"] == "succeeded"
    assert [Path(e["prefix"]) for e in _log(log)] == [proj / ".venv"]
    assert (proj / "uv.lock").read_bytes() == lock


def test_environment_unavailable_stays_pending_until_fixed(workrun, write_workflow, alpha, editor, tmp_path):
    """R-A7/R-R1: when `uv sync --locked` cannot prepare the App's environment (lock out of date), the
    compensation stays pending with reason "environment unavailable", exit 1; after `uv lock`, resume does it."""
    proj = alpha()
    lock = (proj / "uv.lock").read_bytes()
    log = tmp_path / "log.jsonl"
    stale = [str(proj / "pyproject.toml"), 'requires-python = ">=3.11"', 'requires-python = ">=3.10"']
    wf = write_workflow("env", f"""
        [nodes.a]
        project = "{proj}"
        app = "alpha"
        input = {{ name = "a" }}
        [nodes.edit]
        project = "{editor}"
        app = "editor"
        input = {{ replace = [{_toml_list(stale)}] }}
        needs = ["a"]
        [nodes.boom]
        project = "{editor}"
        app = "editor"
        input = {{ delete = ["{tmp_path / 'no-such-dir'}"] }}
        needs = ["edit"]
    """)
    res = workrun("run", wf, "--json", env={"TEST_LOG": str(log)})
    assert res.code == 1, res
    comp = _op(res.json(), "a")["compensation"]
    assert comp["status"] == "blocked" and comp["reason"] == "code changed since the call: pyproject.toml changed"
    cid = comp["compensation_id"]
    told = workrun("compensations", "show", cid).out  # what to do next, with the option a code change needs
    # (new-user review: said directly, it is the code change that blocks it)
    assert f"next: blocked, its App's code changed since the call: `workrun compensations retry {cid} " \
           f"--accept-code-change` (runs the code as it is now) or `workrun compensations resolve {cid}`" in told, told
    retry = workrun("compensations", "retry", cid, "--accept-code-change", "--json", env={"TEST_LOG": str(log)})
    assert retry.code == 1, retry
    shown = retry.json()
    assert shown["status"] == "pending"
    assert shown["reason"].startswith("environment unavailable: `uv sync --locked` exited 1"), shown["reason"]
    assert shown["reason"].count("environment unavailable") == 1
    assert shown["reason"].endswith(f"after a change of the project's dependencies, run `uv lock` in {proj})")
    assert shown["attempts"] == []  # nothing ran: not failed, not done
    assert (proj / "uv.lock").read_bytes() == lock  # --locked: never rewritten, even when stale
    # still unavailable: resume leaves it pending (exit 1) and counts no attempt
    res2 = workrun("resume", "--json", env={"TEST_LOG": str(log)})
    assert res2.code == 1, res2
    assert workrun("compensations", "show", cid, "--json").json()["status"] == "pending"
    subprocess.run([_uv(), "lock", "--quiet", "--offline"], cwd=proj, check=True,
                   env={k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"})
    fixed = workrun("resume", "--json", env={"TEST_LOG": str(log)})
    assert fixed.code == 0, fixed
    done = workrun("compensations", "show", cid, "--json").json()
    assert done["status"] == "succeeded" and len(done["attempts"]) == 1
    assert [e["name"] for e in _log(log)] == ["a"]


def test_gc_keeps_snapshots_of_unfinished_compensations(workrun, write_workflow, alpha, isolated_env, tmp_path):
    """`workrun gc`: a snapshot whose compensation is done is removed with its objects; one an unfinished
    compensation needs is kept until that compensation is done."""
    proj = alpha(extra=', code = "snapshot"')
    log = tmp_path / "log.jsonl"

    def wf(comp_fail: bool) -> Path:
        return write_workflow(f"gc{int(comp_fail)}", f"""
            [nodes.a]
            project = "{proj}"
            app = "alpha"
            input = {{ name = "a", comp_fail = {str(comp_fail).lower()} }}
            [nodes.boom]
            project = "{proj}"
            app = "alpha"
            input = {{ }}
            needs = ["a"]
        """)

    first = workrun("run", wf(False), "--json", env={"TEST_LOG": str(log)})
    assert first.code == 1 and _op(first.json(), "a")["compensation"]["status"] == "succeeded", first
    s1 = _op(first.json(), "a")["fingerprint"]
    (proj / "main.py").write_text(ALPHA_MAIN + "# edited\n")
    second = workrun("run", wf(True), "--json", env={"TEST_LOG": str(log)})
    assert second.code == 1
    comp = _op(second.json(), "a")["compensation"]
    assert comp["status"] == "failed", comp
    s2 = _op(second.json(), "a")["fingerprint"]
    assert s1 != s2

    def objects() -> set[str]:
        return {p.name for p in (isolated_env / "objects").glob("*/*")}

    def manifest(sid: str) -> dict[str, str]:
        return json.loads((isolated_env / "snapshots" / f"{sid}.json").read_text())["files"]

    m1, m2 = manifest(s1), manifest(s2)
    assert objects() == set(m1.values()) | set(m2.values())
    assert m1["main.py"] != m2["main.py"] and m1["compensate.py"] == m2["compensate.py"]  # deduplicated by hash
    dry = workrun("gc", "--dry-run")
    assert dry.code == 0 and "would remove 1 snapshot(s); kept 1" in dry.out
    assert f"\n  snapshot {s1}\n" in dry.out and s2 not in dry.out, dry.out  # the one it would remove, by id
    assert (isolated_env / "snapshots" / f"{s1}.json").exists()
    res = workrun("gc")
    assert res.code == 0 and "removed 1 snapshot(s); kept 1" in res.out, res
    assert not (isolated_env / "snapshots" / f"{s1}.json").exists()
    assert not (isolated_env / "snapshot-trees" / s1).exists()
    assert (isolated_env / "snapshots" / f"{s2}.json").exists()
    assert objects() == set(m2.values())
    # a snapshot removed by hand blocks its compensation (the scheduler does not crash)
    (isolated_env / "snapshots" / f"{s2}.json").rename(tmp_path / "moved.json")
    shutil.rmtree(isolated_env / "snapshot-trees" / s2)
    gone = workrun("compensations", "retry", comp["compensation_id"], "--json")
    assert gone.code == 1, gone
    assert gone.json()["status"] == "blocked" and len(gone.json()["attempts"]) == 1
    assert gone.json()["reason"].startswith(f"code snapshot {s2[:12]} is missing from the data dir")
    (tmp_path / "moved.json").rename(isolated_env / "snapshots" / f"{s2}.json")
    assert workrun("compensations", "resolve", comp["compensation_id"], "--note", "cleaned by hand").code == 0
    res = workrun("gc")
    assert res.code == 0 and "removed 1 snapshot(s); kept 0" in res.out, res
    assert objects() == set()


def test_snapshot_app_called_by_parallel_nodes_is_taken_and_materialised_once(workrun, write_workflow, alpha, editor,
                                                                           tmp_path, isolated_env):
    """R-C8 snapshots under concurrency (conformance review): three independent calls of one snapshot App in one
    run take its snapshot and materialise it for their compensations at the same moment, without colliding on a
    temporary name or removing a tree another compensation uses."""
    proj = alpha(extra=', code = "snapshot"')
    log = tmp_path / "log.jsonl"
    nodes = "".join(f'[nodes.{k}]\nproject = "{proj}"\napp = "alpha"\ninput = {{ name = "{k}" }}\n'
                    for k in ("a", "b", "c"))
    wf = write_workflow("parallel", nodes + f"""
[nodes.boom]
project = "{editor}"
app = "editor"
input = {{ delete = ["{tmp_path / 'no-such-dir'}"] }}
needs = ["a", "b", "c"]
""")
    for _ in range(3):  # the collision was timing-dependent: a few runs, each taking and building anew
        for stored in ("snapshots", "objects", "snapshot-trees"):
            shutil.rmtree(isolated_env / stored, ignore_errors=True)
        res = workrun("run", wf, "--json", env={"TEST_LOG": str(log), "WORKRUN_CONCURRENCY": "3"})
        assert res.code == 1, res
        assert {k: c["status"] for k, c in _comps(res.json()).items()} == {
            "a": "succeeded", "b": "succeeded", "c": "succeeded"}, _comps(res.json())
