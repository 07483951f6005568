"""Per-process caches of file reads keyed by stat stamps (issue 14): a changed file is always noticed."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from workrun.core import filestamps
from workrun.core.errors import ConfigError
from workrun.core.filestamps import StampedCache, settled, stamp
from workrun.runner.apps import fingerprint, load_app
from workrun.runner.env import _env_key

APP = """[project]
name = "p"
version = "0.1.0"
requires-python = ">=3.11"

[tool.workrun.apps.one]
entry = "main.py"
timeout = {timeout}
"""


@pytest.fixture
def no_racy_window(monkeypatch):
    """A short racy window (a test cannot age a file's ctime); call the returned function after writing
    files that must then count as settled."""
    monkeypatch.setattr(filestamps, "RACY_SECONDS", 0.05)
    return lambda: time.sleep(0.1)


def _project(root: Path) -> Path:
    root.mkdir()
    (root / "pyproject.toml").write_text(APP.format(timeout=10))
    (root / "uv.lock").write_text("version = 1\n")
    (root / "main.py").write_text("print(1)\n")
    return root


def test_value_is_kept_while_the_stamp_holds_and_recomputed_when_it_changes(tmp_path, no_racy_window):
    f = tmp_path / "f"
    f.write_text("a")
    no_racy_window()
    cache: StampedCache[str] = StampedCache()
    reads = []

    def read() -> str:
        reads.append(1)
        return f.read_text()

    assert cache.get("k", [f], read) == "a"
    assert cache.get("k", [f], read) == "a"
    assert len(reads) == 1  # settled file: served from the cache
    f.write_text("b")  # same size
    assert cache.get("k", [f], read) == "b"
    f.unlink()
    with pytest.raises(FileNotFoundError):
        cache.get("k", [f], read)


def test_a_recently_changed_file_is_read_every_time(tmp_path):
    f = tmp_path / "f"
    f.write_text("a")
    cache: StampedCache[str] = StampedCache()
    reads = []

    def read() -> str:
        reads.append(1)
        return f.read_text()

    cache.get("k", [f], read)
    cache.get("k", [f], read)
    assert len(reads) == 2  # mtime within RACY_SECONDS: never cached
    assert not settled([stamp(f)], time.time_ns())
    assert settled([stamp(f)], time.time_ns() + int((filestamps.RACY_SECONDS + 1) * 1e9))
    assert settled([None], time.time_ns())


def test_edit_with_restored_mtime_is_still_seen(tmp_path, no_racy_window):
    """Writing the same number of bytes and putting the old mtime back still changes ctime."""
    f = tmp_path / "f"
    f.write_text("a")
    no_racy_window()
    old = os.stat(f)
    cache: StampedCache[str] = StampedCache()
    assert cache.get("k", [f], f.read_text) == "a"
    f.write_text("b")
    os.utime(f, ns=(old.st_atime_ns, old.st_mtime_ns))
    assert cache.get("k", [f], f.read_text) == "b"


def test_app_config_edit_between_two_loads_in_one_process_is_seen(tmp_path, no_racy_window):
    project = _project(tmp_path / "p")
    no_racy_window()
    assert load_app(project, "one").timeout == 10
    assert load_app(project, "one").timeout == 10
    (project / "pyproject.toml").write_text(APP.format(timeout=20))  # same size
    assert load_app(project, "one").timeout == 20
    (project / "main.py").unlink()  # entry paths are checked on every load
    with pytest.raises(ConfigError, match="does not exist"):
        load_app(project, "one")
    (project / "main.py").write_text("print(1)\n")
    (project / "uv.lock").unlink()
    with pytest.raises(ConfigError, match="uv.lock is missing"):
        load_app(project, "one")


def test_fingerprint_sees_edits_additions_and_removals_within_one_process(tmp_path, no_racy_window):
    project = _project(tmp_path / "p")
    no_racy_window()
    first = fingerprint(project)
    assert fingerprint(project) == first
    (project / "main.py").write_text("print(2)\n")  # same size
    edited = fingerprint(project)
    assert edited.digest != first.digest and edited.files["main.py"] != first.files["main.py"]
    (project / "extra.py").write_text("x = 1\n")
    assert "extra.py" in fingerprint(project).files
    (project / "extra.py").unlink()
    assert fingerprint(project) == edited


def test_environment_key_follows_the_lock(tmp_path, no_racy_window):
    project = _project(tmp_path / "p")
    no_racy_window()
    key = _env_key(project)
    assert _env_key(project) == key
    (project / "uv.lock").write_text("version = 2\n")
    assert _env_key(project) != key
    (project / ".python-version").write_text("3.11\n")
    assert len({key, _env_key(project)}) == 2


def test_fingerprint_listing_kept_outside_git_sees_subdirectories_and_a_new_git_work_tree(tmp_path, no_racy_window):
    """Outside git the file listing is kept while the walked directories' stamps hold: a file added deep
    down, a directory removed, and a ``.git`` that appears (git then decides what is ignored) all show."""
    import shutil
    import subprocess

    project = _project(tmp_path / "p")
    (project / "pkg" / "deep").mkdir(parents=True)
    (project / "pkg" / "deep" / "a.py").write_text("a = 1\n")
    no_racy_window()
    assert "pkg/deep/a.py" in fingerprint(project).files
    (project / "pkg" / "deep" / "b.py").write_text("b = 1\n")
    assert "pkg/deep/b.py" in fingerprint(project).files
    no_racy_window()
    fingerprint(project)  # kept now
    shutil.rmtree(project / "pkg" / "deep")
    assert not any(p.startswith("pkg/") for p in fingerprint(project).files)
    (project / "ignored.py").write_text("x = 1\n")
    (project / ".gitignore").write_text("ignored.py\n")
    no_racy_window()
    assert "ignored.py" in fingerprint(project).files  # no git work tree: nothing is ignored
    if shutil.which("git") is None:
        pytest.skip("git is not installed: the git half needs it")
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    assert "ignored.py" not in fingerprint(project).files


def test_fingerprint_listing_with_a_symlink_is_never_kept(tmp_path, no_racy_window):
    """What a symlink points to can change without any directory of the project changing (a linked directory
    replaced by a file): a listing that met a symlink is made again on every call."""
    project = _project(tmp_path / "p")
    shared = tmp_path / "shared"
    (shared / "plugin_target").mkdir(parents=True)
    (project / "plugin.py").symlink_to(shared / "plugin_target")
    no_racy_window()
    assert "plugin.py" not in fingerprint(project).files  # a directory: not a source file
    fingerprint(project)
    (shared / "plugin_target").rmdir()
    (shared / "plugin_target").write_text("P = 1\n")
    assert "plugin.py" in fingerprint(project).files
