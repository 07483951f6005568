"""App environments: ``uv sync --locked`` once per (project, lock), and the clean process environment (R-A8).

A file lock per project keeps concurrent calls (and concurrent Workrun
processes) from racing on ``.venv``; ``uv.lock`` is never rewritten.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from pathlib import Path

from workrun.core.digest import sha256
from workrun.core.errors import EnvironmentUnavailableError
from workrun.core.filestamps import StampedCache
from workrun.core.paths import copy_file, real_path, remove_tree, user_umask
from workrun_sdk import _wire

__all__ = ["EnvManager", "app_environment", "clean_env", "existing_sdk_path", "sdk_bytecode", "sdk_path", "uv_bin"]

_KEEP_UV = {"UV_CACHE_DIR", "UV_OFFLINE", "UV_INDEX_URL", "UV_DEFAULT_INDEX", "UV_EXTRA_INDEX_URL", "UV_INDEX",
            "UV_NATIVE_TLS", "UV_HTTP_TIMEOUT", "UV_PYTHON_INSTALL_DIR", "UV_PYTHON_DOWNLOADS", "UV_LINK_MODE",
            "UV_INSECURE_HOST"}
_DROP = {"VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "CONDA_PREFIX", "CONDA_DEFAULT_ENV",
         "__PYVENV_LAUNCHER__", "PYTHONEXECUTABLE"}


def clean_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """The caller's environment minus what would point uv or Python at another environment.

    Keeps the user's uv cache, index and offline settings; drops ``WORKRUN_*``.
    """
    env = dict(os.environ if base is None else base)
    for key in list(env):
        if key in _DROP or (key.startswith("UV_") and key not in _KEEP_UV) or key.startswith("WORKRUN_"):
            del env[key]
    return env


def uv_bin() -> str:
    """The path of the ``uv`` executable (the ``uv`` package's, else ``PATH``'s).

    Raises:
        EnvironmentUnavailableError: uv is not installed.
    """
    try:
        import uv

        return str(uv.find_uv_bin())
    except Exception:
        import shutil  # only without the uv package: see workrun.core.paths.remove_tree

        found = shutil.which("uv")
        if not found:
            raise EnvironmentUnavailableError("uv is not installed (pip install uv)") from None
        return found


def _sdk_copy(data_dir: Path) -> tuple[Path, list[Path], str]:
    """``(copy directory, SDK source files, digest)``: the copy is named by the SDK's content hash."""
    import workrun_sdk

    src = Path(workrun_sdk.__file__).parent
    files = sorted(p for p in src.glob("*.py"))
    digest = sha256(b"".join(p.name.encode() + p.read_bytes() for p in files)).hexdigest()[:16]
    return data_dir / "sdk" / digest, files, digest


def existing_sdk_path(data_dir: Path) -> Path | None:
    """:func:`sdk_path` when the copy is there already, else None (nothing is written)."""
    target, _, _ = _sdk_copy(data_dir)
    return target if (target / "workrun_sdk" / "__init__.py").is_file() else None


def sdk_path(data_dir: Path) -> Path:
    """Return a directory holding only a copy of this runner's ``workrun_sdk`` (for ``PYTHONPATH``).

    Copied once per SDK content hash, so App processes import the SDK of the
    runner's own version and nothing else of the runner's environment.
    """
    target, files, digest = _sdk_copy(data_dir)
    if not (target / "workrun_sdk" / "__init__.py").is_file():
        tmp = data_dir / "sdk" / f".{digest}.{os.getpid()}.{threading.get_ident()}"
        (tmp / "workrun_sdk").mkdir(parents=True, exist_ok=True)
        for p in files:
            copy_file(p, tmp / "workrun_sdk" / p.name)  # not copy2: modes come from the private umask
        _compile_here(tmp / "workrun_sdk")
        try:
            os.rename(tmp, target)
        except OSError:  # another process won the race
            remove_tree(tmp)
    return target


def _compile_here(folder: Path) -> None:
    """Write this interpreter's bytecode of every module in ``folder`` (best effort): an App process started
    with ``PYTHONDONTWRITEBYTECODE`` (or in a copy it cannot write) would otherwise compile the SDK from source
    on every spawned call and at every fork server's start (~15 ms each, issue 33)."""
    import py_compile

    for source in sorted(folder.glob("*.py")):
        try:
            py_compile.compile(str(source), doraise=True)
        except (OSError, py_compile.PyCompileError):
            continue


_COMPILED: set[tuple[str, str]] = set()


def sdk_bytecode(venv_python: str, sdk_dir: Path) -> None:
    """Make sure the SDK copy ``sdk_dir`` has bytecode for the App environment's interpreter ``venv_python``
    (issue 33). The copy is compiled for the runner's own interpreter when it is made (:func:`sdk_path`); an
    environment of another Python version (its ``pyvenv.cfg``'s ``version_info``) has the copy compiled once by
    its own python (``-m compileall``, a process started once per environment and SDK). Best effort: an App
    whose python cannot compile the copy runs it from source, as before. Never raises."""
    key = (venv_python, str(sdk_dir))
    if key in _COMPILED:
        return
    _COMPILED.add(key)
    tag = _cache_tag(Path(venv_python).parent.parent / "pyvenv.cfg")
    folder = sdk_dir / "workrun_sdk"
    if tag is None or (folder / "__pycache__" / f"_supervise.{tag}.pyc").is_file():
        return
    try:
        subprocess.run([venv_python, "-m", "compileall", "-q", str(folder)], env=clean_env(),
                       stdin=subprocess.DEVNULL, capture_output=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        pass


def _cache_tag(cfg: Path) -> str | None:
    """``cpython-3XY`` of a venv from its ``pyvenv.cfg`` (``version_info`` or ``version``), else None."""
    try:
        lines = cfg.read_text().splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    keys = {k.strip(): v.strip() for k, _, v in (line.partition("=") for line in lines)}
    if keys.get("implementation", "CPython").lower() != "cpython":
        return None
    parts = (keys.get("version_info") or keys.get("version") or "").split(".")
    if len(parts) < 2 or not (parts[0].isdigit() and parts[1].isdigit()):
        return None
    return f"cpython-{parts[0]}{parts[1]}"


_APP_ENVS: dict[tuple[str, str], tuple[dict[bytes, bytes] | None, dict[str, str]]] = {}


def app_environment(venv_python: str, sdk_dir: Path, call_dir: Path) -> dict[str, str]:
    """The environment of an App process: the caller's, cleaned, pointed at the App's own venv.

    Built once per (venv, SDK) and used again while this process's environment is unchanged (compared as
    ``os.environ`` holds it: bytes, no decoding), issue 14."""
    key = (venv_python, str(sdk_dir))
    now = getattr(os.environ, "_data", None)
    kept = _APP_ENVS.get(key)
    if kept is None or now is None or kept[0] != now:
        env = clean_env()
        venv = Path(venv_python).parent.parent
        env["VIRTUAL_ENV"] = str(venv)
        env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        env["PYTHONPATH"] = str(sdk_dir)
        kept = _APP_ENVS[key] = (dict(now) if now is not None else None, env)
    env = dict(kept[1])
    env[_wire.CALL_DIR_ENV] = str(call_dir)
    return env


_ENV_FILES = ("pyproject.toml", "uv.lock", ".python-version")
_ENV_KEYS: StampedCache[str] = StampedCache()


def _env_key(project: Path) -> str:
    """sha256 over the files that define the environment; kept while their stat stamps hold."""
    def compute() -> str:
        h = sha256()
        for name in _ENV_FILES:
            p = project / name
            h.update(name.encode() + b"\0" + (p.read_bytes() if p.is_file() else b"-") + b"\0")
        return h.hexdigest()

    return _ENV_KEYS.get(str(project), [project / name for name in _ENV_FILES], compute)


def _mark(marker: Path, key: str, project: Path) -> None:
    """Write the sync marker (atomically: :func:`_synced` reads it without the file lock)."""
    tmp = marker.with_name(f".{marker.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"key": key, "project": str(project), "synced_at": time.time()}))
    os.replace(tmp, marker)


def _synced(marker: Path, key: str, venv_python: Path) -> bool:
    """True when the environment's sync marker says it was synced for ``key`` after its venv was made, and the
    venv's python is there: read without the file lock (a sync under way for another key has not written its
    marker yet; a venv made again since the marker, e.g. being synced after a removal, has a newer
    ``pyvenv.cfg`` and is not taken)."""
    try:
        known = json.loads(marker.read_text())
        made = (venv_python.parent.parent / "pyvenv.cfg").stat().st_mtime
    except (OSError, ValueError):
        return False
    if not isinstance(known, dict) or known.get("key") != key or not venv_python.exists():
        return False
    synced_at = known.get("synced_at")
    return isinstance(synced_at, (int, float)) and synced_at >= made


def _private_tree(root: Path) -> None:
    """Take group and others' bits off everything under ``root`` (uv makes its ``.venv/.lock`` 0666
    whatever the umask); the data dir stays private (SPEC §17)."""
    for folder, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            path = os.path.join(folder, name)
            try:
                st = os.lstat(path)
                if st.st_mode & 0o077 and not os.path.islink(path):
                    os.chmod(path, st.st_mode & 0o7700)
            except OSError:
                continue


class EnvManager:
    """Prepares App environments with ``uv sync --locked``, once per (project, lock) (R-A8).

    Args:
        data_dir: Workrun's data directory (locks and sync markers live there).
    """

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self._ready: dict[tuple[str, str], str] = {}
        self._wheres: dict[str, tuple[Path, Path, Path]] = {}
        self._mutex = threading.Lock()

    def _where(self, project: Path) -> tuple[Path, Path, Path]:
        """``(resolved project, its venv's python, its sync marker in the data dir)``; the project's real path is
        looked up on every call, what follows from it is kept (issue 14)."""
        real = real_path(project)
        where = self._wheres.get(real)
        if where is None:
            ident = sha256(real.encode()).hexdigest()[:16]
            resolved = Path(real)
            where = (resolved, resolved / ".venv" / "bin" / "python", self.data_dir / "envs" / f"{ident}.json")
            self._wheres[real] = where
        return where

    def ready_python(self, project: Path) -> str | None:
        """The environment's python when it is synced for the project's current lock (nothing is synced or
        locked here), else None: for work done ahead of a call that may not come (issue 14)."""
        project, venv_python, marker = self._where(project)
        return str(venv_python) if _synced(marker, _env_key(project), venv_python) else None

    def python(self, project: Path, *, offline: bool = False) -> str:
        """Return the environment's python, syncing first if the lock changed or ``.venv`` is gone.

        Raises:
            EnvironmentUnavailableError: uv is missing or ``uv sync --locked`` failed
                (e.g. the lock is out of date, or packages are not in uv's cache offline).
        """
        project, venv_python, marker = self._where(project)
        key = _env_key(project)
        cached = self._ready.get((str(project), key))
        if cached and venv_python.exists():
            return cached
        if _synced(marker, key, venv_python):  # synced for this lock already: no file lock to take (issue 33)
            self._ready[(str(project), key)] = str(venv_python)
            return str(venv_python)
        from filelock import FileLock  # only when the marker must be looked at under the lock

        marker.parent.mkdir(parents=True, exist_ok=True)
        with self._mutex, FileLock(str(marker) + ".lock"):
            try:
                known = json.loads(marker.read_text())
            except (OSError, ValueError):
                known = {}
            if not isinstance(known, dict):  # JSON, but not a marker (found by a hostile test): synced again
                known = {}
            if known.get("key") != key or not venv_python.exists():
                self._sync(project, offline)
                _mark(marker, key, project)
            elif not _synced(marker, key, venv_python):  # synced, but its venv was touched since (a manual `uv
                _mark(marker, key, project)  # sync`): said again under the lock, so the next start reads it

            self._ready[(str(project), key)] = str(venv_python)
        return str(venv_python)

    def _sync(self, project: Path, offline: bool) -> None:
        argv = [uv_bin(), "sync", "--locked", "--no-progress", "--quiet"]
        if offline:
            argv.append("--offline")
        # the user's own project keeps the user's umask; a snapshot tree in the data dir stays private
        inside = Path(self.data_dir).resolve() in Path(project).resolve().parents
        try:
            proc = subprocess.run(argv, cwd=project, env=clean_env(), stdin=subprocess.DEVNULL, capture_output=True,
                                  text=True, errors="replace", timeout=900, umask=-1 if inside else user_umask())
        except OSError as exc:
            if not Path(project).is_dir():  # gone since the call (hostile review: its message named PosixPath)
                raise EnvironmentUnavailableError("the project directory is gone", file=str(project)) from None
            raise EnvironmentUnavailableError(f"uv sync failed: {exc.strerror or exc}", file=str(project)) from None
        except subprocess.TimeoutExpired:
            raise EnvironmentUnavailableError("uv sync took longer than 900 s", file=str(project)) from None
        if inside:
            _private_tree(Path(project) / ".venv")
        if proc.returncode != 0:
            lines = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip()] or ["no output"]
            # uv ends with a hint; the `error:` line says what is wrong (e.g. the lock is out of date)
            last = next((ln for ln in reversed(lines) if ln.startswith("error:")), lines[-1])
            raise EnvironmentUnavailableError(f"`uv sync --locked` exited {proc.returncode}: {last} (Workrun never "
                                              f"rewrites uv.lock: after a change of the project's dependencies, "
                                              f"run `uv lock` in {project})", file=str(project))
