"""The code fingerprint's exact file set (R-J2) and how a change is named (R-C8)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from workrun.runner.apps import diff_fingerprints, fingerprint


def _tree(root: Path, files: list[str]) -> Path:
    for rel in files:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"# {rel}\n")
    return root


FILES = ["pyproject.toml", "uv.lock", ".python-version", "main.py", "compensate.py", "pkg/__init__.py",
         "pkg/mod.py", "notes.txt", "data/input.json", "sub/pyproject.toml",
         ".venv/lib/site.py", "venv/lib/x.py", "pkg/__pycache__/mod.py", ".git/hooks/h.py", ".hidden/y.py",
         "build/lib/x.py", "dist/x.py", "node_modules/x.py", ".tox/x.py", ".workrun/x.py"]
EXPECTED = {".python-version", "compensate.py", "main.py", "pkg/__init__.py", "pkg/mod.py", "pyproject.toml",
            "uv.lock"}


def test_file_set_outside_git(tmp_path):
    project = _tree(tmp_path / "p", FILES)
    fp = fingerprint(project)
    assert set(fp.files) == EXPECTED
    assert fingerprint(project).digest == fp.digest


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_git_ignored_sources_are_left_out_but_tracked_and_lock_files_stay(tmp_path):
    repo = tmp_path / "repo"
    project = _tree(repo / "apps" / "p", FILES + ["generated.py", "scratch/try.py", "kept_gen.py"])
    (repo / ".gitignore").write_text("generated.py\nscratch/\n*_gen.py\nuv.lock\n")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("GIT_")},
           "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}
    subprocess.run(["git", "init", "-q", str(repo)], check=True, env=env)
    subprocess.run(["git", "-C", str(repo), "add", "-f", "apps/p/kept_gen.py"], check=True, env=env)
    fp = fingerprint(project)
    # ignored *.py files are not code the App runs from version control; tracked ones count even if matched;
    # pyproject.toml / uv.lock / .python-version always count (R-J2)
    assert set(fp.files) == EXPECTED | {"kept_gen.py"}
    (project / "generated.py").write_text("changed\n")
    (project / "scratch" / "new.py").write_text("new\n")
    assert fingerprint(project).digest == fp.digest
    (project / "pkg" / "mod.py").write_text("changed\n")
    (project / "extra.py").write_text("x\n")
    (project / "compensate.py").unlink()
    (project / "uv.lock").write_text("changed\n")
    now = fingerprint(project)
    assert now.digest != fp.digest
    assert diff_fingerprints(fp.files, now.files) == [
        "pkg/mod.py changed", "uv.lock changed", "extra.py added", "compensate.py removed"]
