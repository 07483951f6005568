"""R-P3: fast CLI start-up. ``--version`` imports no typer; plain read commands import no typer or pydantic and
print exactly what the typer path prints (same bytes, same exit code). Timings live in bench/bench_cli.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from workrun.cli import quick


def _imported(*args: str) -> set[str]:
    """Top-level package names a ``python -m workrun ARGS`` process imported (``-X importtime``)."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "workrun", *args], capture_output=True,
                          text=True, timeout=120)
    names = set()
    for line in proc.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip().split(".")[0])
    assert "workrun" in names, proc.stderr[-2000:]
    return names


def test_version_imports_no_typer_rich_or_pydantic():
    names = _imported("--version")
    assert not names & {"typer", "rich", "pydantic", "click"}, names


@pytest.mark.parametrize("args", [["runs", "list", "--json"], ["runs", "list"], ["compensations", "list"]])
def test_read_commands_import_no_typer_pydantic_nor_the_engine(args):
    names = _imported(*args)
    assert not names & {"typer", "click", "pydantic", "rich"}, names  # the lists are plain columns (issue 14)
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "workrun", *args], capture_output=True,
                          text=True, timeout=120)
    modules = {line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert not modules & {"workrun.engine.driver", "workrun.nodes", "workrun.core.models", "workrun.runner", "workrun.runner.services"}
    # with WORKRUN_HOME set: no platformdirs, no shutil (~8 ms of compression modules)
    assert not modules & {"platformdirs", "shutil"}, modules


def test_runs_list_prints_plain_columns_without_rich(workrun, write_workflow, marker_project):
    """With runs to show, ``runs list`` prints aligned columns and never imports rich (~40 ms, issue 14)."""
    import json

    wf = write_workflow("cols", f'[nodes.a]\nproject = "{marker_project}"\napp = "mark"\ninput = {{ name = "a" }}\n')
    assert workrun("run", wf, "--json").code == 0
    rid = json.loads(workrun("runs", "list", "--json").out)[0]["run_id"]
    assert "rich" not in _imported("runs", "list")
    lines = workrun("runs", "list").out.splitlines()
    assert lines[0].split() == ["run", "workflow", "status", "compensation", "started", "(UTC)"], lines
    assert lines[1].split()[:4] == [rid, "cols", "succeeded", "-"], lines
    assert lines[0].index("status") == lines[1].index("succeeded"), lines


def test_version_output_is_the_typer_apps(workrun):
    fast = workrun("--version")
    slow = workrun("--version", "runs")  # not the quick shape: typer's eager --version prints it
    assert (fast.code, fast.out, fast.err) == (slow.code, slow.out, slow.err) == (0, fast.out, "")
    assert fast.out.startswith("workrun ") and fast.out.endswith("\n")


def test_quick_match_takes_only_plain_read_command_lines():
    list_runs, kwargs = quick.match(["runs", "list"])
    assert (list_runs.__module__, list_runs.__name__) == ("workrun.cli.reads", "list_runs")
    assert kwargs == {"json_mode": False, "limit": None, "all_runs": False}
    assert quick.match(["--debug", "runs", "list", "--limit", "7", "--json"])[1] == {"json_mode": True, "limit": 7,
                                                                                          "all_runs": False}
    assert quick.match(["runs", "show", "run_1", "--json"])[1] == {"json_mode": True, "run_id": "run_1"}
    assert quick.match(["compensations", "list", "--run", "r", "--status", "failed"])[1] == {
        "json_mode": False, "status": "failed", "run": "r", "workflow": None, "all_runs": False}
    assert quick.match(["compensations", "list", "--workflow", "w", "--all"])[1] == {
        "json_mode": False, "status": None, "run": None, "workflow": "w", "all_runs": True}
    assert quick.match(["compensations", "show", "cmp_1"])[1] == {"json_mode": False, "compensation_id": "cmp_1"}
    for args in (["runs", "list", "--limit=3"], ["runs", "list", "--limit", "x"], ["runs", "list", "--limit", "-1"],
                 ["runs", "list", "--json", "--json"], ["runs", "list", "--help"], ["runs", "show"],
                 ["runs", "show", "a", "b"], ["runs", "show", "--", "a"], ["runs", "list", "extra"],
                 ["compensations", "list", "--run"], ["compensations", "retry", "c"],
                 ["runs"], [], ["--version"], ["runs", "list", "--debug"], ["runs", "show", ""]):
        assert quick.match(args) is None, args


def test_quick_path_prints_what_typer_prints(workrun, write_workflow, make_project, marker_project, tmp_path):
    boom = make_project("boom", '[tool.workrun.apps.boom]\nentry = "main.py"\n',
                        {"main.py": "raise SystemExit(3)\n"})
    wf = write_workflow("fails", f"""
        [nodes.a]
        project = "{marker_project}"
        app = "mark"
        input = {{ name = "a" }}
        [nodes.b]
        project = "{boom}"
        app = "boom"
        needs = ["a"]
    """)
    run = workrun("run", wf, "--json", env={"TEST_LOG": str(tmp_path / "log.jsonl")})
    assert run.code == 1, run
    rid = run.json()["run_id"]
    comps = workrun("compensations", "list", "--json")
    assert comps.code == 0 and len(comps.json()) == 1, comps
    cid = comps.json()[0]["compensation_id"]
    # left: the quick path; right: the same command in a form only typer parses (--opt=value, --)
    pairs = [
        (["runs", "list"], ["runs", "list", "--limit=50"]),
        (["runs", "list", "--json"], ["runs", "list", "--json", "--limit=50"]),
        (["runs", "show", rid], ["runs", "show", "--", rid]),
        (["runs", "show", rid[:8], "--json"], ["runs", "show", "--json", "--", rid[:8]]),
        (["runs", "show", "run_nope"], ["runs", "show", "--", "run_nope"]),
        (["compensations", "list"], ["compensations", "list", f"--run={rid}"]),
        (["compensations", "list", "--json", "--status", "succeeded"], ["compensations", "list", "--json",
                                                                        "--status=succeeded"]),
        (["compensations", "list", "--status", "bogus"], ["compensations", "list", "--status=bogus"]),
        (["compensations", "show", cid], ["compensations", "show", "--", cid]),
        (["compensations", "show", cid, "--json"], ["compensations", "show", "--json", "--", cid]),
    ]
    for fast_args, typer_args in pairs:
        fast, slow = workrun(*fast_args), workrun(*typer_args)
        assert (fast.code, fast.out, fast.err) == (slow.code, slow.out, slow.err), (fast_args, fast, slow)
    assert workrun("runs", "show", "run_nope").code == 2
    assert workrun("compensations", "list", "--status", "bogus").err.startswith("error: --status: ")
    bad = workrun("runs", "list", env={"WORKRUN_CONCURRENCY": "zero"})  # the root callback's settings check
    assert bad.code == 2 and bad.err.startswith("error: ") and bad.out == "", bad


def test_quick_match_takes_only_plain_run_command_lines():
    """``run`` (issue 14): a plain command line runs without typer; anything else is typer's to parse."""
    run_workflow, kwargs = quick.match(["run", "wf.toml"])
    assert (run_workflow.__module__, run_workflow.__name__) == ("workrun.cli.running", "run_workflow")
    assert kwargs == {"workflow": "wf.toml", "inputs": [], "json_mode": False, "wait": False, "eval_run": False,
                      "yes": False}
    assert quick.match(["--debug", "run", "--json", "-i", "a=1", "wf.toml", "--input", "b=x y", "--eval", "--yes",
                        "--wait"])[1] == {"workflow": "wf.toml", "inputs": ["a=1", "b=x y"], "json_mode": True,
                                          "wait": True, "eval_run": True, "yes": True}
    for args in (["run"], ["run", "a.toml", "b.toml"], ["run", "wf.toml", "--input=a=1"], ["run", "wf.toml", "-i"],
                 ["run", "wf.toml", "-i", "-x"], ["run", "wf.toml", "--submit"], ["run", "--help"],
                 ["run", "wf.toml", "--json", "--json"], ["run", "--", "wf.toml"], ["run", ""], ["rerun", "r"]):
        assert quick.match(args) is None, args


def test_run_imports_no_typer_and_answers_as_typer_does(workrun, write_workflow, marker_project, tmp_path):
    """A plain ``workrun run`` never imports typer, and its output and exit code match the typer path's (the same
    command line written with ``--``, which only typer parses)."""
    wf = write_workflow("one", f"""
        [inputs]
        name = "x"
        [nodes.a]
        project = "{marker_project}"
        app = "mark"
        input = {{ name = "{{{{ inputs.name }}}}" }}
    """)
    env = {"TEST_LOG": str(tmp_path / "log.jsonl")}
    names = _imported("run", str(wf), "--json", "--input", "name=y")
    # the workflow is validated without pydantic (workrun.core.shape, SPEC §24)
    assert not names & {"typer", "click", "pydantic", "annotated_types"}, names
    fast, slow = workrun("run", wf, "--json", "-i", "name=z", env=env), workrun("run", "--json", "-i", "name=z",
                                                                                   "--", wf, env=env)
    assert fast.code == slow.code == 0, (fast, slow)
    for got in (fast.json(), slow.json()):
        assert got["status"] == "succeeded" and [o["result"]["name"] for o in got["operations"]] == ["z"]
    for path, options in ((tmp_path / "none.toml", []), (wf, ["--input", "nokey"]), (wf, ["--input", "other=1"])):
        fast, slow = workrun("run", path, *options), workrun("run", *options, "--", path)
        assert (fast.code, fast.out, fast.err) == (slow.code, slow.out, slow.err), (path, options, fast, slow)
        assert fast.code == 2 and fast.err.startswith("error: ") and fast.err.count("\n") == 1, fast


def test_text_that_looks_like_an_emoji_code_is_shown_as_written(workrun, write_workflow, marker_project, tmp_path):
    """A name or result holding ``:smile:`` is printed as those characters in tables (rich's emoji codes are
    off: what a user wrote is shown, not replaced)."""
    wf = write_workflow("emoji", f"""
        name = "deploy :smile: :rocket:"
        [nodes.a]
        project = "{marker_project}"
        app = "mark"
        input = {{ name = ":fire:" }}
    """)
    run = workrun("run", wf, env={"TEST_LOG": str(tmp_path / "log.jsonl")})
    assert run.code == 0, run
    assert ":fire:" in run.out and "\N{FIRE}" not in run.out
    listed = workrun("runs", "list")
    assert ":smile:" in listed.out and "\N{SMILING FACE WITH OPEN MOUTH AND SMILING EYES}" not in listed.out


@pytest.mark.parametrize("what", ["runs list", "runs list table", "runs show table", "run", "--version", "--help",
                                  "tickets list"])
def test_a_reader_that_went_away_ends_the_command_quietly(workrun, write_workflow, marker_project, what):
    """``workrun … | head``: when the pipe's reader has gone, the command exits 141 (128 + SIGPIPE, as any
    command ended by SIGPIPE) with nothing on stderr (no ``internal error``, no traceback) — on the fast paths,
    the typer path (``tickets``) and typer's help alike; a run still ends and is journaled whole."""
    import json
    import os

    wf = write_workflow("pipe", f'[nodes.a]\nproject = "{marker_project}"\napp = "mark"\ninput = {{ name = "a" }}\n')
    assert workrun("run", wf, "--json").code == 0
    rid = json.loads(workrun("runs", "list", "--json").out)[0]["run_id"]
    args = {"runs list": ["runs", "list", "--json"], "runs list table": ["runs", "list"],
            "runs show table": ["runs", "show", rid], "run": ["run", str(wf), "--json"], "--version": ["--version"],
            "--help": ["--help"], "tickets list": ["tickets", "list", "--json"]}[what]
    r, w = os.pipe()
    os.close(r)  # the reader is gone before the command writes anything
    try:
        proc = subprocess.run([sys.executable, "-m", "workrun", *args], stdout=w, stderr=subprocess.PIPE, text=True,
                              timeout=120)
    finally:
        os.close(w)
    assert proc.returncode == 141, proc.stderr
    assert proc.stderr == ""
    runs = json.loads(workrun("runs", "list", "--json").out)
    assert [r["status"] for r in runs] == ["succeeded"] * (2 if what == "run" else 1)


def test_debug_is_taken_wherever_it_is_written(workrun):
    """``--debug`` after the command is the root option (was: a usage error with a traceback); after ``--`` it
    is an argument."""
    before, after = workrun("--debug", "runs", "show", "run_nope"), workrun("runs", "show", "run_nope", "--debug")
    assert before.code == after.code == 2, (before, after)
    assert after.err.splitlines()[-1] == before.err.splitlines()[-1] == "error: RUN: no run matches 'run_nope'", after
    assert "Traceback" in after.err  # what --debug is for
    plain = workrun("runs", "show", "--", "--debug")
    assert plain.code == 2 and "Traceback" not in plain.err and "'--debug'" in plain.err, plain


def test_runs_list_limit(workrun, write_workflow, marker_project):
    """``--limit N`` caps the table and the JSON alike; without it the table shows 50 and JSON every run; below
    1 is a usage error (exit 2)."""
    import json

    wf = write_workflow("lim", f'[nodes.a]\nproject = "{marker_project}"\napp = "mark"\ninput = {{ name = "a" }}\n')
    for _ in range(3):
        assert workrun("run", wf, "--json").code == 0
    assert len(json.loads(workrun("runs", "list", "--json").out)) == 3
    for args in (["runs", "list", "--json", "--limit", "2"], ["runs", "list", "--json", "--limit=2"]):
        assert len(json.loads(workrun(*args).out)) == 2, args
    assert workrun("runs", "list", "--limit", "1").out.count("run_") == 1
    assert workrun("runs", "list").out.count("run_") == 3
    for bad in ("0", "-1"):
        res = workrun("runs", "list", f"--limit={bad}")
        assert res.code == 2 and res.err == f"error: --limit: must be at least 1, not {bad}\n", res
    assert workrun("runs", "list", "--limit", "0").err == "error: --limit: must be at least 1, not 0\n"


def test_a_closed_stdout_is_not_an_error(workrun, write_workflow, marker_project):
    """``workrun … >&-`` (stdout closed, not a pipe): output goes nowhere, the command does its work and exits as
    it would (was: an internal error)."""
    import json
    import os

    wf = write_workflow("closed", f'[nodes.a]\nproject = "{marker_project}"\napp = "mark"\ninput = {{ name = "a" }}\n')
    for args in (["run", str(wf), "--json"], ["runs", "list", "--json"], ["--version"]):
        proc = subprocess.run([sys.executable, "-m", "workrun", *args], stderr=subprocess.PIPE, text=True,
                              timeout=120, preexec_fn=lambda: os.close(1))
        assert (proc.returncode, proc.stderr) == (0, ""), (args, proc.stderr)
    assert [r["status"] for r in json.loads(workrun("runs", "list", "--json").out)] == ["succeeded"]


def test_check_imports_no_typer_or_rich_and_answers_as_typer_does(workrun, write_workflow, tmp_path):
    """SPEC §24 (``check`` is fast): a plain ``workrun check`` never imports typer or rich, and its output and
    exit code match the typer path's (the same command line written with ``--``, which only typer parses)."""
    from workrun.cli import quick

    wf = write_workflow("one", '[nodes.a]\nkind = "http"\nmethod = "GET"\nurl = "http://127.0.0.1/{{ inputs.p }}"\n'
                        '[inputs]\np = "x"\n')
    assert quick.match(["check", str(wf), "-i", "p=1", "--json"])[1] == {"workflow": str(wf), "inputs": ["p=1"],
                                                                         "json_mode": True}
    names = _imported("check", str(wf))
    assert not names & {"typer", "rich", "pydantic", "annotated_types"}, names
    bad = tmp_path / "bad.toml"
    bad.write_text('[nodes.a]\nkind = "nope"\n[nodes.b]\nneeds = ["zz"]\n')
    for path, options in ((wf, []), (wf, ["--json"]), (bad, []), (bad, ["--json"]), (tmp_path / "none.toml", [])):
        fast, slow = workrun("check", path, *options), workrun("check", *options, "--", path)
        assert (fast.code, fast.out, fast.err) == (slow.code, slow.out, slow.err), (path, options, fast, slow)


def test_check_loads_no_call_path(isolated_env):
    """SPEC §24 (``check`` is quick): checking process nodes loads their checker, not the call path (effects,
    the runner's processes and fork servers, the journal), which the executor ``run`` uses loads."""
    tutorial = Path(__file__).parents[2] / "demo_apps" / "workflows" / "tutorial.toml"
    probe = ("import json, sys\nfrom workrun.cli.entry import run\n"
             f"code = run(['check', {str(tutorial)!r}], ahead=False)\n"
             "print(json.dumps([code, sorted(m for m in sys.modules if m.startswith('workrun'))]))\n"
             "from workrun.nodes import default_executors\ndefault_executors()['process']\n"
             "print(json.dumps(sorted(m for m in sys.modules if m.startswith('workrun'))))\n")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    lines = proc.stdout.splitlines()
    code, checked = json.loads(lines[-2])
    assert code == 0 and "workrun.nodes.process_check" in checked, proc
    call_path = {"workrun.effects", "workrun.effects.operations", "workrun.nodes.process", "workrun.runner.process",
                 "workrun.runner.forkserver", "workrun.runner.base", "workrun.journal"}
    assert not set(checked) & call_path, set(checked) & call_path
    assert call_path - {"workrun.journal"} <= set(json.loads(lines[-1]))  # the executor does load it


def test_a_run_whose_call_directories_are_recycled_imports_no_shutil_nor_openssl(write_workflow, marker_project):
    """Issue 33: shutil's compression modules (~3 ms) are imported only to remove a tree, and a run whose call
    directories are recycled removes none (the last run's empty ``.trash`` is removed with one rmdir); hashlib
    (OpenSSL, ~2 ms) is not needed for a run's SHA-256s (``workrun.core.digest``)."""
    wf = write_workflow("recycled", f'[nodes.a]\nproject = "{marker_project}"\napp = "mark"\ninput = {{ name = "a" }}\n'
                                    f'[nodes.b]\nproject = "{marker_project}"\napp = "mark"\ninput = {{ name = "b" }}\n'
                                    'needs = ["a"]\n')
    for first in (True, False):  # the second finds the first's call directories pooled and its .trash left
        proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "workrun", "run", str(wf), "--json"],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr[-2000:]
        modules = {line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines()
                   if line.startswith("import time:")}
        assert "workrun.engine.driver" in modules, proc.stderr[-3000:]
        if not first:  # the first copies the SDK into the new data directory
            assert not modules & {"shutil", "bz2", "lzma", "hashlib"}, sorted(modules)


@pytest.mark.parametrize("unbuffered", ["1", ""])
def test_a_long_json_document_into_a_reader_that_leaves_exits_141_buffered_or_not(write_workflow, make_project,
                                                                                 unbuffered):
    """New-user review: ``runs show --json | head -1`` of a document over a pipe's 64 KiB exited 0 under
    ``PYTHONUNBUFFERED`` (the text layer dropped the rest of a partial write without an error); it exits 141, as a
    buffered stdout does, and a reader that stays gets every byte."""
    import json
    import os

    project = make_project("wide", '[tool.workrun.apps.wide]\nentry = "main.py"\n',
                           {"main.py": "from workrun_sdk import process\nprocess.result({'text': 'x' * 300000})\n"})
    wf = write_workflow("wide", f'[nodes.a]\nproject = "{project}"\napp = "wide"\n')
    env = {**os.environ, "PYTHONUNBUFFERED": unbuffered}
    if not unbuffered:
        env.pop("PYTHONUNBUFFERED")
    ran = subprocess.run([sys.executable, "-m", "workrun", "run", str(wf), "--json"], env=env, capture_output=True,
                         text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    whole = json.loads(ran.stdout)
    assert len(ran.stdout) > 300000 and whole["operations"][0]["result"] == {"text": "x" * 300000}
    show = subprocess.Popen([sys.executable, "-m", "workrun", "runs", "show", whole["run_id"], "--json"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert show.stdout is not None and show.stdout.readline() == b"{\n"
    show.stdout.close()  # the reader leaves after one line, as ``head -1`` does
    assert show.wait(timeout=120) == 141, show.stderr.read() if show.stderr else ""
