"""Pure unit tests: SDK outside an App, public names, App config validation, templates, fingerprints."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import workrun
import workrun_sdk
from workrun.core.errors import ConfigError
from workrun.core.models import OutputField
from workrun.core.templates import TemplateValueError, parse_inputs, render
from workrun.runner.apps import check_contract, diff_fingerprints, fingerprint, load_project


def test_public_names_are_pinned():
    assert sorted(workrun.__all__) == ["ConfigError", "WorkrunError", "__version__"]
    assert sorted(workrun_sdk.__all__) == ["NotInAppError", "SDKError", "__version__", "compensation", "process",
                                           "tool"]


@pytest.mark.parametrize("code", ["process.input()", "process.result({})", "compensation.context()",
                                  "process.resource('file', 'x')"])
def test_sdk_outside_an_app_raises_clear_error(code):
    proc = subprocess.run([sys.executable, "-c", f"from workrun_sdk import process, compensation\n{code}"],
                          capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
    assert proc.returncode == 1
    assert "NotInAppError" in proc.stderr and "only inside an App call started by Workrun" in proc.stderr
    # how to get there: `app run` runs main.py, never a compensation (new-user review)
    hint = "`workrun verify WORKFLOW`" if code.startswith("compensation") else "`workrun app run PROJECT APP`"
    assert hint in proc.stderr, proc.stderr


def test_sdk_never_imports_workrun():
    for path in Path(workrun_sdk.__file__).parent.glob("*.py"):
        text = path.read_text()
        assert "import workrun\n" not in text and "from workrun " not in text and "from workrun." not in text


def test_contract_types():
    out = {"s": OutputField(type="string", required=True), "n": OutputField(type="number"),
           "i": OutputField(type="integer"), "b": OutputField(type="boolean")}
    assert check_contract({"s": "x", "n": 1.5, "i": 2, "b": False, "extra": 1}, out) is None
    assert "'s' is required" in check_contract({}, out)
    assert "'i' must be integer" in check_contract({"s": "x", "i": True}, out)
    assert "'n' must be number" in check_contract({"s": "x", "n": "1"}, out)
    assert "JSON object" in check_contract([1], out)


def _project(tmp_path: Path, apps: str, files=("main.py", "compensate.py")) -> Path:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "p"\nversion = "0"\n' + textwrap.dedent(apps))
    (tmp_path / "uv.lock").write_text("version = 1\n")
    for f in files:
        (tmp_path / f).write_text("print(1)\n")
    return tmp_path


@pytest.mark.parametrize("apps, field, message", [
    ('[tool.workrun.apps.a]\nentry = "main.py"\nkind = "job"\n', "tool.workrun.apps.a.kind", "must be 'process' or 'tool', not a string ('job')"),
    ('[tool.workrun.apps.a]\nentry = "main.py"\ncolour = 1\n', "tool.workrun.apps.a.colour", "unknown key"),
    ('[tool.workrun.apps.a]\nkind = "process"\n', "tool.workrun.apps.a.entry", "is required"),
    ('[tool.workrun.apps.a]\nentry = "main.py"\n[tool.workrun.apps.a.output]\nx = { type = "str" }\n',
     "tool.workrun.apps.a.output.x.type", "must be 'string', 'integer'"),
    ('[tool.workrun.apps.a]\nentry = "main.py"\ntimeout = -1\n', "tool.workrun.apps.a.timeout", "greater than"),
])
def test_app_config_errors_name_file_and_field(tmp_path, apps, field, message):
    project = _project(tmp_path, apps)
    with pytest.raises(ConfigError) as err:
        load_project(project)
    assert err.value.file == str(project / "pyproject.toml")
    assert err.value.field == field
    assert message in err.value.message


def test_every_app_of_a_project_is_checked(tmp_path):
    """R-L1 (hostile review): an App project's errors are all reported, not only its first App's."""
    project = _project(tmp_path, '[tool.workrun.apps.a]\nentry = "main.py"\ntimeout = "60"\n'
                                 '[tool.workrun.apps.b]\nentry = "main.py"\nbogus = 1\n'
                                 '[tool.workrun.apps.c]\nentry = "missing.py"\n')
    with pytest.raises(ConfigError) as err:
        load_project(project)
    fields = [line.split(": ")[1] for line in err.value.lines()]
    # the valid App's entry path too, in the same round (CLI-completeness review: it took a second one)
    assert fields == ["tool.workrun.apps.a.timeout", "tool.workrun.apps.b.bogus", "tool.workrun.apps.c.entry"], \
        err.value.lines()
    (project / "pyproject.toml").write_text('[tool.workrun.apps.a]\nentry = "missing.py"\n'
                                            '[tool.workrun.apps.c]\nentry = "gone.py"\n')
    with pytest.raises(ConfigError) as err:  # their paths, App by App
        load_project(project)
    assert [line.split(": ")[1] for line in err.value.lines()] == ["tool.workrun.apps.a.entry",
                                                                   "tool.workrun.apps.c.entry"]


def test_missing_lock_is_an_error(tmp_path):
    project = _project(tmp_path, '[tool.workrun.apps.a]\nentry = "main.py"\n')
    (project / "uv.lock").unlink()
    with pytest.raises(ConfigError, match="uv.lock is missing"):
        load_project(project)
    # a folder with some other project's pyproject (no Apps, no lock): what is wrong first (new-user review)
    (project / "pyproject.toml").write_text('[project]\nname = "other"\nversion = "1"\n')
    with pytest.raises(ConfigError, match=r"no Apps declared: not an App project \(R-A1\)") as err:
        load_project(project)
    assert err.value.field == "tool.workrun.apps"


def test_render_keeps_types_and_interpolates():
    ctx = {"inputs": {"n": "3"}, "nodes": {"a": {"result": {"x": {"y": 5}, "s": "hi"}}}}
    assert render({"v": "{{ nodes.a.result.x.y }}", "t": "n={{ inputs.n }} s={{nodes.a.result.s}}"}, ctx) == \
        {"v": 5, "t": "n=3 s=hi"}
    with pytest.raises(TemplateValueError, match=r"^template \{\{ nodes.a.result.missing \}\} has no value$"):
        render("{{ nodes.a.result.missing }}", ctx)


def test_parse_inputs():
    assert parse_inputs(["a=1", "b=x=y", "c="]) == {"a": "1", "b": "x=y", "c": ""}
    with pytest.raises(ConfigError):
        parse_inputs(["novalue"])


def test_fingerprint_file_set_and_diff(tmp_path):
    project = _project(tmp_path, '[tool.workrun.apps.a]\nentry = "main.py"\n')
    (project / ".venv").mkdir()
    (project / ".venv" / "x.py").write_text("ignored")
    (project / "__pycache__").mkdir()
    (project / "__pycache__" / "m.py").write_text("ignored")
    (project / "data.txt").write_text("not source")
    (project / "pkg").mkdir()
    (project / "pkg" / "mod.py").write_text("x = 1\n")
    fp = fingerprint(project)
    assert sorted(fp.files) == ["compensate.py", "main.py", "pkg/mod.py", "pyproject.toml", "uv.lock"]
    (project / "main.py").write_text("print(2)\n")
    (project / "new.py").write_text("")
    (project / "compensate.py").unlink()
    fp2 = fingerprint(project)
    assert fp2.digest != fp.digest
    assert diff_fingerprints(fp.files, fp2.files) == ["main.py changed", "new.py added", "compensate.py removed"]


def test_journal_enforces_the_state_machine(tmp_path):
    from workrun.core.errors import InvalidTransitionError
    from workrun.core.states import TRANSITIONS, allowed
    from workrun.journal import SqliteJournal

    j = SqliteJournal(tmp_path / "j.sqlite3")
    j.create_run({"run_id": "r1", "workflow": "w", "workflow_path": "/w", "spec": {}, "inputs": {},
                  "status": "running", "created_at": 0.0}, ["a"])
    j.end_run("r1", "failed", at=1.0, reason="x")
    assert j.nodes("r1")[0]["status"] == "skipped"
    with pytest.raises(InvalidTransitionError, match="failed -> succeeded"):
        j.end_run("r1", "succeeded", at=2.0)
    j.create_run({"run_id": "r2", "workflow": "w", "workflow_path": "/w", "spec": {}, "inputs": {},
                  "status": "running", "created_at": 0.0}, ["a"])
    with pytest.raises(InvalidTransitionError):
        j.finish_node("r2", "a", status="succeeded", handled=False, result=None, at=1.0)  # skips running
    assert j.run("r1")["status"] == "failed" and j.nodes("r2")[0]["status"] == "pending"  # nothing written
    assert not allowed("compensations", "succeeded", "pending")  # a saved success is final (R-R2)
    assert "skipped" not in TRANSITIONS["compensations"]


def test_conditional_write_refuses_a_stale_status(tmp_path):
    from workrun.core.errors import JournalError, StaleStatusError
    from workrun.journal import SqliteJournal

    j = SqliteJournal(tmp_path / "j.sqlite3")
    j.create_run({"run_id": "r1", "workflow": "w", "workflow_path": "/w", "spec": {}, "inputs": {},
                  "status": "running", "created_at": 0.0}, ["a"])
    j.start_operation({"operation_id": "op1", "run_id": "r1", "node_key": "a", "app": "x", "project": "/p",
                       "kind": "process", "config": {}, "input": {}, "fingerprint": "f", "fingerprint_files": {},
                       "status": "starting", "call_dir": "/c", "created_at": 0.0})
    j.finish_operation("op1", status="succeeded", result={"ok": 1}, at=1.0)
    j.plan_compensations([{"compensation_id": "c1", "operation_id": "op1", "run_id": "r1", "node_key": "a",
                           "status": "pending", "max_attempts": 2, "timeout": 1, "backoff": 0, "created_at": 1.0,
                           "updated_at": 1.0}])
    j.set_compensation_status("c1", "blocked", reason="code changed", at=2.0)
    with pytest.raises(StaleStatusError, match="changed from pending to blocked meanwhile") as err:
        j.start_attempt("c1", 1, trigger="auto", call_dir="/c1", seen="pending", at=3.0)
    assert isinstance(err.value, JournalError)
    assert j.attempts("c1") == [] and j.compensation("c1")["status"] == "blocked"  # nothing written
    j.start_attempt("c1", 1, trigger="auto", call_dir="/c1", seen="blocked", at=3.0)
    assert j.compensation("c1")["status"] == "running" and j.attempts("c1")[0]["status"] == "starting"
    j.finish_attempt("c1", 1, status="failed", failure="exited", error="exited with code 1", result=None, at=4.0,
                     exit_code=1, compensation_status="pending", reason="retry", next_attempt_at=5.0)
    assert j.attempts("c1")[0]["failure"] == "exited" and j.compensation("c1")["next_attempt_at"] == 5.0


def test_workflow_name_survives_templated_nodes(tmp_path: Path) -> None:
    """Regression: the workflow's ``name`` was overwritten by the last templated field's name ("input")."""
    from workrun.config.workflow import load_workflow
    from workrun.nodes import default_executors

    executors = default_executors()
    wf = tmp_path / "wf.toml"
    wf.write_text('name = "cleanup-tutorial"\n[inputs]\nnote = "n"\n'
                  '[nodes.a]\nkind = "remote_agent"\nurl = "http://127.0.0.1:9/"\nmessage = "{{ inputs.note }}"\n')
    assert load_workflow(wf, {}, executors)[0].name == "cleanup-tutorial"
    wf.write_text('[nodes.a]\nkind = "remote_agent"\nurl = "http://127.0.0.1:9/"\nmessage = "hi"\n')
    assert load_workflow(wf, {}, executors)[0].name == "wf"


@pytest.mark.parametrize("with_run", [False, True])
def test_progress_lines_name_their_run_when_a_worker_drives_several(capsys, with_run):
    """``workrun worker`` drives several runs at once: its progress lines start with the run id."""
    from workrun.cli.output import CliReporter

    CliReporter(with_run=with_run).message("run_abc123", "charge", "info", "call op_1 started")
    out = capsys.readouterr().out
    assert "charge" in out and "call op_1 started" in out
    assert ("run_abc123 charge" in out) is with_run


def test_an_app_environment_follows_every_change_of_this_process_environment(monkeypatch, tmp_path):
    """app_environment is built once per (venv, SDK) and used again only while os.environ is unchanged."""
    from workrun.runner.env import app_environment

    python = str(tmp_path / "venv" / "bin" / "python")
    monkeypatch.setenv("SOME_SETTING", "one")
    first = app_environment(python, tmp_path / "sdk", tmp_path / "c1")
    assert first["SOME_SETTING"] == "one" and first["WORKRUN_CALL_DIR"] == str(tmp_path / "c1")
    monkeypatch.setenv("SOME_SETTING", "two")
    monkeypatch.setenv("WORKRUN_FAULT", "op.intent")  # never passed on to an App
    second = app_environment(python, tmp_path / "sdk", tmp_path / "c2")
    assert second["SOME_SETTING"] == "two" and "WORKRUN_FAULT" not in second
    assert second["WORKRUN_CALL_DIR"] == str(tmp_path / "c2") and first["WORKRUN_CALL_DIR"] == str(tmp_path / "c1")
    monkeypatch.delenv("SOME_SETTING")
    assert "SOME_SETTING" not in app_environment(python, tmp_path / "sdk", tmp_path / "c3")


def test_the_watchdog_is_woken_for_a_deadline_before_its_next_look_and_ends_that_group_on_time():
    """watch() wakes the watchdog only for a deadline earlier than its next look (every ``tick``): a short
    deadline is still kept to, not found a tick late."""
    import subprocess
    import time

    from workrun.runner.process import Watchdog

    dog = Watchdog(grace=0.2, tick=30.0)
    time.sleep(0.05)  # its first look is now 30 s away
    far = subprocess.Popen(["sleep", "30"], start_new_session=True)
    near = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        dog.watch(far.pid, time.time() + 60)
        t0 = time.monotonic()
        watched = dog.watch(near.pid, time.time() + 0.3)
        assert near.wait(timeout=5) == -15 and watched.timed_out  # SIGTERM at its deadline
        assert time.monotonic() - t0 < 3
        assert far.poll() is None
    finally:
        for p in (far, near):
            p.kill()
            p.wait()


@pytest.mark.parametrize("rel", ["l/b/f.py", "a/rel", "l/../a", "missing/x", "l/b/../b/f.py", "l", "a/b/"])
def test_real_path_is_realpath(tmp_path, rel):
    """workrun.core.paths.real_path asks the kernel (O_PATH + /proc/self/fd) and must answer as os.path.realpath
    does: through symlinks (absolute and relative), '..' after a link, missing tails, directories."""
    import os

    from workrun.core.paths import real_path

    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "f.py").write_text("")
    (tmp_path / "l").symlink_to(tmp_path / "a")
    (tmp_path / "a" / "rel").symlink_to("b/f.py")
    path = str(tmp_path / rel) + ("/" if rel.endswith("/") else "")
    assert real_path(path) == os.path.realpath(path)


def test_a_list_is_aligned_by_terminal_columns_and_shows_control_characters_as_escapes(capsys, monkeypatch):
    """``runs list`` / ``compensations list`` text (issue 14, R-P3): aligned columns, every value on one line,
    nothing a terminal would act on (ESC, a line break, a bidi override), wide characters counted as two."""
    from workrun.cli.output import print_list

    monkeypatch.setattr(sys.stdout, "isatty", lambda: False)
    print_list(["run", "workflow", "status"],
               [["run_1", "\x1b[31mred\n2\u2028x", "failed"], ["run_2", "東京", "succeeded"], ["run_3", "e\u0301\u202e", "x"]],
               status_column=2)
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        "run    workflow" + " " * 17 + "status",  # the widest value, 23 columns, then two spaces
        "run_1  \\x1b[31mred\\x0a2\\u2028x  failed",
        "run_2  東京" + " " * 21 + "succeeded",  # two wide characters: 4 columns
        "run_3  e\u0301\\u202e" + " " * 18 + "x",  # a combining accent: 0 columns
    ], lines


@pytest.mark.parametrize("no_color", [None, "1"])
def test_a_list_on_a_terminal_has_a_bold_header_and_coloured_statuses_unless_no_color(capsys, monkeypatch, no_color):
    from workrun.cli.output import print_list

    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    monkeypatch.setenv("TERM", "xterm")
    if no_color is None:
        monkeypatch.delenv("NO_COLOR", raising=False)
    else:
        monkeypatch.setenv("NO_COLOR", no_color)
    print_list(["run", "status"], [["run_1", "failed"], ["run_2", "odd\x1b"]], status_column=1)
    out = capsys.readouterr().out
    if no_color:
        assert out == "run    status\nrun_1  failed\nrun_2  odd\\x1b\n"
    else:
        assert out == ("\x1b[1mrun\x1b[0m    \x1b[1mstatus\x1b[0m\nrun_1  \x1b[31mfailed\x1b[0m\n"
                       "run_2  odd\\x1b\n")


@pytest.mark.parametrize("text", ['{"v": NaN}', "[Infinity]", "-Infinity", "[" * 100_000 + "]" * 100_000,
                                  "[" * 201 + "]" * 201, '{"a": 1e999}', "[-1e400]", '{"a": "\\udc80"}',
                                  '{"\\ud800": 1}'])
def test_strict_json_refuses_nan_infinity_and_nesting_too_deep_to_read(text):
    from workrun_sdk._wire import loads_strict

    with pytest.raises(ValueError):
        loads_strict(text)
    assert loads_strict('{"v": [1.5, -2e300, "NaN"]}') == {"v": [1.5, -2e300, "NaN"]}
    assert loads_strict('["\\ud83d\\ude00"]') == ["\N{GRINNING FACE}"]  # a surrogate pair is one character
    assert loads_strict("[" * 200 + "]" * 200)


@pytest.mark.parametrize("value, field", [("nan", "nodes.a.input.v"), ("[1, -inf]", "nodes.a.input.v[1]"),
                                          ("{ w = +inf }", "nodes.a.input.v.w")])
def test_a_workflow_with_nan_or_inf_is_a_config_error_naming_the_field(tmp_path, value, field):
    from workrun.runner.apps import parse_toml

    text = f'name = "w"\n[nodes.a]\napp = "x"\ninput = {{ v = {value} }}\n'
    with pytest.raises(ConfigError) as err:
        parse_toml(text, "w.toml")
    assert err.value.line().startswith(f"w.toml: {field}: "), err.value.line()
    assert parse_toml(text.replace(value, "1.5"), "w.toml")["nodes"]["a"]["input"] == {"v": 1.5}


def test_text_for_rich_shows_control_characters_as_escapes_and_keeps_line_breaks():
    """Names, messages, stderr lines and notes go to the terminal through ``escape``: nothing in them acts on it."""
    from workrun.cli.output import escape

    shown = escape("a\x1b]0;title\x07 \x1b[31mred[/] \u202eevil\rline\nnext\tcol")
    assert "\x1b" not in shown and "\x07" not in shown and "\u202e" not in shown and "\r" not in shown
    assert shown == "a\\x1b]0;title\\x07 \\x1b[31mred\\[/] \\u202eevil\\x0dline\nnext\tcol"


def test_resume_keeps_waiting_for_a_dead_runners_run_whose_lease_passes_between_its_two_looks():
    """A CI run caught ``workrun resume`` (shared journal) saying "nothing to resume" with a dead runner's run left:
    its claim failed while the lease still held, and its look for held runs, a moment later, found the lease passed.
    The look uses the time from before the claim now, so the run is still waited for (and claimed next)."""
    import socket as _socket
    import time as _time

    from workrun.cluster import workers

    lease = _time.time() - 0.001  # passed just now, after the claim that found the run still held

    class Journal:
        def held_runs_needing_work(self, now: float) -> list[dict]:
            return [{"run_id": "run_1", "worker_id": "wkr_dead", "lease_until": lease, "host": _socket.gethostname(),
                     "pid": None}] if lease >= now else []

    class Svc:
        journal = Journal()
        said: list[str] = []

        def say(self, run_id, node_key, level, text):
            self.said.append(text)

    svc = Svc()
    host = _socket.gethostname()
    assert workers._orphaned_claims(svc, host, [], set(), lease - 0.5) is True  # the time of the failed claim
    assert "taking the run over when its lease passes" in svc.said[0]
    assert workers._orphaned_claims(svc, host, [], set(), _time.time()) is False  # what it asked before: gone


def test_compensation_plan_text_lines_up(capsys, monkeypatch):
    """``compensate RUN --dry-run``: the node, compensation, App or action and status columns line up whatever the
    lengths of node keys and places (new-user review)."""
    from workrun.cli import main as cli_main

    monkeypatch.setenv("NO_COLOR", "1")
    steps = [{"place": p, "node_key": k, "compensation_id": f"cmp_{p:012d}", "app": a, "status": "pending",
              "held_back_by": []} for p, k, a in ((1, "publish", "step"), (2, "notify", "step"), (10, "a", "longer"))]
    steps.append({"place": 11, "node_key": "refund_order", "compensation_id": "cmp_000000000011",
                  "action": "DELETE http://x/1", "status": "pending", "held_back_by": ["cmp_000000000001"]})
    cli_main._print_plan({"run_id": "run_1", "status": "failed", "plan": steps, "would": "run 4 compensations"})
    lines = capsys.readouterr().out.splitlines()[1:5]
    assert [line.index("cmp_") for line in lines] == [lines[0].index("cmp_")] * 4, lines
    assert len({line.index("pending") for line in lines}) == 1, lines
    assert lines[0].startswith("   1. publish") and lines[3].endswith("held back by cmp_000000000001"), lines


def test_command_lists_show_each_summary_as_one_sentence():
    """A group's command list shows each command's first help paragraph on one line (typer's rich help kept a
    docstring's line breaks there: gaps in mid-sentence, new-user review)."""
    import os

    env = {**os.environ, "COLUMNS": "250", "NO_COLOR": "1"}
    out = subprocess.run([sys.executable, "-m", "workrun", "--help"], env=env, capture_output=True, text=True,
                         check=True).stdout
    graph = next(line for line in out.splitlines() if "│ graph " in line)
    assert "template references dashed); for a run, each node's status and its compensations' places in " \
           "compensation order." in graph, out


def test_check_reports_a_nodes_needs_beside_its_bad_on_failure(tmp_path):
    """R-L1: a bad ``on_failure`` no longer hides the node's other errors (here an unknown node in ``needs``):
    the node is checked as if it said "fail" (new-user review)."""
    from workrun import api

    demo = Path(__file__).resolve().parents[1] / "demo_apps"
    text = (demo / "workflows" / "tutorial.toml").read_text().replace('"../', f'"{demo}/')
    assert 'needs = ["create"]' in text and 'on_failure = "fail"' in text
    wf = tmp_path / "bad.toml"
    wf.write_text(text.replace('needs = ["create"]', 'needs = ["creat"]').replace('on_failure = "fail"',
                                                                                'on_failure = "explode"'))
    from workrun.core.errors import ConfigErrors

    with pytest.raises(ConfigErrors) as caught:
        api.check(wf, home=tmp_path / "home")
    lines = caught.value.lines()
    assert len(lines) == 2 and "nodes.boom.on_failure: must be" in lines[0], lines
    assert lines[1].endswith("nodes.boom.needs: unknown node 'creat'"), lines


def test_check_reports_an_unknown_key_beside_the_nodes_other_errors(tmp_path):
    """R-L1: an unknown key no longer hides the node's other errors (here a missing App project): the node is
    checked further without it. An unknown key beside another shape error is reported with it, as before."""
    from workrun import api
    from workrun.core.errors import ConfigErrors

    wf = tmp_path / "bad.toml"
    wf.write_text('[nodes.a]\nproject = "nope"\napp = "x"\nbogus = 1\n')
    with pytest.raises(ConfigErrors) as caught:
        api.check(wf, home=tmp_path / "home")
    assert [line.split(": ", 2)[1:] for line in caught.value.lines()] == [
        ["nodes.a.bogus", "unknown key"], ["nodes.a.project", f"App project directory {tmp_path / 'nope'} not found"]]
    wf.write_text('[nodes.a]\nproject = 3\napp = "x"\nbogus = 1\n')
    with pytest.raises(ConfigErrors) as caught:
        api.check(wf, home=tmp_path / "home")
    assert [line.split(": ", 2)[1] for line in caught.value.lines()] == ["nodes.a.project", "nodes.a.bogus"]


def test_start_up_holds_garbage_collection_until_scheduling(isolated_env):
    """A CLI command's start-up collects no garbage (issue 33); scheduling ends the hold, and so does the block's end,
    an error included; a program that turned collection off keeps it off."""
    import gc

    from workrun.app.session import scheduling, start_up

    assert gc.isenabled()
    with start_up():
        assert not gc.isenabled()
        with start_up():  # an inner block changes nothing
            assert not gc.isenabled()
        assert not gc.isenabled()
        with scheduling():
            assert gc.isenabled()  # a run of any length collects its garbage
        assert gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(ConfigError), start_up():
        raise ConfigError("bad")
    assert gc.isenabled()
    gc.disable()
    try:
        with start_up():
            with scheduling():
                assert not gc.isenabled()  # the program's choice
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_planned_step_whose_code_changed_says_compensate_comes_first():
    """`compensate --dry-run` of a stopped run whose App changed: the compensation is not in the journal yet, so
    `retry` or `resolve` of it would find nothing until `compensate` writes it (hostile review)."""
    from workrun.app.runs import _plan_todo

    step = {"compensation_id": "cmp_1", "status": "pending", "held_back_by": [], "planned": True,
            "code_change": "code changed since the call: compensate.py changed"}
    assert _plan_todo(step, "run_1") == (
        "not in the journal yet (`workrun compensate run_1` writes it); then code changed since the call "
        "(compensate.py changed): `workrun compensations retry cmp_1 --accept-code-change` or "
        "`workrun compensations resolve cmp_1`")
    held = {**step, "planned": False, "status": "blocked", "held_back_by": ["cmp_2"]}
    assert _plan_todo(held, "run_1").startswith("held back by cmp_2 until they are done; then "
                                                                   "code changed since the call")
    assert _plan_todo({**held, "code_change": None}, "run_1") == \
        "held back by cmp_2 until they are done"


def test_a_busy_metrics_port_names_what_the_person_gave() -> None:
    """R-F4 (conformance review): ``worker --metrics-port`` on a port in use names the option, not the variable."""
    import socket

    from workrun.app.session import serve_metrics
    from workrun.core.errors import UsageError

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        with pytest.raises(UsageError) as err:
            serve_metrics(busy.getsockname()[1])
    assert err.value.field == "--metrics-port" and err.value.exit_code == 2


def test_an_environment_whose_project_is_gone_says_so_in_words(tmp_path):
    """Hostile review: a retried compensation whose App project was deleted said "uv sync failed: [Errno 2] …
    PosixPath('…')". It says the directory is gone, naming it (the compensation waits, pending, for resume)."""
    import pytest

    from workrun.core.errors import EnvironmentUnavailableError
    from workrun.runner.env import EnvManager

    gone = tmp_path / "deleted-project"
    with pytest.raises(EnvironmentUnavailableError) as err:
        EnvManager(tmp_path / "data")._sync(gone, offline=False)
    assert err.value.detail.endswith(": the project directory is gone") and err.value.file == str(gone)
    assert "Errno" not in err.value.detail and "PosixPath" not in err.value.detail
