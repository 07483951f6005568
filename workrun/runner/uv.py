"""Running App code: uv environments, the launch command, process groups, timeouts (R-A7, R-A8).

- :class:`EnvManager` syncs each project's environment with ``uv sync --locked``
  once per (project, lock) and reuses it; ``uv.lock`` is never rewritten.
  A file lock per project keeps concurrent calls from racing on ``.venv``.
- :func:`spawn` starts ``<project>/.venv/bin/python <sdk>/workrun_sdk/_launch.py ENTRY``
  in its own session (process group), with a clean environment, stdin from
  /dev/null and stdout/stderr to files in the call directory (so the App
  survives the runner dying, R-R3). The launcher is the SDK's own module.
- :class:`Watchdog` kills process groups at their deadline or on stop
  (SIGTERM, grace period, SIGKILL).
- :func:`recover` decides the outcome of a process a dead runner left behind.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from filelock import FileLock

from workrun.errors import EnvironmentUnavailableError
from workrun.outcomes import Failure
from workrun_sdk import _wire

__all__ = [
    "CAPTURE_BYTES",
    "RESULT_LIMIT_BYTES",
    "Collected",
    "EnvManager",
    "Outcome",
    "Watchdog",
    "app_environment",
    "collect",
    "kill_group",
    "proc_start_time",
    "recover",
    "sdk_path",
    "spawn",
    "wait",
]

CAPTURE_BYTES = 64 * 1024
RESULT_LIMIT_BYTES = 1024 * 1024
_KEEP_UV = {"UV_CACHE_DIR", "UV_OFFLINE", "UV_INDEX_URL", "UV_DEFAULT_INDEX", "UV_EXTRA_INDEX_URL", "UV_INDEX",
            "UV_NATIVE_TLS", "UV_HTTP_TIMEOUT", "UV_PYTHON_INSTALL_DIR", "UV_PYTHON_DOWNLOADS", "UV_LINK_MODE",
            "UV_INSECURE_HOST"}
_DROP = {"VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "CONDA_PREFIX", "CONDA_DEFAULT_ENV",
         "__PYVENV_LAUNCHER__", "PYTHONEXECUTABLE"}


def _clean_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """The caller's environment minus what would point uv or Python at another environment."""
    env = dict(os.environ if base is None else base)
    for key in list(env):
        if key in _DROP or (key.startswith("UV_") and key not in _KEEP_UV) or key.startswith("WORKRUN_"):
            del env[key]
    return env


def _uv_bin() -> str:
    try:
        import uv

        return uv.find_uv_bin()
    except Exception:
        found = shutil.which("uv")
        if not found:
            raise EnvironmentUnavailableError("uv is not installed (pip install uv)") from None
        return found


def sdk_path(data_dir: Path) -> Path:
    """Return a directory holding only a copy of this runner's ``workrun_sdk`` (for ``PYTHONPATH``).

    Copied once per SDK content hash, so App processes import the SDK of the
    runner's own version and nothing else of the runner's environment.
    """
    import workrun_sdk

    src = Path(workrun_sdk.__file__).parent
    files = sorted(p for p in src.glob("*.py"))
    digest = hashlib.sha256(b"".join(p.name.encode() + p.read_bytes() for p in files)).hexdigest()[:16]
    target = data_dir / "sdk" / digest
    if not (target / "workrun_sdk" / "__init__.py").is_file():
        tmp = data_dir / "sdk" / f".{digest}.{os.getpid()}.{threading.get_ident()}"
        (tmp / "workrun_sdk").mkdir(parents=True, exist_ok=True)
        for p in files:
            shutil.copy2(p, tmp / "workrun_sdk" / p.name)
        try:
            os.rename(tmp, target)
        except OSError:  # another process won the race
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def _env_key(project: Path) -> str:
    h = hashlib.sha256()
    for name in ("pyproject.toml", "uv.lock", ".python-version"):
        p = project / name
        h.update(name.encode() + b"\0" + (p.read_bytes() if p.is_file() else b"-") + b"\0")
    return h.hexdigest()


class EnvManager:
    """Prepares App environments with ``uv sync --locked``, once per (project, lock) (R-A8).

    Args:
        data_dir: Workrun's data directory (locks and sync markers live there).
    """

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self._ready: dict[tuple[str, str], str] = {}
        self._mutex = threading.Lock()

    def python(self, project: Path, *, offline: bool = False) -> str:
        """Return the environment's python, syncing first if the lock changed or ``.venv`` is gone.

        Raises:
            EnvironmentUnavailableError: uv is missing or ``uv sync --locked`` failed
                (e.g. the lock is out of date, or packages are not in uv's cache offline).
        """
        project = Path(project).resolve()
        key = _env_key(project)
        venv_python = project / ".venv" / "bin" / "python"
        cached = self._ready.get((str(project), key))
        if cached and venv_python.exists():
            return cached
        ident = hashlib.sha256(str(project).encode()).hexdigest()[:16]
        marker = self.data_dir / "envs" / f"{ident}.json"
        marker.parent.mkdir(parents=True, exist_ok=True)
        with self._mutex, FileLock(str(marker) + ".lock"):
            try:
                known = json.loads(marker.read_text())
            except (OSError, ValueError):
                known = {}
            if known.get("key") != key or not venv_python.exists():
                self._sync(project, offline)
                marker.write_text(json.dumps({"key": key, "project": str(project), "synced_at": time.time()}))
            self._ready[(str(project), key)] = str(venv_python)
        return str(venv_python)

    def _sync(self, project: Path, offline: bool) -> None:
        argv = [_uv_bin(), "sync", "--locked", "--no-progress", "--quiet"]
        if offline:
            argv.append("--offline")
        env = _clean_env()  # keeps the user's UV_OFFLINE, cache and index settings
        try:
            proc = subprocess.run(argv, cwd=project, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                                  text=True, errors="replace", timeout=900)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise EnvironmentUnavailableError(f"uv sync failed: {exc}",
                                              file=str(project)) from None
        if proc.returncode != 0:
            lines = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip()] or ["no output"]
            # uv ends with a hint; the `error:` line says what is wrong (e.g. the lock is out of date)
            last = next((ln for ln in reversed(lines) if ln.startswith("error:")), lines[-1])
            raise EnvironmentUnavailableError(f"`uv sync --locked` exited "
                                              f"{proc.returncode}: {last}", file=str(project))


def app_environment(venv_python: str, sdk_dir: Path, call_dir: Path) -> dict[str, str]:
    """The environment of an App process: the caller's, cleaned, pointed at the App's own venv."""
    env = _clean_env()
    venv = Path(venv_python).parent.parent
    env["VIRTUAL_ENV"] = str(venv)
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(sdk_dir)
    env[_wire.CALL_DIR_ENV] = str(call_dir)
    return env


def proc_start_time(pid: int) -> str | None:
    """Return the process's start time (``/proc/PID/stat`` field 22) to tell a reused pid apart."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read().decode(errors="replace")
        return data.rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _alive(pid: int, start: str | None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    now = proc_start_time(pid)
    if now is None:  # not Linux: trust kill(0)
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            state = fh.read().decode(errors="replace").rsplit(")", 1)[1].split()[0]
        if state == "Z":
            return False
    except (OSError, IndexError):
        pass
    return start is None or now == start


def kill_group(pgid: int, grace: float) -> None:
    """SIGTERM the process group, wait ``grace`` seconds for it to go, then SIGKILL it (R-A7, R-C9)."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        return
    end = time.monotonic() + grace
    while time.monotonic() < end:
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return
        time.sleep(0.02)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


@dataclass
class Outcome:
    """How a process ended.

    Attributes:
        exit_code: the exit status, or None when killed by a signal / unknown.
        signal: the signal number that ended it, if any.
        timed_out: the watchdog killed it at its deadline.
        stopped: it was ended because the user stopped the run.
        not_started: the runner's recovery claimed the call before the launcher did.
        unknown: the process is gone and left no exit record.
    """

    exit_code: int | None = None
    signal: int | None = None
    timed_out: bool = False
    stopped: bool = False
    not_started: bool = False
    unknown: bool = False

    @property
    def failure(self) -> Failure | None:
        """Why the process did not end well, or None when it exited 0 by itself (its result decides then)."""
        if self.not_started:
            return Failure.NOT_STARTED
        if self.unknown:
            return Failure.UNKNOWN
        if self.stopped:
            return Failure.STOPPED
        if self.timed_out:
            return Failure.TIMED_OUT
        if self.signal:
            return Failure.SIGNALLED
        if self.exit_code != 0:
            return Failure.EXITED
        return None


@dataclass
class Collected:
    """What an App left in its call directory.

    Attributes:
        result: the parsed result (or None when the App saved none).
        resources: resources recorded with ``process.resource``.
        error: why the result is unusable (not JSON, over 1 MiB, bad envelope), else None.
        stdout_tail / stderr_tail: the last 64 KiB of each stream, bad UTF-8 replaced.
    """

    result: Any = None
    resources: list[dict[str, Any]] = field(default_factory=list)
    depends_on: list[str] = field(default_factory=list)
    error: str | None = None
    stdout_tail: str = ""
    stderr_tail: str = ""


def _tail(path: Path) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - CAPTURE_BYTES))
            return fh.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def collect(call_dir: Path) -> Collected:
    """Read result, resources and output tails from a finished call's directory (never raises)."""
    out = Collected(stdout_tail=_tail(call_dir / "stdout"), stderr_tail=_tail(call_dir / "stderr"))
    result_file = call_dir / "result.json"
    if result_file.exists():
        size = result_file.stat().st_size
        if size > RESULT_LIMIT_BYTES + 64:
            out.error = f"result is {size} bytes, over the 1 MiB limit ({RESULT_LIMIT_BYTES} bytes)"
        else:
            try:
                data = json.loads(result_file.read_text(encoding="utf-8"))
                if not isinstance(data, dict) or data.get("v") != _wire.VERSION or "result" not in data:
                    out.error = "result.json: not a version-1 result envelope"
                else:
                    out.result = data["result"]
                    if len(json.dumps(out.result, ensure_ascii=False).encode("utf-8")) > RESULT_LIMIT_BYTES:
                        out.error = f"result is over the 1 MiB limit ({RESULT_LIMIT_BYTES} bytes)"
                        out.result = None
            except (ValueError, UnicodeDecodeError) as exc:
                out.error = f"result.json: not JSON ({exc})"
    dep_file = call_dir / "dependencies.json"
    if dep_file.exists():
        try:
            data = json.loads(dep_file.read_text(encoding="utf-8"))
            out.depends_on = [d for d in data.get("depends_on", []) if isinstance(d, str)]
        except (ValueError, OSError, AttributeError):
            out.error = out.error or "dependencies.json: not JSON"
    res_file = call_dir / "resources.json"
    if res_file.exists():
        try:
            data = json.loads(res_file.read_text(encoding="utf-8"))
            out.resources = [r for r in data.get("resources", []) if isinstance(r, dict)]
        except (ValueError, OSError, AttributeError):
            out.error = out.error or "resources.json: not JSON"
    return out


def spawn(venv_python: str, project: Path, entry: Path, call_dir: Path, envelope: dict[str, Any],
          sdk_dir: Path) -> subprocess.Popen[bytes]:
    """Start one App process in its own process group (R-A7).

    Args:
        venv_python: the App environment's python (from :class:`EnvManager`).
        project: the App project directory (the process's working directory).
        entry: absolute path of the entry script.
        call_dir: an existing, empty call directory; ``input.json`` is written here.
        envelope: the input envelope (``kind``, ``input``, ``context``, ``tool``).
        sdk_dir: from :func:`sdk_path`.

    Raises:
        OSError: when the process cannot be started.
    """
    _wire.write_json_atomic(call_dir / "input.json", {"v": _wire.VERSION, **envelope})
    with open(call_dir / "stdout", "wb") as out, open(call_dir / "stderr", "wb") as err:
        return subprocess.Popen(
            [venv_python, str(sdk_dir / "workrun_sdk" / "_launch.py"), str(entry)],
            cwd=project, env=app_environment(venv_python, sdk_dir, call_dir),
            stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True, close_fds=True,
        )


class Watchdog:
    """Ends process groups at their deadline or when the run is stopped.

    One background thread checks every ``tick`` seconds; the callers block in
    ``Popen.wait()`` (no polling delay on the hot path).

    Args:
        grace: seconds between SIGTERM and SIGKILL.
    """

    def __init__(self, grace: float = 5.0, tick: float = 0.05) -> None:
        self.grace = grace
        self.tick = tick
        self._procs: dict[int, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._stop_all = False
        self._thread = threading.Thread(target=self._loop, name="workrun-watchdog", daemon=True)
        self._thread.start()

    def watch(self, pid: int, deadline: float) -> dict[str, Any]:
        """Register a process group leader; returns its flags dict (``timed_out``, ``stopped``)."""
        flags = {"deadline": deadline, "timed_out": False, "stopped": False, "killing": False}
        with self._lock:
            self._procs[pid] = flags
            if self._stop_all:
                self._kill(pid, flags, "stopped")
        return flags

    def forget(self, pid: int) -> None:
        """Unregister a process after it was reaped."""
        with self._lock:
            self._procs.pop(pid, None)

    def stop_all(self) -> None:
        """Stop every watched group now and any registered later (R-C9)."""
        with self._lock:
            self._stop_all = True
            for pid, flags in list(self._procs.items()):
                self._kill(pid, flags, "stopped")

    def _kill(self, pid: int, flags: dict[str, Any], why: str) -> None:
        if flags["killing"]:
            flags[why] = flags[why] or why == "stopped"
            return
        flags["killing"] = True
        flags[why] = True
        threading.Thread(target=kill_group, args=(pid, self.grace), daemon=True).start()

    def _loop(self) -> None:
        while True:
            time.sleep(self.tick)
            now = time.time()
            with self._lock:
                for pid, flags in list(self._procs.items()):
                    if not flags["killing"] and now >= flags["deadline"]:
                        self._kill(pid, flags, "timed_out")


def wait(proc: subprocess.Popen[bytes], watchdog: Watchdog, deadline: float) -> Outcome:
    """Wait for a spawned process; the watchdog ends it at ``deadline`` (epoch seconds) or on stop."""
    flags = watchdog.watch(proc.pid, deadline)
    try:
        code = proc.wait()
    finally:
        watchdog.forget(proc.pid)
    if flags["killing"]:
        # the leader is gone, but members of its group that ignore SIGTERM may not be: end them all now
        kill_group(proc.pid, watchdog.grace)
    return Outcome(exit_code=code if code >= 0 else None, signal=-code if code < 0 else None,
                   timed_out=flags["timed_out"], stopped=flags["stopped"])


def _read_exit(call_dir: Path) -> Outcome | None:
    """The launcher's exit record as an Outcome (exit code or signal), or None when there is none."""
    try:
        data = json.loads((call_dir / "exit.json").read_text())
        code, sig = data.get("exit_code"), data.get("signal")
        if code is None and sig is None:
            return None
        return Outcome(exit_code=None if code is None else int(code), signal=None if sig is None else int(sig))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def recover(pid: int | None, start: str | None, call_dir: Path, deadline: float | None, grace: float,
            *, claim_wait: float = 2.0) -> Outcome:
    """Decide the outcome of a process left behind by a runner that died (R-R3, SPEC §10).

    A live process is waited for until it exits or its deadline passes (then its
    group is killed: a timeout). A process gone without an exit record is unknown.
    A call whose launcher never claimed its call directory is claimed here as
    abandoned and reported ``not_started`` (it can never start late).
    """
    if pid is None:
        claim_file = call_dir / "claim"
        end = time.monotonic() + claim_wait
        while not claim_file.exists() and time.monotonic() < end:
            time.sleep(0.05)
        if not call_dir.is_dir():
            return Outcome(not_started=True)
        if not claim_file.exists() and _wire.claim(call_dir, "abandoned\n"):
            return Outcome(not_started=True)
        try:
            text = claim_file.read_text()
        except OSError:
            text = ""
        if not text.startswith("started"):
            return Outcome(not_started=True)
        try:
            pid = int(text.split()[1])
        except (IndexError, ValueError):
            return Outcome(unknown=True)
        start = None
    while _alive(pid, start):
        if deadline is not None and time.time() >= deadline:
            kill_group(pid, grace)
            return Outcome(timed_out=True, signal=signal.SIGTERM)
        time.sleep(0.05)
    return _read_exit(call_dir) or Outcome(unknown=True)
