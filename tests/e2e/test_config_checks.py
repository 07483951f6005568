"""Bad config and input are refused before anything runs (SPEC §17, issue 16): typed config, templates,
unknown ``--input`` names, a directory where a file belongs. Each case: exit 2, one ``error:`` line naming
the file and field, no run created, the journal untouched."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

APP = """
[tool.workrun.apps.t]
kind = "process"
entry = "main.py"
{extra}
compensation = {{ entry = "compensate.py"{comp} }}
[tool.workrun.apps.t.output]
name = {{ type = "string"{out} }}
[tool.workrun.apps.tool]
kind = "tool"
entry = "tool.py"
"""
MAIN = "from workrun_sdk import process\nprocess.result({'name': 'x'})\n"

# (App line, compensation extra, output extra, field) — every typed field of an App's config
APP_CASES = [
    ('timeout = "60"', "", "", "timeout"),
    ("timeout = true", "", "", "timeout"),
    ('idempotent = "yes"', "", "", "idempotent"),
    ("idempotent = 1", "", "", "idempotent"),
    ("description = 3", "", "", "description"),
    ("", ', max_retries = "3"', "", "compensation.max_retries"),
    ("", ", max_retries = 2.5", "", "compensation.max_retries"),
    ("", ", max_retries = true", "", "compensation.max_retries"),
    ("", ', timeout = "120"', "", "compensation.timeout"),
    ("", ', backoff = "1"', "", "compensation.backoff"),
    ("", ", backoff = false", "", "compensation.backoff"),
    ("", ', idempotent = "yes"', "", "compensation.idempotent"),
    ("", ", code = 1", "", "compensation.code"),
    ("", "", ', required = "yes"', "output.name.required"),
    ("tools = { x = { confirm = true } }", "", "", "tools.x.confirm"),
    ("tools = { x = 1 }", "", "", "tools.x"),
]


def _journal_digest(home: Path) -> str:
    return hashlib.sha256((home / "journal.sqlite3").read_bytes()).hexdigest()


@pytest.fixture
def refused(cli, isolated_env):
    """``refused(args, file, field)``: the command exits 2 with one error line naming file and field, and
    creates no run: the journal is byte for byte what it was. Run in process (the ``cli`` fixture): what is
    checked here is decided before anything starts (issue 27: milliseconds, not three Python processes)."""

    def check(args: list, file: Path | str | None, field: str | None, env: dict | None = None) -> str:
        assert cli("runs", "list", "--json").json() == []
        before = _journal_digest(isolated_env)
        res = cli(*args, env=env)
        assert res.code == 2, res
        lines = res.err.strip().splitlines()
        assert len(lines) == 1, res
        prefix = "error: " + (f"{file}: " if file else "") + (f"{field}: " if field else "")
        assert lines[0].startswith(prefix), res
        assert "Traceback" not in res.err
        assert _journal_digest(isolated_env) == before
        assert cli("runs", "list", "--json").json() == []
        return lines[0]

    return check


def _app_project(make_project, extra="", comp="", out=""):
    return make_project("typed", APP.format(extra=extra, comp=comp, out=out),
                        {"main.py": MAIN, "compensate.py": "print(1)\n", "tool.py": "print(1)\n"})


@pytest.mark.parametrize("extra, comp, out, field", APP_CASES)
def test_wrong_type_in_app_config_is_refused(refused, make_project, write_workflow, extra, comp, out, field):
    project = _app_project(make_project, extra, comp, out)
    wf = write_workflow("wf", f'[nodes.a]\nproject = "{project}"\napp = "t"\n')
    line = refused(["run", wf], project / "pyproject.toml", f"tool.workrun.apps.t.{field}")
    assert " not " in line or "should be" in line
    # the standalone call reads the same config
    res = refused(["app", "run", project, "t"], project / "pyproject.toml", f"tool.workrun.apps.t.{field}")
    assert res == line


NODE = 'project = "{project}"\napp = "t"\n'
AGENT = 'kind = "agent"\ntools = [{{ project = "{project}", app = "tool" }}]\n'
REMOTE = 'kind = "remote_agent"\nurl = "http://127.0.0.1:9/"\nmessage = "hi"\n'

# (top-level lines, node a's base, node a's extra line, field) — every typed field of a workflow
WORKFLOW_CASES = [
    ("name = 1", NODE, "", "name"),
    ("description = 2", NODE, "", "description"),
    ("inputs = 3", NODE, "", "inputs"),
    ("", NODE, "kind = 1", "nodes.a.kind"),
    ("", NODE, 'needs = "b"', "nodes.a.needs"),
    ("", NODE, "needs = [1]", "nodes.a.needs.0"),
    ("", NODE, 'input = "x"', "nodes.a.input"),
    ("", NODE, 'on_failure = { retry = { attempts = "3" } }', "nodes.a.on_failure.retry.attempts"),
    ("", NODE, "on_failure = { retry = { attempts = 2.0 } }", "nodes.a.on_failure.retry.attempts"),
    ("", NODE, 'on_failure = { retry = { backoff = "0.5" } }', "nodes.a.on_failure.retry.backoff"),
    ("", NODE, "on_failure = { retry = { backoff = true } }", "nodes.a.on_failure.retry.backoff"),
    ("", AGENT, 'max_steps = "5"', "nodes.a.max_steps"),
    ("", AGENT, "max_steps = true", "nodes.a.max_steps"),
    ("", AGENT, 'fail_answer = "yes"', "nodes.a.fail_answer"),
    ("", AGENT, "prompt = 1", "nodes.a.prompt"),
    ("", AGENT, "model = 1", "nodes.a.model"),
    ("", AGENT, 'script = "x"', "nodes.a.script"),
    ("", REMOTE, 'timeout = "60"', "nodes.a.timeout"),
    ("", REMOTE, "timeout = false", "nodes.a.timeout"),
]


@pytest.mark.parametrize("top, base, extra, field", WORKFLOW_CASES)
def test_wrong_type_in_workflow_is_refused(refused, make_project, write_workflow, top, base, extra, field):
    project = _app_project(make_project)
    wf = write_workflow("wf", f"{top}\n[nodes.a]\n{base.format(project=project)}{extra}\n")
    refused(["run", wf], wf, field)


def test_integer_where_a_number_belongs_is_fine(workrun, make_project, write_workflow):
    """An integer is a fine number (timeout = 60, backoff = 1); the run goes ahead."""
    project = _app_project(make_project, comp=", backoff = 1, timeout = 30")
    wf = write_workflow("wf", f'[nodes.a]\nproject = "{project}"\napp = "t"\n'
                              'on_failure = { retry = { attempts = 2, backoff = 0 } }\n')
    res = workrun("run", wf, "--json")
    assert res.code == 0, res
    assert res.json()["operations"][0]["result"] == {"name": "x"}


@pytest.mark.parametrize("text, message", [
    ("{{ inputs.note", "unterminated template"),
    ("a {{ inputs.note }} b {{ inputs.note", "unterminated template"),
    ("inputs.note }}", "'}}' without"),
    ("{{ inputs.note }} }}", "'}}' without"),
])
@pytest.mark.parametrize("line, field", [
    ('input = { a = { b = ["%s"] } }', "nodes.a.input.a.b[0]"),
    ('input = { a = "%s" }', "nodes.a.input.a"),
])
def test_unterminated_template_is_refused(refused, make_project, write_workflow, text, message, line, field):
    project = _app_project(make_project)
    wf = write_workflow("wf", f'[inputs]\nnote = "n"\n[nodes.a]\nproject = "{project}"\napp = "t"\n{line % text}\n')
    assert message in refused(["run", wf], wf, field)


@pytest.mark.parametrize("node_kind, field", [("prompt", "nodes.a.prompt"), ("message", "nodes.a.message")])
def test_unterminated_template_in_prompt_and_message(refused, make_project, write_workflow, node_kind, field):
    project = _app_project(make_project)
    base = AGENT.format(project=project) if node_kind == "prompt" else REMOTE.replace('message = "hi"\n', "")
    wf = write_workflow("wf", f'[nodes.a]\n{base}{node_kind} = "Do {{{{ inputs.x"\n')
    assert "unterminated template" in refused(["run", wf], wf, field)


def test_unknown_input_name_is_refused_naming_the_known_ones(refused, workrun, make_project, write_workflow):
    project = _app_project(make_project)
    wf = write_workflow("wf", f'[inputs]\nnote = "n"\n[nodes.a]\nproject = "{project}"\napp = "t"\n'
                              'input = { x = "{{ inputs.used }}", y = "{{ inputs.note }}" }\n')
    line = refused(["run", wf, "--input", "used=1", "--input", "nmae=2"], wf, "--input")
    assert "'nmae'" in line and "note, used" in line
    # both kinds of known names are accepted
    res = workrun("run", wf, "--input", "used=1", "--input", "note=2", "--json")
    assert res.code == 0, res
    assert res.json()["operations"][0]["input"] == {"x": "1", "y": "2"}


@pytest.mark.parametrize("name", ["pyproject.toml", "uv.lock"])
def test_directory_where_a_project_file_belongs(refused, make_project, write_workflow, name):
    project = _app_project(make_project)
    (project / name).unlink()
    (project / name).mkdir()
    line = refused(["app", "run", project, "t"], project / name, None)
    assert line.endswith(f"{name} is a directory, not a file (R-A1)")
    wf = write_workflow("wf", f'[nodes.a]\nproject = "{project}"\napp = "t"\n')
    assert refused(["run", wf], project / name, None) == line


@pytest.mark.parametrize("apps_toml, field", [("[tool]\nworkrun = 5\n", "tool.workrun"),
                                              ('[tool]\nworkrun = "apps"\n', "tool.workrun"),
                                              ("[tool.workrun]\napps = 5\n", "tool.workrun.apps")])
def test_tool_workrun_that_is_not_a_table(refused, make_project, write_workflow, apps_toml, field):
    project = make_project("shape", apps_toml, {"main.py": MAIN})
    wf = write_workflow("wf", f'[nodes.a]\nproject = "{project}"\napp = "t"\n')
    refused(["run", wf], project / "pyproject.toml", field)


# -- WORKRUN_* settings (SPEC §17) -------------------------------------------------------------

BAD_SETTINGS = [
    ("WORKRUN_CONCURRENCY", "abc"), ("WORKRUN_CONCURRENCY", "0"), ("WORKRUN_CONCURRENCY", "2.5"),
    ("WORKRUN_GRACE", "-3"), ("WORKRUN_GRACE", "soon"), ("WORKRUN_GRACE", "nan"),
    ("WORKRUN_SYNC", "yes"),
    ("WORKRUN_SNAPSHOT_MAX_BYTES", "0"), ("WORKRUN_SNAPSHOT_MAX_BYTES", "64MiB"),
    ("WORKRUN_FAULT", "op intent"), ("WORKRUN_FAULT", "op.intent@0"),
    ("WORKRUN_MAX_PAGES", "-1"), ("WORKRUN_MAX_PAGES", "lots"),
    ("WORKRUN_LAUNCH", "thread"), ("WORKRUN_JOURNAL", "mysql://db/x"), ("WORKRUN_LEASE", "0.5"),
    ("WORKRUN_DB_RETRY", "-1"), ("WORKRUN_DB_RETRY", "forever"), ("WORKRUN_DB_RETRY", "1_0"),
    ("WORKRUN_DB_RETRY", "\uff15"),
    ("WORKRUN_HTTP_ALLOW", "shop.example:80"), ("WORKRUN_HTTP_ALLOW", "127.0.0.1:99999"),
    ("WORKRUN_ACTOR", "ui:bob\nadmin"), ("WORKRUN_METRICS_PORT", "http"), ("WORKRUN_METRICS_PORT", "70000"),
]


def test_every_documented_setting_is_checked_and_tested():
    """Every WORKRUN_* variable the README documents is one workrun.core.settings checks, and each checked one has
    a bad value below (WORKRUN_HOME has its own tests)."""
    import re

    from workrun.core.settings import VARIABLES

    root = Path(__file__).resolve().parents[2]
    readme = (root / "README.md").read_text() + "".join(p.read_text() for p in (root / "docs").rglob("*.md"))
    # WORKRUN_CALL_DIR is set by the runner for Apps; WORKRUN_SCREENSHOTS is read by the browser tests only,
    # WORKRUN_TEST_WORKERS by scripts/dev.py test
    documented = set(re.findall(r"WORKRUN_[A-Z_]+[A-Z]", readme)) - {"WORKRUN_CALL_DIR", "WORKRUN_SCREENSHOTS",
                                                                     "WORKRUN_TEST_WORKERS"}
    assert documented - set(VARIABLES) == set()
    assert {name for name, _ in BAD_SETTINGS} | {"WORKRUN_HOME"} == set(VARIABLES)


@pytest.mark.parametrize("name, value", BAD_SETTINGS)
def test_bad_setting_is_refused_before_anything_runs(refused, cli, make_project, write_workflow, name, value):
    from workrun.core.settings import VARIABLES

    project = _app_project(make_project)
    wf = write_workflow("wf", f'[nodes.a]\nproject = "{project}"\napp = "t"\n')
    for args in (["run", wf], ["runs", "list"], ["check", wf]):
        line = refused(args, None, name, env={name: value})
        assert line == f"error: {name}: must be {VARIABLES[name][2]}, not {value!r}"
    as_json = cli("check", wf, "--json", env={name: value})  # R-L1's JSON, a bad setting among its errors
    assert as_json.code == 2 and as_json.json() == {"ok": False, "errors": [
        f"{name}: must be {VARIABLES[name][2]}, not {value!r}"]}, as_json


def test_good_settings_are_taken(workrun, make_project, write_workflow):
    project = _app_project(make_project)
    wf = write_workflow("wf", f'[nodes.a]\nproject = "{project}"\napp = "t"\n')
    env = {"WORKRUN_CONCURRENCY": "2", "WORKRUN_GRACE": "0.5", "WORKRUN_SYNC": "FULL",
           "WORKRUN_SNAPSHOT_MAX_BYTES": "1000000", "WORKRUN_MAX_PAGES": "100000", "WORKRUN_FAULT": "remote.cancel@3"}
    res = workrun("run", wf, "--json", env=env)
    assert res.code == 0, res


def test_home_that_is_a_file_is_refused(refused, workrun, make_project, write_workflow, tmp_path):
    project = _app_project(make_project)
    wf = write_workflow("wf", f'[nodes.a]\nproject = "{project}"\napp = "t"\n')
    home = tmp_path / "home-file"
    home.write_text("not a dir")
    for args in (["run", wf], ["runs", "list"], ["resume"]):
        line = refused(args, None, "WORKRUN_HOME", env={"WORKRUN_HOME": str(home)})
        assert f"{home} is a file, not a directory" in line
    under = home / "sub"
    line = refused(["run", wf], None, "WORKRUN_HOME", env={"WORKRUN_HOME": str(under)})
    assert f"{under} cannot be created" in line
    assert home.read_text() == "not a dir"


# -- a private data dir (SPEC §17) -------------------------------------------------------------

SNAP_APP = """
[tool.workrun.apps.snap]
entry = "main.py"
compensation = { entry = "compensate.py", code = "snapshot", backoff = 0.05 }
"""
SNAP_MAIN = """
import sys
from workrun_sdk import process
data = process.input()
print("to stdout"); print("to stderr", file=sys.stderr)
process.resource("demo", data.get("name", "x"))
if data.get("fail"):
    raise SystemExit(3)
process.result({"name": data.get("name", "x")})
"""
SNAP_COMPENSATE = """
from workrun_sdk import compensation
compensation.result({"undone": compensation.context().original_result["name"]})
"""


def _loose_modes(root: Path) -> list[str]:
    """Every entry under ``root`` (itself included) whose mode is not 0700 (dirs) or 0600 (files; 0700 for
    the few executables a uv environment holds)."""
    loose = []
    for path in [root, *root.rglob("*")]:
        st = path.lstat()
        if stat.S_ISLNK(st.st_mode):
            continue
        want = (0o700,) if stat.S_ISDIR(st.st_mode) else (0o600, 0o700) if ".venv" in path.parts else (0o600,)
        if stat.S_IMODE(st.st_mode) not in want:
            loose.append(f"{path.relative_to(root)} {stat.S_IMODE(st.st_mode):04o}")
    return loose


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_data_dir_is_private_whatever_the_umask(workrun, make_project, write_workflow, isolated_env, umask_022,
                                                 tmp_path):
    """After calls, kills mid-way (call directories left behind), snapshots and compensations, the data dir
    and every directory in it are 0700 and every file 0600 (SPEC §17)."""
    project = make_project("snap", SNAP_APP, {"main.py": SNAP_MAIN, "compensate.py": SNAP_COMPENSATE})
    wf = write_workflow("wf", f"""
        [nodes.a]
        project = "{project}"
        app = "snap"
        input = {{ name = "a" }}
        [nodes.boom]
        project = "{project}"
        app = "snap"
        needs = ["a"]
        input = {{ fail = true }}
    """)
    res = workrun("run", wf, "--json", env={"WORKRUN_FAULT": "op.finished"})  # killed with a's call dir left
    assert res.code == -signal.SIGKILL, res
    assert list((isolated_env / "calls").iterdir()), "a call directory is left to check"
    assert _loose_modes(isolated_env) == []
    res = workrun("resume", "--json", env={"WORKRUN_FAULT": "attempt.finished"})  # killed after the attempt
    assert res.code == -signal.SIGKILL, res
    assert _loose_modes(isolated_env) == []
    res = workrun("resume", "--json")
    assert res.code == 0, res
    (run,) = workrun("runs", "list", "--json").json()
    view = workrun("runs", "show", run["run_id"], "--json").json()
    (op_a,) = [op for op in view["operations"] if op["node_key"] == "a"]
    assert op_a["compensation"]["status"] == "succeeded"
    assert {p.name for p in isolated_env.iterdir()} >= {"journal.sqlite3", "snapshots", "objects", "sdk"}
    assert _loose_modes(isolated_env) == []
    # what the App writes outside the data dir keeps the user's umask only for uv's project environment
    assert stat.S_IMODE((project / ".venv").stat().st_mode) == 0o755


def test_data_dir_others_can_write_is_refused(refused, tmp_path, make_project, write_workflow, isolated_env):
    project = _app_project(make_project)
    wf = write_workflow("wf", f'[nodes.a]\nproject = "{project}"\napp = "t"\n')
    shared = tmp_path / "shared-home"
    for mode in (0o777, 0o770, 0o702):
        shared.mkdir(exist_ok=True)
        os.chmod(shared, mode)
        for args in (["run", wf], ["runs", "list"], ["check", wf]):  # check: as run would (hostile review)
            line = refused(args, None, "WORKRUN_HOME", env={"WORKRUN_HOME": str(shared)})
            assert f"{shared} is writable by group or others (mode {mode:04o})" in line
        assert list(shared.iterdir()) == []
    under_a_file = tmp_path / "a-file"  # one run cannot create: check says so as run does (hostile review)
    under_a_file.write_text("")
    for args in (["run", wf], ["check", wf]):
        line = refused(args, None, "WORKRUN_HOME", env={"WORKRUN_HOME": str(under_a_file / "home")})
        assert line.endswith(f"{under_a_file / 'home'} cannot be created: Not a directory"), line


def _without_dac(cmd: list[str]) -> list[str]:
    """Run ``cmd`` without the capability that lets root write anywhere, so file modes apply to it too."""
    return ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--", *cmd]


@pytest.mark.skipif(os.geteuid() == 0 and not shutil.which("setpriv"),
                    reason="as root, a read-only directory needs setpriv to drop CAP_DAC_OVERRIDE")
def test_home_this_user_cannot_write(workrun, make_project, write_workflow, tmp_path):
    """A data dir this user cannot write: scheduling commands exit 2 naming it; read commands still read."""
    project = _app_project(make_project)
    wf = write_workflow("wf", f'[nodes.a]\nproject = "{project}"\napp = "t"\n')
    home = tmp_path / "ro-home"
    res = workrun("run", wf, "--json", env={"WORKRUN_HOME": str(home)})
    assert res.code == 0, res
    run_id = res.json()["run_id"]
    os.chmod(home, 0o500)
    try:
        def cli(*args: str) -> subprocess.CompletedProcess[str]:
            cmd = [sys.executable, "-m", "workrun", *map(str, args)]
            return subprocess.run(_without_dac(cmd) if os.geteuid() == 0 else cmd, capture_output=True, text=True,
                                  env={**os.environ, "WORKRUN_HOME": str(home)}, timeout=120)

        for args in (["run", wf], ["resume"], ["app", "run", project, "t"], ["stop", run_id]):
            proc = cli(*args)
            assert proc.returncode == 2, proc
            assert proc.stderr == f"error: WORKRUN_HOME: {home} is not writable by this user\n"
        listed = cli("runs", "list", "--json")
        assert listed.returncode == 0, listed
        assert [r["run_id"] for r in json.loads(listed.stdout)] == [run_id]
        shown = cli("runs", "show", run_id, "--json")
        assert shown.returncode == 0, shown
        assert json.loads(shown.stdout)["status"] == "succeeded"
    finally:
        os.chmod(home, 0o700)


def test_a_project_path_to_a_file_says_so(refused, make_project, write_workflow, tmp_path):
    """New-user review: ``project = "../booker/main.py"`` said "not found" of a path that is there."""
    project = make_project("booker", APP.format(extra="", comp="", out=""), {"main.py": "", "compensate.py": "", "tool.py": ""})
    wf = write_workflow("to-file", f'[nodes.a]\nproject = "{project / "main.py"}"\napp = "t"\n')
    said = refused(["run", str(wf)], wf, "nodes.a.project")
    assert said.endswith(f"{project / 'main.py'} is a file, not an App project directory"), said
    gone = write_workflow("gone", f'[nodes.a]\nproject = "{project / "nope"}"\napp = "t"\n')
    assert refused(["run", str(gone)], gone, "nodes.a.project").endswith("not found")
    assert refused(["app", "run", str(project / "main.py"), "t"], project / "main.py", None).endswith(
        ": a file, not an App project directory")


@pytest.mark.parametrize("name", ["a\\u0000/../b", "x\\u001b[31m", "\\u202eevil", " "])
def test_an_app_name_with_control_characters_is_refused(refused, make_project, write_workflow, name):
    """Adversarial review: an App named with a NUL was accepted and run, and the dashboard wrote the raw byte
    into its pages; App names are printable text (the CLI shows the bad one escaped)."""
    project = make_project("names", f'[tool.workrun.apps."{name}"]\nkind = "process"\nentry = "main.py"\n',
                           {"main.py": ""})
    wf = write_workflow("names", f'[nodes.a]\nproject = "{project}"\napp = "{name}"\n')
    said = refused(["check", str(wf)], project / "pyproject.toml", None)
    assert "an App name is printable text" in said, said


ECHO_APP = """
[tool.workrun.apps.echo]
kind = "process"
entry = "main.py"
"""


def test_a_toml_date_in_a_nodes_input_reaches_the_app_as_its_iso_string(workrun, make_project, write_workflow):
    """Adversarial review: a TOML date in a node's ``input`` (not in ``[inputs]``) passed ``check`` and failed
    ``run`` inside, an internal error after the run had started, the run left ``running``. As the docs say, it
    is its ISO 8601 string once loaded, at any depth."""
    project = make_project("echo", ECHO_APP, {
        "main.py": "from workrun_sdk import process\nprocess.result({'got': process.input()})\n"})
    wf = write_workflow("dates", f"""
[inputs]
d = 07:32:00
[nodes.a]
project = "{project}"
app = "echo"
input = {{ v = 1979-05-27T07:32:00Z, w = [1, {{ x = 1979-05-27 }}], d = "{{{{ inputs.d }}}}" }}
""")
    assert workrun("check", wf).code == 0
    res = workrun("run", wf, "--json")
    assert res.code == 0, res
    assert res.json()["operations"][0]["result"] == {
        "got": {"v": "1979-05-27T07:32:00Z", "w": [1, {"x": "1979-05-27"}], "d": "07:32:00"}}


@pytest.mark.parametrize(("notify", "field", "says"), [
    ('http = { update_data = { fields = ["x"], values = { x = "{{ message }}" } } }', "notify.http.update_data",
     "a notification cannot update the run's data"),
    ('update_data = { fields = ["x"] }', "notify.update_data", "a notification cannot update the run's data"),
    ('http = { email = { to = ["ops@example.com"], body = "{{ message }}" } }', "notify.http.email",
     "write it as [notify] email = {…}, not inside http"),
])
def test_notify_takes_no_action_kind_inside_http(refused, write_workflow, notify, field, says):
    """Adversarial review (R-K5): ``[notify] http = { update_data = … }`` passed ``check``; the first run then
    left a notification that no transition could send, and every later ``run`` and ``resume`` of the data
    directory exited 1. Refused before anything runs, as ``update_data`` beside ``http`` is."""
    wf = write_workflow("notify", 'http_allow = ["127.0.0.1"]\n[nodes.a]\nkind = "http"\nmethod = "POST"\n'
                                  f'url = "http://127.0.0.1:9/a"\non_failure = "notify"\n[notify]\n{notify}\n')
    for command in ("check", "run"):
        said = refused([command, str(wf)], wf, field)
        assert f"{field}: {says}" in said, said


def test_check_says_every_error_not_the_first_of_a_kind_only(workrun, tmp_path):
    """R-L1 (all of them, one per line), for errors one check used to hide behind another (CLI-completeness
    review): a bad ``http_allow`` hid every other error; an App's typed field hid the other Apps' entry paths; a
    connector's unknown key hid its ``base_url``; a template's unknown field on a cycle hid the cycle."""
    from _kit.fakes import write_app_project

    project = write_app_project(tmp_path, "p")
    pyproject = project / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace("idempotent = false", 'idempotent = "no"')
                         + '\n[tool.workrun.apps.other]\nentry = "nothere.py"\n')
    wf = tmp_path / "wf.toml"
    wf.write_text('http_allow = ["nonsense"]\n'
                  '[connectors.s]\nbase_url = "ftp://x"\nbogus = 1\n'
                  '[nodes.a]\nproject = "p"\napp = "p"\nneeds = ["b"]\n'
                  '[nodes.b]\nkind = "http"\nmethod = "GET"\nurl = "http://127.0.0.1:9/{{ nodes.a.result.nofield }}"\n'
                  'needs = ["a", "zz"]\n')
    res = workrun("check", wf, "--json")
    assert res.code == 2, res
    fields = [line.split(": ", 2)[1] for line in res.json()["errors"]]
    for field in ("http_allow[0]", "connectors.s.bogus", "connectors.s.base_url", "nodes.b.needs",
                  "tool.workrun.apps.p.idempotent", "tool.workrun.apps.other.entry"):
        assert field in fields, (field, res.json())
    assert any("cycle: " in line for line in res.json()["errors"]), res.json()


def test_a_typo_of_a_required_key_is_said_once_with_its_hint(workrun, tmp_path):
    """New-user friction (R-L1: say what to write instead): ``projct`` is told it means ``project`` and the
    kind's check does not also say that ``project`` is missing; ``on_failure = { retyr = … }`` gets its hint too.
    A key that is simply missing is still said to be."""
    from _kit.fakes import write_app_project

    write_app_project(tmp_path, "p")
    cases = {
        '[nodes.a]\nprojct = "p"\napp = "p"\n': ["error: {wf}: nodes.a.projct: unknown key (did you mean 'project'?)"],
        '[nodes.a]\nproject = "p"\napp = "p"\non_failure = { retyr = { attempts = 2 } }\n':
            ["error: {wf}: nodes.a.on_failure.retyr: unknown key (did you mean 'retry'?)"],
        '[nodes.a]\napp = "p"\n': ["error: {wf}: nodes.a.project: is required for a process node"],
    }
    for i, (text, lines) in enumerate(cases.items()):
        wf = tmp_path / f"wf{i}.toml"
        wf.write_text(text)
        res = workrun("check", wf)
        assert (res.code, res.err.splitlines()) == (2, [line.format(wf=wf) for line in lines]), res


@pytest.mark.parametrize("action, field", [
    ('{ sms = { connector = "texts", template_id = "T", recipients = ["+1"] } }', "nodes.n.compensation.sms.connector"),
    ('{ connector = "texts", method = "DELETE", url = "/x" }', "nodes.n.compensation.connector"),
])
def test_an_undeclared_connector_is_named_where_it_is_written(refused, write_workflow, action, field):
    """R-K5, SPEC §10 (``error: FILE: FIELD: message``): an sms action's connector is in its ``sms`` table
    (conformance review: it was named ``nodes.n.compensation.connector``)."""
    wf = write_workflow("sms-undeclared", '[nodes.n]\nkind = "http"\nmethod = "POST"\nurl = "http://127.0.0.1:9/x"\n'
                        f"compensation = {action}\n")
    line = refused(["check", str(wf)], wf, field)
    assert line.endswith("unknown connector 'texts' (declared: none)"), line
