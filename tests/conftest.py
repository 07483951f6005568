"""Shared test fixtures: an isolated data dir per test, real uv App projects in tmp dirs, the CLI.

Every test gets its own ``WORKRUN_HOME``, ``NO_COLOR`` and a wide ``COLUMNS``
(one autouse fixture, as Hatch does), and a short SIGTERM->SIGKILL grace.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from _kit.apps import MARKER_APP, MARKER_COMPENSATE, MARKER_MAIN

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "workrun-home"
    monkeypatch.setenv("WORKRUN_HOME", str(home))
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setenv("WORKRUN_GRACE", "1")
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    for var in ("VIRTUAL_ENV", "WORKRUN_FAULT", "WORKRUN_CONCURRENCY", "WORKRUN_JOURNAL", "WORKRUN_LEASE"):
        monkeypatch.delenv(var, raising=False)
    from workrun.core.redact import forget_all

    forget_all()  # no test's secrets redact another's output (in-process runs remember them, R-X2)
    return home


def _uv() -> str:
    import uv

    return uv.find_uv_bin()


@pytest.fixture
def make_project(tmp_path: Path) -> Callable[..., Path]:
    """Create a real uv App project: ``make_project(name, apps_toml, {file: source})`` -> its directory.

    ``apps_toml`` is the ``[tool.workrun...]`` part of ``pyproject.toml``; sources are dedented.
    ``uv lock`` is run so the project is complete (R-A1).
    """

    def make(name: str, apps_toml: str, files: dict[str, str], *, lock: bool = True) -> Path:
        project = tmp_path / "projects" / name
        project.mkdir(parents=True)
        (project / "pyproject.toml").write_text(
            f'[project]\nname = "{name}"\nversion = "0.1.0"\nrequires-python = ">=3.11"\ndependencies = []\n\n'
            + textwrap.dedent(apps_toml))
        for rel, src in files.items():
            path = project / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(textwrap.dedent(src))
        if lock:
            subprocess.run([_uv(), "lock", "--quiet"], cwd=project, check=True,
                           env={k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"})
        return project

    return make


@pytest.fixture
def write_workflow(tmp_path: Path) -> Callable[[str, str], Path]:
    """Write a workflow TOML (dedented) into ``tmp_path/workflows/NAME.toml``."""

    def write(name: str, text: str) -> Path:
        path = tmp_path / "workflows" / f"{name}.toml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
        return path

    return write


class Result:
    """A finished CLI call: ``code``, ``out``, ``err`` and ``json()``."""

    def __init__(self, proc: subprocess.CompletedProcess[str]) -> None:
        self.code = proc.returncode
        self.out = proc.stdout
        self.err = proc.stderr

    def json(self) -> Any:
        return json.loads(self.out)

    def __repr__(self) -> str:
        return f"Result(code={self.code}, out={self.out[-2000:]!r}, err={self.err[-2000:]!r})"


# Commands that only read the journal or a file: the ``workrun`` fixture runs them in process (issue 27: a
# Python process costs ~0.4 s of CPU; what they print is the same). Start-up, imports and signals of these
# commands are tested in subprocesses explicitly (tests/e2e/test_cli_startup.py).
IN_PROCESS = {("runs", "list"), ("runs", "show"), ("compensations", "list"), ("compensations", "show"),
              ("tickets", "list"), ("tickets", "show"), ("check",), ("graph",), ("schema",)}


def _in_process(args: list[str], env: dict[str, str] | None) -> Result:
    """Run a read command line in this process (the environment patched for the call)."""
    import contextlib

    from workrun.cli.entry import run as run_cli
    from workrun.cli.output import get_console

    saved = {k: os.environ.get(k) for k in (env or {})}
    os.environ.update(env or {})
    out, err = _Captured(), _Captured()
    console = get_console()
    old_file = console._file
    console._file = out  # type: ignore[assignment]
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):  # type: ignore[type-var]
            try:
                code = run_cli(args, ahead=False)
            except SystemExit as exc:
                code = int(exc.code or 0)
    finally:
        console._file = old_file
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return Result(subprocess.CompletedProcess(args, code, out.buffer.getvalue(), err.buffer.getvalue()))


@pytest.fixture
def workrun() -> Callable[..., Result]:
    """Run the real CLI: ``workrun("run", path, "--json")`` -> Result. A subprocess, except for the read-only
    commands of :data:`IN_PROCESS`, which run the same entry point in this process."""

    def run(*args: str, env: dict[str, str] | None = None, timeout: float = 180, cwd: Path | None = None,
            input: str | None = None) -> Result:
        words = [str(a) for a in args]
        if cwd is None and input is None and (tuple(words[:2]) in IN_PROCESS or tuple(words[:1]) in IN_PROCESS):
            return _in_process(words, env)
        full_env = {**os.environ, **(env or {})}
        proc = subprocess.run([sys.executable, "-m", "workrun", *map(str, args)], capture_output=True, text=True,
                              env=full_env, timeout=timeout, cwd=cwd, input=input)
        return Result(proc)

    return run


class _Captured:
    """The in-process runner's stdout/stderr: a text stream that is not a terminal (like a pipe)."""

    def __init__(self) -> None:
        import io

        self.buffer = io.StringIO()

    def write(self, text: str) -> int:
        return self.buffer.write(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        raise OSError("no file descriptor: captured in process")


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch) -> Callable[..., Result]:
    """Run a CLI command line in this process (as Hatch's tests do): ``cli("check", path)`` -> Result.

    For what a command decides before anything runs (validation, refusals, output): milliseconds instead of a
    Python process. Commands that start Apps, take signals or must survive a crash use :func:`workrun`.
    """
    import contextlib

    from workrun.cli.entry import run as run_cli
    from workrun.cli.output import get_console

    def run(*args: str, env: dict[str, str] | None = None) -> Result:
        with monkeypatch.context() as patch:
            for key, value in (env or {}).items():
                patch.setenv(key, value)
            out, err = _Captured(), _Captured()
            console = get_console()
            patch.setattr(console, "_file", out)
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):  # type: ignore[type-var]
                try:
                    code = run_cli([str(a) for a in args], ahead=False)
                except SystemExit as exc:
                    code = int(exc.code or 0)
        return Result(subprocess.CompletedProcess(list(args), code, out.buffer.getvalue(), err.buffer.getvalue()))

    return run


# Small App sources used by many tests live in tests/_kit/apps.py ------------------------


@pytest.fixture
def marker_project(make_project: Callable[..., Path]) -> Path:
    """A project with App ``mark``: result ``{name, approved}``; its compensation appends to ``$TEST_LOG``.

    Input knobs: ``name``, ``sleep`` (s), ``fail`` (exit 3), ``comp_sleep``, ``comp_fail`` (exit 4).
    """
    return make_project("marker", MARKER_APP, {"main.py": MARKER_MAIN, "compensate.py": MARKER_COMPENSATE})


@pytest.fixture
def demo_shop() -> Any:
    """``demo_apps/shop_service.py`` as a subprocess on a free port: yields the port (a string)."""
    proc = subprocess.Popen([sys.executable, str(ROOT / "demo_apps" / "shop_service.py"), "0"],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # "shop service listening on http://127.0.0.1:PORT"
        assert line.startswith("shop service listening on http://127.0.0.1:"), line
        yield line.rsplit(":", 1)[1].strip()
    finally:
        proc.terminate()
        proc.wait(timeout=30)


# A real PostgreSQL server (R-S5) ----------------------------------------------------------------


def _pg_server() -> Any:
    """A started PostgreSQL server (tests/_kit/pg.py), stopped afterwards; skips with how to install when absent."""
    from _kit.pg import PgServer, unavailable_reason

    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    server = PgServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def postgres_server():
    """One PostgreSQL server for the session, shared by the tests' databases (``pg_url``)."""
    yield from _pg_server()


@pytest.fixture
def own_postgres_server():
    """A PostgreSQL server of the test's own, for tests that restart it or take it away (R-F1)."""
    yield from _pg_server()


@pytest.fixture
def pg_url(postgres_server) -> Any:
    """A fresh, empty database on the session's server: its ``postgresql://`` URL."""
    url = postgres_server.new_database()
    yield url
    postgres_server.drop_database(url)


@pytest.fixture(params=["sqlite", "postgres"])
def journal_backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run the test on each journal backend: SQLite (default) and PostgreSQL (``WORKRUN_JOURNAL``)."""
    if request.param == "postgres":
        url = request.getfixturevalue("pg_url")
        monkeypatch.setenv("WORKRUN_JOURNAL", url)
        monkeypatch.setenv("WORKRUN_LEASE", "3")  # a killed runner's claim passes to the next one quickly
    else:
        monkeypatch.delenv("WORKRUN_JOURNAL", raising=False)
    return request.param
