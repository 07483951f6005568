"""Fork server: one per (App environment, SDK version), forking a supervisor per call (R-P1, R-P2).

``python <sdk>/workrun_sdk/_forkserver.py REQUEST_FD REPLY_FD [WARM_ENTRY]`` is
started by the runner in the App's environment (its venv python, the clean
environment of :func:`workrun.runner.env.app_environment` without a call
directory). It loads the interpreter and the whole SDK once (and, with
``WARM_ENTRY``, a Tool App's module: ``warm = true``), then serves requests
one at a time, single-threaded, over two pipes:

- request (one JSON line): ``{"call_dir", "cwd", "env": {...}, "entry", "args": [...]}``
- reply (one JSON line): ``{"pid": int, "start": str | null}`` — the supervisor's pid and its
  ``/proc`` start time — or ``{"error": str}``.

For each request it forks a process that becomes the leader of a new session
(so it outlives the server and the runner, and is ended by group like a
spawned call), takes the call's cwd, replaces ``os.environ`` wholly, points
stdin at ``/dev/null`` and stdout/stderr at the call's files, and runs
:func:`workrun_sdk._supervise.supervise` — exactly what the spawn launcher
runs. The server reaps its exited supervisors; it exits when the request pipe
reaches EOF (the runner ended or closed it).

What differs from a spawned call: the hash seed (``PYTHONHASHSEED``) and the
interpreter's start-up settings are the server's; the SDK modules (and what
they import: ``json``, ``inspect``, ``typing``, ``ctypes``...) are already in
``sys.modules``.
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__" and sys.path and os.path.basename(sys.path[0]) == "workrun_sdk":
    del sys.path[0]  # run as a script: its own folder must not shadow anything

import json  # noqa: E402
import select  # noqa: E402

from workrun_sdk import _supervise, _wire  # noqa: E402

__all__ = ["serve"]


def _preload() -> None:
    """Import what App calls use, so a forked call finds it in ``sys.modules``."""
    import atexit  # noqa: F401
    import builtins  # noqa: F401
    import runpy  # noqa: F401  (tool calls load their module with it)
    import traceback  # noqa: F401
    import types  # noqa: F401

    import workrun_sdk.compensation  # noqa: F401
    import workrun_sdk.process  # noqa: F401
    import workrun_sdk.tool  # noqa: F401

    try:  # every supervisor calls prctl through it
        import ctypes

        _supervise._libc = ctypes.CDLL(None, use_errno=True)
    except (ImportError, OSError):
        pass


def _warm(entry: str) -> None:
    """Import a Tool App's module once (``warm = true``): every call forks with it loaded."""
    from workrun_sdk import tool as _tool

    saved = sys.path[0] if sys.path else None
    sys.path.insert(0, os.path.dirname(entry))
    try:
        _tool._warm_load(entry)
    finally:
        if sys.path and sys.path[0] == os.path.dirname(entry) and saved is not None:
            del sys.path[0]


def _start_time(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().decode(errors="replace").rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _call(request: dict, keep_fds: tuple[int, ...]) -> None:
    """In the forked child: become the call's supervisor (never returns)."""
    if hasattr(_supervise.signal, "sigtimedwait"):  # a SIGTERM from now on waits for the supervisor (no record lost)
        _supervise.signal.pthread_sigmask(_supervise.signal.SIG_BLOCK, _supervise._WAKE)
    try:
        os.setsid()
        for fd in keep_fds:
            os.close(fd)
        os.chdir(request["cwd"])
        env = request["env"]
        for name in [n for n in os.environ if n not in env]:  # the server's environment is the call's minus a
            del os.environ[name]                               # few names: change only what differs
        for name, value in env.items():
            if os.environ.get(name) != value:
                os.environ[name] = value
        call_dir = request["call_dir"]
        null = os.open(os.devnull, os.O_RDONLY)
        out = os.open(os.path.join(call_dir, "stdout"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        err = os.open(os.path.join(call_dir, "stderr"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        for fd, target in ((null, 0), (out, 1), (err, 2)):
            os.dup2(fd, target)
            os.close(fd)
    except BaseException as exc:  # nothing of the call ran; the runner sees no claim and no record
        try:
            os.write(2, f"workrun fork server: cannot start the call: {exc}\n".encode())
        finally:
            os._exit(70)
    _supervise.supervise(request["entry"], list(request.get("args") or []))


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def serve(request_fd: int, reply_fd: int) -> None:
    """Serve fork requests until the request pipe reaches EOF."""
    buffer = b""
    while True:
        ready, _, _ = select.select([request_fd], [], [], 0.2)
        _reap()
        if not ready:
            continue
        chunk = os.read(request_fd, 65536)
        if not chunk:
            break
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            try:
                request = json.loads(line)
                _supervise._flush()
                pid = os.fork()
            except (OSError, ValueError) as exc:
                os.write(reply_fd, (json.dumps({"error": str(exc)}) + "\n").encode())
                continue
            if pid == 0:
                _call(request, (request_fd, reply_fd))
            os.write(reply_fd, (json.dumps({"pid": pid, "start": _start_time(pid)}) + "\n").encode())


def main(argv: list[str]) -> None:
    """Start-up: preload, optionally warm a Tool App module, say ``ready``, serve."""
    request_fd, reply_fd = int(argv[0]), int(argv[1])
    _preload()
    if len(argv) > 2:
        try:
            _warm(os.path.realpath(argv[2]))
        except BaseException as exc:  # the runner uses a plain server: each call then reports its own error
            _supervise._flush()
            os.write(reply_fd, (json.dumps({"ready": False, "warm_error": f"{type(exc).__name__}: {exc}"})
                                + "\n").encode())
            os._exit(0)
    _supervise._flush()
    os.write(reply_fd, (json.dumps({"ready": True, "v": _wire.VERSION}) + "\n").encode())
    serve(request_fd, reply_fd)
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
