#!/usr/bin/env python3
"""Set up Workrun in ./.venv (first time only) and run the tutorial or the tests.

    python3 scripts/dev.py tutorial     # the tutorial workflow; exits 1 because the run fails on purpose
    python3 scripts/dev.py test [ARGS]  # the whole test suite (extra ARGS go to pytest)
    python3 scripts/dev.py check        # ruff, mypy, import-linter, mkdocs build --strict, the CLI reference

Needs only Python 3.11+ with pip; everything else comes from PyPI.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / ".venv"
PY = VENV / "bin" / "python"


def ensure(extras: str) -> None:
    """Create .venv and install workrun (editable) with ``extras``, unless already done for this pyproject."""
    if sys.version_info < (3, 11):
        sys.exit(f"error: Workrun needs Python 3.11 or newer; this is {sys.version.split()[0]}")
    if not PY.exists():
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()[:16]
    stamp = VENV / f".workrun-installed-{extras or 'base'}-{digest}"
    # the base install is part of any extra's (the test set-up has it all): no second pip run
    done = stamp.exists() or (not extras and any(VENV.glob(f".workrun-installed-*-{digest}")))
    if not done:
        print(f"setting up {VENV} (installing Workrun{' with ' + extras if extras else ''}; the first time takes "
              "a while) …", file=sys.stderr, flush=True)
        spec = f"{ROOT}[{extras}]" if extras else str(ROOT)
        subprocess.run([str(PY), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-e", spec],
                       check=True)
        stamp.write_text("ok\n")
    # Workrun's bytecode, as an installed package has it: an editable install has none, and where
    # PYTHONDONTWRITEBYTECODE is set every workrun process would compile its modules again (~0.3 s each start).
    # Quick when nothing changed (compileall skips a module whose bytecode is current).
    subprocess.run([str(PY), "-m", "compileall", "-q", "-j", "0", "workrun", "workrun_sdk"], cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL)


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("tutorial", "test", "check"):
        print(__doc__)
        return 2
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    if argv[0] == "tutorial":
        ensure("")
        wf = ROOT / "demo_apps" / "workflows" / "tutorial.toml"
        return subprocess.run([str(VENV / "bin" / "workrun"), "run", str(wf), *argv[1:]], env=env).returncode
    ensure("test")
    if argv[0] == "check":
        failed = 0
        for tool in (["ruff", "check", "workrun", "workrun_sdk"], ["mypy", "workrun", "workrun_sdk"], ["lint-imports"],
                     ["mkdocs", "build", "--strict", "--quiet"], ["python", "scripts/cli_reference.py", "--check"]):
            print(f"$ {' '.join(tool)}", flush=True)
            failed |= subprocess.run([str(VENV / "bin" / tool[0]), *tool[1:]], cwd=ROOT,
                                     env={**env, "NO_MKDOCS_2_WARNING": "1"}).returncode != 0
        return 1 if failed else 0
    return subprocess.run([str(PY), "-m", "pytest", "-q", *_workers(argv[1:]), *argv[1:]], cwd=ROOT,
                          env=env).returncode


def _workers(args: list[str]) -> list[str]:
    """pytest-xdist's ``-n 4`` unless the command line chooses (``-n N``, ``-p no:xdist``): most tests wait on
    real processes, leases and servers, so four at a time fit two cores (SPEC R-P5: the suite in <= 8 min)."""
    chosen = any(a == "-n" or a.startswith(("-n", "--numprocesses")) for a in args) or "no:xdist" in args
    return [] if chosen else ["-n", os.environ.get("WORKRUN_TEST_WORKERS", "4")]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
