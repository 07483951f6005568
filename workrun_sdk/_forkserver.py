"""Fork server: one per (App environment, SDK version), forking a supervisor per call (R-P1, R-P2).

``python <sdk>/workrun_sdk/_forkserver.py REQUEST_FD REPLY_FD DONE_FD CALLS [WARM_ENTRY]`` is
started by the runner in the App's environment (its venv python, the clean
environment of :func:`workrun.runner.env.app_environment` without a call
directory). It loads the interpreter and the SDK once (the tool SDK too for
``CALLS`` = ``tool``; with ``WARM_ENTRY``, a Tool App's module too: ``warm =
true``), then serves requests
one at a time, single-threaded, over a socket and a pipe:

- request (one message of the runner's ``SOCK_SEQPACKET`` socket pair, so a reader takes exactly one):
  ``{"call_dir", "cwd", "env": {...}, "entry", "args": [...]}`` as JSON
- reply (one JSON line on the pipe): ``{"pid": int, "start": str | null}`` — the supervisor's pid and its
  ``/proc`` start time — or ``{"error": str}``.

For each request a process that is the leader of a new session (so it
outlives the server and the runner, and is ended by group like a spawned call)
takes the call's cwd, exactly the call's environment, stdin from ``/dev/null``
and stdout/stderr appended to the call's files, and runs
:func:`workrun_sdk._supervise.supervise` — exactly what the spawn launcher
runs. That process is forked *ahead* of its call: between calls the server
keeps one spare supervisor, already its own session's leader and a
subreaper, with its App process forked too; they run nothing of the App. The
spare reads the next request from the runner's socket itself (the server then
does not) and answers the runner, so neither a fork nor the server is on the
call's path (one process hand-over fewer, issue 14). It tells the server once
it has handed the call to its App process, and the server forks the next spare
then: that fork and the new spare's own start run beside the App, not beside
the claim and the App's start (on two cores they delayed both, issue 33), and
the spare is ready (its own start done) before the runner asks again. The
supervisor claims the call directory before it hands the call to its App process,
so no App code runs for a call that was fenced. A spare that died is forked
around (the server reads the requests and forks a fresh supervisor per call
until the next spare); an unused one ends with the server. The server reaps
its exited supervisors; it exits when the runner's end of the request socket
closes (the runner ended or closed it).

What differs from a spawned call: the hash seed (``PYTHONHASHSEED``) and the
interpreter's start-up settings are the server's; the SDK modules (and what
they import: ``json``, ``ctypes``; for Tool App calls ``inspect``, ``typing``,
``runpy``...) are already in ``sys.modules``.
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__" and sys.path and os.path.basename(sys.path[0]) == "workrun_sdk":
    del sys.path[0]  # run as a script: its own folder must not shadow anything

import _socket  # noqa: E402  # not socket: its enums and selectors cost each server's start ~3 ms
import gc as _gc  # noqa: E402
import json  # noqa: E402
import select  # noqa: E402

from workrun_sdk import _supervise, _wire  # noqa: E402

__all__ = ["serve"]

_MESSAGE_MAX = 1 << 22  # bytes: one request (its environment included) is one message of at most this
_LOOK = 0.2  # seconds between looks for exited supervisors, only while one has no pidfd (a kernel before 5.3)


def _preload(tools: bool) -> None:
    """Import what App calls use, so a forked call finds it in ``sys.modules``. ``tools``: a server for Tool App
    calls, which also preloads the tool SDK (``inspect``, ``typing``, ``runpy``...: ~10 ms per call otherwise).
    A server for process and compensation calls does not: every page more in the server is a page more to copy
    and to tear down per call (measured, issue 14: ~0.2 ms per call of a chain)."""
    import atexit  # noqa: F401
    import builtins  # noqa: F401
    import types  # noqa: F401

    import workrun_sdk.compensation  # noqa: F401
    import workrun_sdk.process  # noqa: F401

    if tools:
        import runpy  # noqa: F401  (tool calls load their module with it)
        import traceback  # noqa: F401

        import workrun_sdk.tool  # noqa: F401

    if sys.platform.startswith("linux"):  # every supervisor calls prctl: found (and its call path set up) once here,
        _supervise._prctl(3, 0)  # PR_GET_DUMPABLE, no effect; through ctypes' C module, not ctypes (~2 ms of start)


def _first_uses() -> None:
    """Once, in the server before it forks anything: go through what taking and running a call does for the
    first time in a process (compile and run a module, JSON both ways, a text file written and one read, the
    environment changed), with no effect. What a first use sets up (the allocator's arenas, the compiler's
    and codecs' state) is then inherited by every forked process instead of made again in each (issue 33:
    a first compile cost a forked App ~2 ms of CPU, a compile after one in the server ~0.3 ms)."""
    import types

    text = json.dumps({"v": 1, "env": dict(os.environ), "input": {"value": [1, 2.5, "x", None, True]}})
    json.loads(text)
    exec(compile("value = {'a': [1, 2]}\n", "<first use>", "exec"), types.ModuleType("_first_use").__dict__)
    with open(os.devnull, "w", encoding="utf-8") as fh:
        fh.write(text)
    _wire.start_time(os.getpid())
    os.environ["WORKRUN_FIRST_USE"] = "1"
    del os.environ["WORKRUN_FIRST_USE"]


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
    its own session already, it reads the next request from the runner's request socket itself, answers the
    runner and tells the server (``fd``: its end of their socket pair), so a call starts without the server or
    a fork on its path. It ends (with its App) when the server's end closes before it took a request."""

    def __init__(self, pid: int, fd: int) -> None:
        self.pid, self.fd = pid, fd

    def taken(self) -> bool:
        """Read what the spare said (its ``fd`` is readable): True when it took a request and its App is under
        way, False when it is gone without saying so (it died, or the call it took never started: fenced,
        ended or not startable; the server reads the requests itself again: it is reaped now, as it closes
        its end untold only by exiting). The pair is closed."""
        try:
            said = os.read(self.fd, 16)
        except OSError:
            said = b""
        os.close(self.fd)
        if said.startswith(b"t"):
            return True
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:  # reaped already
            pass
        return False

    def end(self) -> None:
        """Let it go: it ends (with its App) unless it took a request a moment ago (then it is that call's
        supervisor, which outlives the server as every call does). Reaped when it ends within a second."""
        os.close(self.fd)
        fd = _pidfd(self.pid)
        if fd >= 0:
            select.select([fd], [], [], 1.0)
            os.close(fd)
        _reap()


def _make_spare(request_fd: int, reply_fd: int, close: tuple[int, ...] = ()) -> _Spare | None:
    """Fork the next call's supervisor (and its App process) now, between calls; None when it cannot.
    ``close``: the server's pidfds of its supervisors, which the spare must not keep."""
    if not hasattr(_supervise.signal, "sigtimedwait"):
        return None
    _gc.freeze()  # the server's objects are out of the children's collections: no page copied to mark them
    try:
        mine, theirs = _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_STREAM)
    except OSError:
        return None
    _supervise._flush()
    try:
        pid = os.fork()
    except OSError:
        mine.close()
        theirs.close()
        return None
    if pid == 0:
        try:
            mine.close()
            for fd in close:
                os.close(fd)
            _spare(theirs.detach(), request_fd, reply_fd)
        finally:
            os._exit(70)  # _spare() never returns or raises on: never run on in a copy of the server
    theirs.close()
    return _Spare(pid, mine.detach())


def _spare(fd: int, request_fd: int, reply_fd: int) -> None:
    """In a spare (see :class:`_Spare`): wait for a request (or the server's end), take it, supervise it."""
    _supervise.signal.pthread_sigmask(_supervise.signal.SIG_BLOCK, _supervise._WAKE)
    try:
        os.setsid()
        _supervise.become_subreaper()
        app = _supervise.spare_app(close=(fd, request_fd, reply_fd))
        start = _wire.start_time(os.getpid())
    except BaseException:
        os._exit(70)
    poller = select.poll()
    poller.register(request_fd, select.POLLIN)
    poller.register(fd, select.POLLIN)
    message = b""
    while True:
        try:
            ready = dict(poller.poll())
        except InterruptedError:
            continue
        if fd in ready:  # the server ended (or let this spare go) before a request came: never take one now
            break  # (a request waiting is answered by the runner's retry: the reply pipe reaches EOF)
        if request_fd in ready:  # one request is one message of the runner's SEQPACKET socket
            try:
                message = os.read(request_fd, _MESSAGE_MAX)
            except BlockingIOError:  # not there any more: not ours
                continue
            except OSError:
                message = b""
            break
    if not message:  # not needed after all: end the App process too
        _supervise._drop(app)
        os._exit(0)
    app = _supervise.prepare_app(app, message)  # it takes the call's place meanwhile; it runs once claimed
    try:  # the runner's answer; the server's news (``t`` on ``fd``) once the App is under way (supervise)
        os.write(reply_fd, (json.dumps({"pid": os.getpid(), "start": start}) + "\n").encode())
    except OSError:
        pass
    for k in (request_fd, reply_fd):
        os.close(k)
    try:
        request = json.loads(message)
        _supervise.enter(request["cwd"], request["env"], request["call_dir"])
    except BaseException as exc:  # nothing of the call ran; the runner sees no claim and no record
        _supervise._drop(app)
        _cannot_start(exc)
    _supervise.supervise(request["entry"], list(request.get("args") or []), app, start, fd)


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def serve(request_fd: int, reply_fd: int) -> None:
    """Serve fork requests until the runner closes its end of the request socket; a spare supervisor is kept
    ready between calls, and reads the next request itself (the server reads them only while it has none).

    The next spare is forked as soon as a call took the last one and its App is under way, so it is ready before
    the runner asks again (measured, issue 14: forking it only once that call had ended put the spare's own start
    on the next call's path; issue 33: forking it as the call was taken put it beside the call's claim). Every
    supervisor it forked is reaped as soon as it exits (a pidfd each): until then its process group exists, and a
    runner ending that group waits for it to be gone."""
    reaping: list[int] = []  # pidfds of our supervisors still running: each is reaped as it exits
    look: float | None = None  # seconds between looks for exited supervisors: only for one without a pidfd

    def track(pid: int) -> None:  # ``pid``: our child, a zombie at worst, or reaped already: never a reused pid
        nonlocal look
        fd = _pidfd(pid)
        if fd >= 0:
            reaping.append(fd)
        elif fd == _GONE:  # it ended and was reaped before its word was read (a busy machine): nothing to watch
            pass
        else:  # no pidfd here (Linux < 5.3): look for exited children now and then
            look = _LOOK

    spare = _make_spare(request_fd, reply_fd)
    while True:
        poller = select.poll()
        # with a spare, only the runner's hang-up is watched here: its requests are the spare's to read
        poller.register(request_fd, select.POLLIN if spare is None else 0)
        if spare is not None:
            poller.register(spare.fd, select.POLLIN)
        for fd in reaping:
            poller.register(fd, select.POLLIN)
        try:
            ready = dict(poller.poll(None if look is None else look * 1000))
        except InterruptedError:
            continue
        # a descriptor closed here may be reused at once by the next one opened: ``ready`` is not read after
        for fd in [fd for fd in reaping if fd in ready]:
            reaping.remove(fd)
            os.close(fd)
        spoke = spare is not None and spare.fd in ready
        if spare is not None and spoke:
            pid, took = spare.pid, spare.taken()
            spare = None
            if took:  # it is that call's supervisor now (tracked before any reaping: a call that ended already
                track(pid)  # is a zombie still); the next call's spare, at once
                spare = _make_spare(request_fd, reply_fd, tuple(reaping))
        _reap()
        if spoke or request_fd not in ready:  # (a spare that died without a call: the server reads the next
            continue  # request itself)
        if spare is not None:  # the runner hung up (or a request while the spare waits: it reads it)
            if ready[request_fd] & (select.POLLHUP | select.POLLERR):
                break
            continue
        try:
            message = os.read(request_fd, _MESSAGE_MAX)
        except BlockingIOError:
            continue
        if not message:
            break
        try:
            request = json.loads(message)
        except ValueError as exc:
            os.write(reply_fd, (json.dumps({"error": str(exc)}) + "\n").encode())
            continue
        try:
            _supervise._flush()
            _gc.freeze()
            pid = os.fork()
        except OSError as exc:
            os.write(reply_fd, (json.dumps({"error": str(exc)}) + "\n").encode())
            continue
        if pid == 0:
            try:
                _call(request, (request_fd, reply_fd, *reaping))
            finally:
                os._exit(70)  # never run on in a copy of the server
        os.write(reply_fd, (json.dumps({"pid": pid, "start": _wire.start_time(pid)}) + "\n").encode())
        track(pid)
        spare = _make_spare(request_fd, reply_fd, tuple(reaping))  # the next call's (one per call at most)
    for fd in reaping:
        os.close(fd)
    if spare is not None:
        spare.end()


_GONE = -2  # _pidfd: no such process any more


def _pidfd(pid: int) -> int:
    """A pidfd of our child ``pid`` (readable once it exits); :data:`_GONE` when it was reaped already (the server
    reaps every exited child it has, tracked or not yet); -1 where there are no pidfds."""
    try:
        return os.pidfd_open(pid)
    except ProcessLookupError:
        return _GONE
    except (AttributeError, OSError):
        return -1


def main(argv: list[str]) -> None:
    """Start-up: preload, optionally warm a Tool App module, say ``ready``, serve.

    ``argv``: ``REQUEST_FD REPLY_FD DONE_FD CALLS [WARM_ENTRY]``; ``DONE_FD`` (-1: none) is the runner's *done*
    pipe, which every supervisor keeps and its App never has (:data:`workrun_sdk._supervise._done_fd`);
    ``CALLS``: ``process`` (process and compensation calls) or ``tool`` (Tool App calls; a warm server's)."""
    request_fd, reply_fd, done_fd = int(argv[0]), int(argv[1]), int(argv[2])
    os.set_blocking(request_fd, False)  # the server and its spare both wait on it: a read never blocks either
    if done_fd >= 0:
        os.set_blocking(done_fd, False)  # a full pipe drops the line: the runner then sees the supervisor exit
        _supervise._done_fd = done_fd
    _preload(len(argv) > 3 and argv[3] == "tool")
    try:
        _first_uses()
    except Exception:  # only ever a saving: a server that cannot go through them serves calls all the same
        pass
    if len(argv) > 4:
        try:
            _warm(os.path.realpath(argv[4]))
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
