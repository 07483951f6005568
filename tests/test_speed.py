"""What keeps a call cheap (issue 33), each shown to keep its behaviour: the SDK copy ships its bytecode, the fork
server's first uses leave nothing behind, the SDK's plain-descriptor file helpers behave as the buffered ones did,
a spawned supervisor is a subreaper without ctypes, a synced environment's marker is trusted without the file lock
only when it is newer than the venv, and the App config is dumped once per config."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from workrun.runner import env as envs
from workrun_sdk import _forkserver, _wire


def test_sdk_copy_has_bytecode_for_this_interpreter(tmp_path):
    sdk = envs.sdk_path(tmp_path)
    folder = sdk / "workrun_sdk"
    for source in folder.glob("*.py"):
        cached = Path(importlib.util.cache_from_source(str(source)))
        assert cached.is_file(), f"{source.name} has no bytecode in the SDK copy"
    # the bytecode is valid for the copy: an interpreter that may not write bytecode imports the SDK without
    # compiling any of it (the import system's compile raises the "compile" audit event)
    probe = ("import sys\ncompiled = []\nsys.addaudithook(lambda e, a: compiled.append(str(a[1])) if e == 'compile' "
             "else None)\nimport workrun_sdk._supervise as s, workrun_sdk.process\n"
             "print(s.__file__)\nprint([c for c in compiled if 'workrun_sdk' in c])")
    out = subprocess.run([sys.executable, "-B", "-c", probe], cwd=tmp_path, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(sdk), "PYTHONDONTWRITEBYTECODE": "1"}, check=True)
    assert out.stdout.splitlines() == [str(folder / "_supervise.py"), "[]"]


def test_sdk_bytecode_compiles_a_copy_that_has_none(tmp_path):
    sdk = envs.sdk_path(tmp_path)
    for pyc in (sdk / "workrun_sdk" / "__pycache__").iterdir():  # as a copy made before bytecode shipped
        pyc.unlink()
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.symlink_to(sys.executable)
    (venv / "pyvenv.cfg").write_text(f"home = {Path(sys.executable).parent}\nimplementation = CPython\n"
                                     f"version_info = {sys.version_info.major}.{sys.version_info.minor}.0\n")
    envs.sdk_bytecode(str(python), sdk)
    tag = sys.implementation.cache_tag
    assert (sdk / "workrun_sdk" / "__pycache__" / f"_supervise.{tag}.pyc").is_file()


@pytest.mark.parametrize(("cfg", "tag"), [
    ("implementation = CPython\nversion_info = 3.12.4\n", "cpython-312"),
    ("home = /x\nversion = 3.11.7\n", "cpython-311"),
    ("implementation = PyPy\nversion_info = 3.10.1\n", None),
    ("version_info = three\n", None),
    ("", None),
])
def test_cache_tag_from_pyvenv_cfg(tmp_path, cfg, tag):
    path = tmp_path / "pyvenv.cfg"
    path.write_text(cfg)
    assert envs._cache_tag(path) == tag
    assert envs._cache_tag(tmp_path / "missing.cfg") is None


def test_first_uses_leave_the_environment_and_descriptors_as_they_were():
    before_env = dict(os.environ)
    before_fds = set(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else set()
    _forkserver._first_uses()
    assert dict(os.environ) == before_env
    if before_fds:
        assert set(os.listdir("/proc/self/fd")) == before_fds


def test_plain_descriptor_helpers(tmp_path):
    tmp_path = tmp_path / "call"
    tmp_path.mkdir()
    path = tmp_path / "x.json"
    _wire.write_json_atomic(path, {"v": 1, "text": "é ✓", "n": [1, 2.5]})
    assert _wire.read_envelope(path) == {"v": 1, "text": "é ✓", "n": [1, 2.5]}
    assert [p.name for p in tmp_path.iterdir()] == ["x.json"]  # no temporary file left
    with pytest.raises(TypeError):
        _wire.write_json_atomic(path, {"v": 1, "bad": object()})
    assert _wire.read_envelope(path)["text"] == "é ✓"  # the old file is untouched
    big = "x" * 200_000  # over one read's chunk
    _wire.write_json_atomic(path, {"v": 1, "big": big})
    assert _wire.read_bytes(path).decode().count("x") == 200_000
    assert _wire.claim(tmp_path, "started 1 2\n") and not _wire.claim(tmp_path, "started 3 4\n")
    assert (tmp_path / "claim").read_text() == "started 1 2\n"
    assert _wire.start_time(os.getpid()) == _wire.start_time(os.getpid())
    if sys.platform.startswith("linux"):
        assert _wire.start_time(os.getpid()).isdigit()
    with pytest.raises(OSError):
        _wire.read_bytes(tmp_path / "missing")


def test_sync_marker_is_trusted_without_the_lock_only_when_newer_than_the_venv(tmp_path):
    venv = tmp_path / ".venv"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text("")
    cfg = venv / "pyvenv.cfg"
    cfg.write_text("version_info = 3.11.7\n")
    marker = tmp_path / "marker.json"
    assert not envs._synced(marker, "k", python)  # no marker yet
    envs._mark(marker, "k", tmp_path)
    assert envs._synced(marker, "k", python)
    assert not envs._synced(marker, "other", python)  # the lock changed since
    later = os.stat(marker).st_mtime + 5
    os.utime(cfg, (later, later))  # the venv was made again after the marker (a sync under way, a removal)
    assert not envs._synced(marker, "k", python)
    envs._mark(marker, "k", tmp_path)  # said again under the lock
    os.utime(cfg, (later - 10, later - 10))
    assert envs._synced(marker, "k", python)
    python.unlink()
    assert not envs._synced(marker, "k", python)
    marker.write_text("{torn")
    assert not envs._synced(marker, "k", python)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_CHILD_SUBREAPER is Linux's")
def test_a_spawned_supervisor_becomes_subreaper_without_importing_ctypes():
    probe = ("import sys\nfrom workrun_sdk import _supervise\nok = _supervise.become_subreaper()\n"
             "loaded = 'ctypes' in sys.modules\nimport ctypes\nv = ctypes.c_int(0)\n"
             "ctypes.CDLL(None).prctl(37, ctypes.byref(v), 0, 0, 0)\nprint(ok, loaded, v.value)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "False", "1"]  # PR_GET_CHILD_SUBREAPER (37) says it is one


def test_the_config_snapshot_is_made_once_per_app_config_and_is_its_json_dump():
    from workrun.core.models import AppSpec
    from workrun.effects.operations import config_snapshot

    app = AppSpec.model_validate({"name": "a", "entry": "main.py", "timeout": 5})
    first = config_snapshot(app)
    assert first == app.model_dump(mode="json") and config_snapshot(app) is first
    edited = AppSpec.model_validate({"name": "a", "entry": "main.py", "timeout": 6})  # pyproject.toml edited
    assert config_snapshot(edited)["timeout"] == 6 and config_snapshot(app)["timeout"] == 5


def test_a_marker_that_is_json_but_no_marker_is_synced_again_not_an_internal_error(tmp_path, monkeypatch):
    manager = envs.EnvManager(tmp_path / "data")
    project = tmp_path / "app"
    (project / ".venv" / "bin").mkdir(parents=True)
    (project / "pyproject.toml").write_text("[project]\nname = 'a'\nversion = '0'\n")
    (project / ".venv" / "bin" / "python").write_text("")
    (project / ".venv" / "pyvenv.cfg").write_text("version_info = 3.11.7\n")
    _, _, marker = manager._where(project)
    marker.parent.mkdir(parents=True)
    marker.write_text("[]")
    synced: list[Path] = []
    monkeypatch.setattr(manager, "_sync", lambda where, offline: synced.append(where))
    assert manager.python(project) == str(Path(os.path.realpath(project)) / ".venv" / "bin" / "python")
    assert synced and json.loads(marker.read_text())["key"]


def test_check_and_run_read_no_package_metadata_and_import_no_validation_library(tmp_path):
    """SPEC §24: the workflow and App configs are validated by ``workrun.core.shape``: neither pydantic (~90 ms
    with the models' classes) nor ``importlib.metadata`` is imported by ``check`` or a dashboard's detached check."""
    tutorial = Path(__file__).parents[1] / "demo_apps" / "workflows" / "tutorial.toml"
    env = {**os.environ, "WORKRUN_HOME": str(tmp_path / "h")}
    probe = ("import sys\nfrom workrun.cli.entry import run\n"
             f"code = run(['check', {str(tutorial)!r}], ahead=False)\n"
             "print(code, sorted(m for m in ('pydantic', 'annotated_types', 'importlib.metadata') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.splitlines()[-1] == "0 []", out.stdout + out.stderr
    result = tmp_path / "result.json"
    subprocess.run([sys.executable, "-m", "workrun.cli.detached", str(result), "--", "check", str(tutorial)],
                   env=env, capture_output=True, check=True)
    assert json.loads(result.read_text())["code"] == 0


def test_the_early_fork_server_is_the_one_of_the_project_the_loader_will_use(tmp_path):
    """A symlinked workflow file: ``project`` is relative to the folder of the file it points to (as the loader
    resolves it), never to the symlink's folder, whose same-named project would start ahead for nothing."""
    from workrun.cli.entry import _first_project

    real, links = tmp_path / "real", tmp_path / "links"
    (real / "app").mkdir(parents=True)
    (links / "app").mkdir(parents=True)  # a different project at the symlink's side
    (real / "wf.toml").write_text('[nodes.a]\nproject = "app"\napp = "x"\n')
    (links / "wf.toml").symlink_to(real / "wf.toml")
    assert Path(_first_project(str(links / "wf.toml")) or "").resolve() == (real / "app").resolve()


def test_a_fork_server_that_never_says_it_is_ready_is_ended_not_left_behind(tmp_path, monkeypatch):
    from workrun.runner import forkserver

    sdk = tmp_path / "sdk"
    (sdk / "workrun_sdk").mkdir(parents=True)
    pid_file = tmp_path / "pid"
    (sdk / "workrun_sdk" / "_forkserver.py").write_text(
        f"import os, time\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\ntime.sleep(60)\n")
    monkeypatch.setattr(forkserver, "_READY_TIMEOUT", 1.0)
    with pytest.raises(forkserver.ForkServerError):
        forkserver._Server(sys.executable, sdk, dict(os.environ), tmp_path, None)
    pid = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):  # killed and reaped: no such process any more
        os.kill(pid, 0)


def test_the_cli_exits_without_module_teardown_yet_as_the_interpreter_would(tmp_path):
    """``workrun.cli.entry._exit`` (issue 33: ~5 ms of every command): non-daemon threads are joined and atexit
    handlers run, in that order, buffered output is flushed, and the exit code is kept."""
    log = tmp_path / "log"
    probe = ("import atexit, sys, threading, time\nfrom workrun.cli.entry import _exit\n"
             f"log = open({str(log)!r}, 'a', buffering=1)\n"
             "def late():\n    time.sleep(0.2)\n    log.write('thread\\n')\n"
             "threading.Thread(target=late).start()\n"
             "atexit.register(lambda: log.write('atexit\\n'))\n"
             "sys.stdout.write('no newline')\n"
             "_exit(3)\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert (out.returncode, out.stdout, out.stderr) == (3, "no newline", "")
    assert log.read_text() == "thread\natexit\n"


def test_the_look_ahead_at_a_workflow_parses_it_once_for_the_loader(tmp_path):
    """``run``'s early look for the first project (``_first_project``) keeps its parse for the loader, which takes
    it once (issue 33); any other text, or a second reading, is parsed anew."""
    from workrun.cli.entry import _first_project
    from workrun.core import tomlfile
    from workrun.core.errors import ConfigError
    from workrun.runner.apps import parse_toml

    wf = tmp_path / "wf.toml"
    wf.write_text('name = "w"\r\n[nodes.a]\r\nproject = "p"\r\napp = "x"\r\n')
    assert _first_project(str(wf)) == str(tmp_path / "p")
    text = wf.read_text(encoding="utf-8")  # as the loader reads it (newlines translated)
    kept = parse_toml(text, str(wf))
    assert kept == {"name": "w", "nodes": {"a": {"project": "p", "app": "x"}}}
    again = parse_toml(text, str(wf))
    assert again == kept and again is not kept  # taken once: a second reading parses anew
    ahead = tomlfile.loads(text)
    assert parse_toml(text + "\n# edited\n", str(wf)) is not ahead  # another text: not this parse
    assert parse_toml(text, str(wf)) is ahead
    tomlfile.loads('x = nan\n')  # a kept parse is checked all the same
    with pytest.raises(ConfigError):
        parse_toml('x = nan\n', str(wf))
    probe = ("import sys\nfrom workrun.cli.entry import _first_project\n"
             f"_first_project({str(wf)!r})\n"
             "print(sorted(m for m in ('workrun.runner.apps', 'workrun.core.models') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr  # the look loads none of the loader's modules


def test_the_light_sha256_gives_hashlibs_digests():
    """``workrun.core.digest.sha256`` (issue 33: no OpenSSL loaded for it) is SHA-256, whole or in parts."""
    import hashlib

    from workrun.core.digest import sha256

    for data in (b"", b"abc", bytes(range(256)) * 1000):
        assert sha256(data).hexdigest() == hashlib.sha256(data).hexdigest()
    parts = sha256()
    parts.update(b"ab")
    parts.update(b"c")
    assert parts.digest() == hashlib.sha256(b"abc").digest()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_CHILD_SUBREAPER is Linux's")
def test_a_fork_server_finds_prctl_without_ctypes_or_socket_and_its_children_become_subreapers():
    """Issue 33: the fork server's start imports neither ctypes nor socket (~3-5 ms of each run's first call, which
    waits for the server); prctl is found once before it forks, and a forked supervisor becomes a subreaper."""
    root = Path(__file__).parents[1]
    probe = (f"import os, sys\nsys.path.insert(0, {str(root)!r})\n"
             "from workrun_sdk import _forkserver, _supervise\n_forkserver._preload(False)\n"
             "print(sorted(m for m in ('ctypes', 'socket', 'selectors') if m in sys.modules), "
             "_supervise._prctl_address is not None)\n"
             "pid = os.fork()\n"
             "if pid == 0:\n"
             "    os._exit(0 if _supervise.become_subreaper() and _supervise._prctl(37, 0) is not None else 1)\n"
             "print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))\n")
    out = subprocess.run([sys.executable, "-S", "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[:2] == ["[] True", "0"], out.stdout + out.stderr


def test_check_reads_each_app_project_once_however_many_nodes_call_it(tmp_path, monkeypatch):
    """SPEC §24 (``check`` is quick): counting the compensable nodes of a 30-node chain reads its one App project
    once, not once per node (each reading stats and resolves every entry path)."""
    from tests._kit.fakes import write_app_project
    from workrun.app.checks import check
    from workrun.runner import apps

    project = write_app_project(tmp_path, "plusone")
    wf = tmp_path / "wf.toml"
    wf.write_text("".join(f'[nodes.n{i}]\nproject = "plusone"\napp = "plusone"\n' for i in range(30)))
    reads: list[Path] = []
    real = apps.load_project
    monkeypatch.setattr(apps, "load_project", lambda p: reads.append(Path(p)) or real(p))
    assert check(wf).data == {"ok": True, "nodes": 30, "compensable": 30}
    assert reads.count(project) <= 3, reads  # the loader's, its email check's and the count's (not 2 + 30)
