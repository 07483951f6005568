"""Fork server: one per (App environment, SDK version), forking a supervisor per call (R-P1, R-P2).

``python <sdk>/workrun_sdk/_forkserver.py REQUEST_FD REPLY_FD DONE_FD [WARM_ENTRY]`` is
started by the runner in the App's environment (its venv python, the clean
environment of :func:`workrun.runner.env.app_environment` without a call
directory). It loads the interpreter and the whole SDK once (and, with
``WARM_ENTRY``, a Tool App's module: ``warm = true``), then serves requests
one at a time, single-threaded, over two pipes:

- request (one JSON line): ``{"call_dir", "cwd", "env": {...}, "entry", "args": [...]}``
- reply (one JSON line): ``{"pid": int, "start": str | null}`` — the supervisor's pid and its
  ``/proc`` start time — or ``{"error": str}``.

For each request a process that is the leader of a new session (so it
outlives the server and the runner, and is ended by group like a spawned call)
takes the call's cwd, exactly the call's environment, stdin from ``/dev/null``
and stdout/stderr appended to the call's files, and runs
:func:`workrun_sdk._supervise.supervise` — exactly what the spawn launcher
runs. That process is forked *ahead* of its call: between calls the server
keeps one spare supervisor, already its own session's leader and a
subreaper, with its App process forked too; both wait on a pipe and run
nothing of the App. A request is handed to the spare (the reply names it), so
no fork is on the call's path. The next spare is forked once that call's
supervisor has exited (or :data:`SPARE_AFTER` seconds after the reply, for a
long call): forking it while the call starts would take a core from the call
and from the runner, which has work to do at that moment too (issue 14). The
supervisor claims the call directory before it hands the call to its App
process, so no App code runs for a call that was fenced. A spare that died is
forked around (a fresh supervisor, as before); an unused one is ended with the
server. The server reaps its exited supervisors; it exits when the request pipe
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

__all__ = ["SPARE_AFTER", "serve"]

SPARE_AFTER = 0.2
"""Seconds after handing a call to the spare when the next spare is forked even though that call still runs."""


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
        _supervise.enter(request["cwd"], request["env"], request["call_dir"])
    except BaseException as exc:  # nothing of the call ran; the runner sees no claim and no record
        _cannot_start(exc)
    _supervise.supervise(request["entry"], list(request.get("args") or []))


def _cannot_start(exc: BaseException) -> None:
    try:
        os.write(2, f"workrun fork server: cannot start the call: {exc}\n".encode())
    finally:
        os._exit(70)


class _Spare:
    """A supervisor forked ahead of its call, with its App process forked too (R-P1, issue 14): the leader of
    its own session already, it waits on a pipe for the next request; the server hands it over, so a call
    starts without a fork on its path. It ends (with its App) when the pipe closes unused."""

    def __init__(self, pid: int, start: str | None, fd: int) -> None:
        self.pid, self.start, self.fd = pid, start, fd

    def take(self, line: bytes) -> bool:
        """Hand it the request; False when it cannot take it (it died: the caller forks instead)."""
        return _supervise.write_all(self.fd, line + b"\n")

    def end(self) -> None:
        """End it unused (with its App process) and reap it."""
        os.close(self.fd)
        try:
            os.killpg(self.pid, _supervise.signal.SIGKILL)
        except OSError:
            pass
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass


def _make_spare(keep_fds: tuple[int, ...]) -> _Spare | None:
    """Fork the next call's supervisor (and its App process) now, between calls; None when it cannot."""
    if not hasattr(_supervise.signal, "sigtimedwait"):
        return None
    forked = _supervise.fork_waiting(lambda r: _spare(r, keep_fds))
    return None if forked is None else _Spare(forked[0], _start_time(forked[0]), forked[1])


def _spare(fd: int, keep_fds: tuple[int, ...]) -> None:
    """In a spare (see :class:`_Spare`): wait for the request, then supervise it (never returns)."""
    _supervise.signal.pthread_sigmask(_supervise.signal.SIG_BLOCK, _supervise._WAKE)
    try:
        os.setsid()
        for k in keep_fds:
            os.close(k)
        _supervise.become_subreaper()
        app = _supervise.spare_app(close=fd)
        _supervise.warm_up()
    except BaseException:
        os._exit(70)
    buffer = b""
    while b"\n" not in buffer:
        try:
            chunk = os.read(fd, 65536)
        except InterruptedError:
            continue
        except OSError:
            chunk = b""
        if not chunk:  # not needed after all (the server ended): end the App process too
            _supervise._drop(app)
            os._exit(0)
        buffer += chunk
    os.close(fd)
    try:
        request = json.loads(buffer.split(b"\n", 1)[0])
        _supervise.enter(request["cwd"], request["env"], request["call_dir"])
    except BaseException as exc:  # nothing of the call ran; the runner sees no claim and no record
        _supervise._drop(app)
        _cannot_start(exc)
    _supervise.supervise(request["entry"], list(request.get("args") or []), app)


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def serve(request_fd: int, reply_fd: int) -> None:
    """Serve fork requests until the request pipe reaches EOF; a spare supervisor is kept ready between calls."""
    keep = (request_fd, reply_fd)
    spare = _make_spare(keep)
    buffer = b""
    running = -1  # a pidfd of the supervisor the last spare became: the next spare is forked when it exits
    while True:
        ready, _, _ = select.select([request_fd] if running < 0 else [request_fd, running], [], [],
                                    SPARE_AFTER)
        _reap()
        if running >= 0 and (running in ready or not ready):  # that call ended (or runs long): fork it now
            os.close(running)
            running = -1
            if spare is None:
                spare = _make_spare(keep)
        if request_fd not in ready:
            continue
        chunk = os.read(request_fd, 65536)
        if not chunk:
            break
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            try:
                request = json.loads(line)
            except ValueError as exc:
                os.write(reply_fd, (json.dumps({"error": str(exc)}) + "\n").encode())
                continue
            taken, spare = spare, None
            if taken is not None and taken.take(line):
                pid, start = taken.pid, taken.start
            else:
                try:
                    _supervise._flush()
                    pid = os.fork()
                except OSError as exc:
                    os.write(reply_fd, (json.dumps({"error": str(exc)}) + "\n").encode())
                    continue
                if pid == 0:
                    try:
                        _call(request, keep if running < 0 else (*keep, running))
                    finally:
                        os._exit(70)  # never run on in a copy of the server
                start = _start_time(pid)
            os.write(reply_fd, (json.dumps({"pid": pid, "start": start}) + "\n").encode())
            if running < 0:
                running = _pidfd(pid)
                if running >= 0:
                    continue
            # no pidfd, or a call came while another runs (nodes in parallel): the next call's spare, now
            spare = _make_spare(keep if running < 0 else (*keep, running))
    if running >= 0:
        os.close(running)
    if spare is not None:
        spare.end()


def _pidfd(pid: int) -> int:
    """A pidfd of our child ``pid`` (readable once it exits), or -1 where there is none."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return -1


def main(argv: list[str]) -> None:
    """Start-up: preload, optionally warm a Tool App module, say ``ready``, serve.

    ``argv``: ``REQUEST_FD REPLY_FD DONE_FD [WARM_ENTRY]``; ``DONE_FD`` (-1: none) is the runner's *done* pipe,
    which every supervisor keeps and its App never has (:data:`workrun_sdk._supervise._done_fd`)."""
    request_fd, reply_fd, done_fd = int(argv[0]), int(argv[1]), int(argv[2])
    if done_fd >= 0:
        os.set_blocking(done_fd, False)  # a full pipe drops the line: the runner then sees the supervisor exit
        _supervise._done_fd = done_fd
    _preload()
    if len(argv) > 3:
        try:
            _warm(os.path.realpath(argv[3]))
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
