"""The runner's side of the fork server (R-P1, R-P2): calls start by fork, not by a new interpreter.

One server (``workrun_sdk/_forkserver.py``, standard library only) runs per
*key* = (venv python, the environment's state, SDK directory, warm Tool App
entry and fingerprint, kind of calls: Tool App calls or the others, which
need less of the SDK loaded). It is started lazily on the first call that needs it,
takes requests on a ``SOCK_SEQPACKET`` socket pair (one JSON message each: the
server, or the spare supervisor it keeps ready, reads exactly one) and answers
on a pipe (one JSON line each); it ends when the runner closes its end of the
socket (:meth:`ForkServers.close`, or the runner dying). The server forks a supervisor per call, in its own session; the
runner watches that supervisor like a spawned one (pid, start time, exit
record), through a pidfd: the supervisor is the server's child, not the
runner's.

The environment's state is the mtime of the venv's python and of its
site-packages directory (a sync that adds, removes or upgrades a package
changes it): a changed environment gets a new server, the old one is closed.
A server found dead when a call asks it is replaced, and the call is sent to
the new one (once); a call the dead server had already forked is found by its
claim in the call directory, so a call is never started twice.

``WORKRUN_LAUNCH``: ``fork`` (default on Linux) or ``spawn`` (today's
launcher: a new interpreter per call; the only mode elsewhere).
"""

from __future__ import annotations

import _socket  # not socket: its enum classes cost every run's early fork server start ~2 ms (issue 33)
import glob
import json
import os
import select
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from workrun.core.errors import UsageError
from workrun.core.paths import real_path
from workrun.runner.env import EnvManager, app_environment, existing_sdk_path
from workrun_sdk import _wire

__all__ = ["LAUNCH_ENV", "REQUEST_MAX", "ForkServers", "ForkServerError", "ForkedProcess", "RequestTooLarge",
           "launch_mode", "prestart", "prestart_fork_server"]

LAUNCH_ENV = "WORKRUN_LAUNCH"
_READY_TIMEOUT = 60.0  # seconds for a server to load (a warm Tool App module may import a lot)
_REPLY_TIMEOUT = 30.0  # seconds for one fork on a loaded machine
_CLAIM_WAIT = 2.0  # seconds to wait for the claim of a call a dying server may have forked


def launch_mode(environ: dict[str, str] | None = None) -> str:
    """Return ``"fork"`` or ``"spawn"`` from ``WORKRUN_LAUNCH`` (default ``fork`` on Linux, R-P1).

    Raises:
        UsageError: the variable holds anything else (exit 2, one line naming it).
    """
    value = (os.environ if environ is None else environ).get(LAUNCH_ENV, "")
    if value not in ("", "fork", "spawn"):
        raise UsageError(f"must be 'fork' or 'spawn', not {value!r}", field=LAUNCH_ENV)
    if not sys.platform.startswith("linux"):
        return "spawn"
    return value or "fork"


class ForkServerError(OSError):
    """Raised when no fork server could start a call (the caller reports it like a failed spawn)."""


class RequestTooLarge(ForkServerError):
    """A call's request (its environment, mostly) is over :data:`REQUEST_MAX` bytes, more than one message of
    the request socket holds: no server was asked; the caller spawns the call instead."""


REQUEST_MAX = 64 * 1024
"""Bytes: the largest request sent to a fork server (a socket message; the default socket buffer holds ~200 KiB)."""


def _running(pid: int, start: str | None) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().decode(errors="replace").rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return False
    return fields[0] != "Z" and (start is None or fields[19] == start)


class _Done:
    """The runner's *done* pipe (one per process, never closed): every supervisor a fork server forks holds its
    write end and writes its call directory there, one line, once the call has ended entirely (exit record
    written, every descendant gone), just before it exits (``workrun_sdk._supervise._call_ended``). A waiter
    goes on at that line instead of waiting for the supervisor's own exit (issue 14). Thread-safe."""

    _KEEP = 4096  # lines kept for calls nobody waits for any more (their supervisor's exit was seen first)

    def __init__(self) -> None:
        self.read_fd, self.write_fd = os.pipe()
        os.set_blocking(self.read_fd, False)
        self._buffer = b""
        self._ended: dict[str, None] = {}  # call directories told, oldest first
        self._lock = threading.Lock()

    def take(self, call_dir: str) -> bool:
        """True (once) when the supervisor of ``call_dir`` has told that the call ended."""
        with self._lock:
            while True:
                try:
                    chunk = os.read(self.read_fd, 65536)
                except BlockingIOError:
                    break
                if not chunk:
                    break
                self._buffer += chunk
            *lines, self._buffer = self._buffer.split(b"\n")
            for line in lines:
                self._ended[line.decode(errors="replace")] = None
            while len(self._ended) > self._KEEP:
                del self._ended[next(iter(self._ended))]
            return self._ended.pop(call_dir, False) is None


_DONE: _Done | None = None
_DONE_LOCK = threading.Lock()


def _done() -> _Done:
    global _DONE
    with _DONE_LOCK:
        if _DONE is None:
            _DONE = _Done()
        return _DONE


class ForkedProcess:
    """A supervisor forked by a fork server: what :func:`workrun.runner.process.wait` needs of a process.

    Attributes:
        pid: the supervisor's pid (leader of the call's session and process group).
        start: its ``/proc`` start time, to tell a reused pid apart.
        call_dir: the call's directory, as its supervisor tells it on the *done* pipe (None: not told).
        told: its supervisor said on the *done* pipe that every process of the call has ended (a pipe no App
            process has: an ``ended`` file alone could be the App's).
    """

    def __init__(self, pid: int, start: str | None, call_dir: str | None = None) -> None:
        self.pid = pid
        self.start = start
        self.call_dir = call_dir
        self._ended = False
        self.told = False

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the call has ended: its supervisor said so on the *done* pipe (it is exiting) or has
        exited; True then (and at once on later calls). False when ``timeout`` seconds passed first."""
        if self._ended:
            return True
        end = None if timeout is None else time.monotonic() + timeout
        try:
            fd = os.pidfd_open(self.pid)
        except OSError:  # gone already (or no pidfd): fall back to watching /proc
            fd = None
        done = _done() if self.call_dir is not None else None
        try:
            if fd is not None and _running(self.pid, self.start):
                poller = select.poll()
                poller.register(fd, select.POLLIN)
                if done is not None:
                    poller.register(done.read_fd, select.POLLIN)
                key = str(self.call_dir)
                ended = os.path.join(key, _wire.ENDED)
                while True:  # a line counts only when the call really ended (not a line written by anyone else)
                    if done is not None and done.take(key) and os.path.lexists(ended):
                        self._ended = self.told = True
                        return True
                    left = 1000 if end is None else max(0, int((end - time.monotonic()) * 1000) + 1)
                    ready = poller.poll(left)
                    if any(r == fd for r, _ in ready):
                        if done is not None:  # its line came before its exit: take it too (keeps none behind)
                            self.told = done.take(key)
                        break
                    if not ready and end is not None and time.monotonic() >= end:
                        return False
            while _running(self.pid, self.start):  # without a pidfd (or a reused pid): poll
                if end is not None and time.monotonic() >= end:
                    return False
                time.sleep(0.01)
        finally:
            if fd is not None:
                os.close(fd)
        if done is not None and not self.told:  # gone before this looked (a quick call on a busy machine): its
            key = str(self.call_dir)             # line is in the pipe all the same
            self.told = done.take(key) and os.path.lexists(os.path.join(key, _wire.ENDED))
        self._ended = True
        return True


class _Server:
    """One fork server process, its request socket and its reply pipe; ``calls``: the kind of calls it serves,
    ``"process"`` or ``"tool"`` (a warm server's is ``"tool"``: see :func:`_key`). Made with ``wait`` (the
    default), it waits for the server's first line (:attr:`ready`); else :meth:`wait_ready` reads it later."""

    def __init__(self, python: str, sdk_dir: Path, env: dict[str, str], cwd: Path, warm: str | None,
                 umask: int = -1, calls: str = "process", wait: bool = True) -> None:
        ours, theirs = _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_SEQPACKET)  # one request per message
        self._req, req_r = ours.detach(), theirs.detach()
        rep_r, rep_w = os.pipe()
        done_w = _done().write_fd
        argv = [python, str(sdk_dir / "workrun_sdk" / "_forkserver.py"), str(req_r), str(rep_w), str(done_w), calls]
        if warm:
            argv.append(warm)
        try:
            self.proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                         pass_fds=(req_r, rep_w, done_w), start_new_session=True, umask=umask)
        except OSError:
            os.close(rep_r)
            os.close(self._req)
            raise
        finally:
            os.close(req_r)
            os.close(rep_w)
        self._rep = rep_r
        self._buffer = b""
        self.lock = threading.Lock()
        self.ready: dict[str, Any] = {}
        if wait:
            try:
                self.ready = self._read(_READY_TIMEOUT)
            except BaseException:  # never up (or interrupted): no server may outlive the wait, nor its descriptors
                self.close(wait=0.5)
                raise

    def wait_ready(self) -> bool:
        """For a server made with ``wait=False``: read its first line now (at most ``_READY_TIMEOUT`` s) into
        :attr:`ready`; True when it says it is ready. Never raises: a server that died or did not answer is not
        ready."""
        if not self.ready:
            try:
                self.ready = self._read(_READY_TIMEOUT)
            except (EOFError, OSError, ForkServerError, ValueError) as exc:
                self.ready = {"error": str(exc) or type(exc).__name__}
        return bool(self.ready.get("ready"))

    def _read(self, timeout: float) -> dict[str, Any]:
        end = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = end - time.monotonic()
            if left <= 0 or not select.select([self._rep], [], [], left)[0]:
                raise ForkServerError("the fork server did not answer in time")
            chunk = os.read(self._rep, 65536)
            if not chunk:
                raise EOFError("the fork server exited")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)

    def fork(self, request: bytes, call_dir: str) -> ForkedProcess:
        """Ask the server to fork a supervisor for one call (``request``: its JSON, one socket message).

        Raises:
            BrokenPipeError: the server is gone and never saw the request.
            EOFError: the server died after the request was sent (it may have forked the call).
            ForkServerError: the server answered with an error or not at all.
        """
        with self.lock:
            if os.write(self._req, request) != len(request):  # one message, whole or not at all (SOCK_SEQPACKET)
                raise ForkServerError("the fork server took part of a request")
            reply = self._read(_REPLY_TIMEOUT)
        if "pid" not in reply:
            raise ForkServerError(f"the fork server could not fork the call: {reply.get('error')}")
        return ForkedProcess(int(reply["pid"]), reply.get("start"), call_dir)

    def hang_up(self) -> None:
        """Close the request socket and the reply pipe (once): the server exits when it sees the socket closed.
        No request can be sent after this."""
        fds, self._req, self._rep = (self._req, self._rep), -1, -1  # (not under the lock: a request may be waiting)
        for fd in fds:
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass

    def close(self, wait: float = 2.0) -> None:
        """:meth:`hang_up`, then reap the server; kill it if it lingers."""
        self.hang_up()
        try:
            self.proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


_STAMPED: dict[str, list[str]] = {}


def _env_state(python: str) -> tuple[int, ...]:
    """mtimes (ns) of the venv's python and site-packages: a sync that changes packages changes them."""
    paths = _STAMPED.get(python)
    if paths is None:
        venv = Path(python).parent.parent
        paths = [python, str(venv / "pyvenv.cfg"), *sorted(glob.glob(str(venv / "lib" / "python*" / "site-packages")))]
        _STAMPED[python] = paths
    stamps = []
    for path in paths:
        try:
            stamps.append(os.stat(path).st_mtime_ns)
        except OSError:
            stamps.append(0)
    return tuple(stamps)


def _key(python: str, sdk_dir: Path, env: dict[str, str], warm: tuple[str | None, str] | None,
         calls: str = "process") -> tuple[tuple[Any, ...], tuple[Any, ...], dict[str, str]]:
    """``(ident, state, server environment)`` of the server a call with this environment uses (see module doc):
    ``ident`` = (python, SDK directory, warm Tool App, kind of calls: ``"process"`` or ``"tool"``)."""
    server_env = {k: v for k, v in env.items() if k != "WORKRUN_CALL_DIR"}
    ident = (python, str(sdk_dir), warm, "tool" if warm else calls)
    return ident, (_env_state(python), tuple(sorted(server_env.items()))), server_env


_EARLY: dict[tuple[Any, ...], _Server] = {}
_EARLY_LOCK = threading.Lock()


def prestart(python: str, sdk_dir: Path, env: dict[str, str], cwd: Path) -> None:
    """Start the plain fork server that calls with environment ``env`` will use, ahead of the first call.

    Returns once the server's process is started (a fork and an exec: ~2 ms), without waiting for it to be up:
    ``workrun run`` calls this first thing, and the server starts (an interpreter and the SDK, ~40 ms) on the
    other core while the command loads the rest of itself (issue 14, issue 33). The first
    :class:`ForkServers` that needs a server of this key takes this one over and only then reads whether it
    came up; one nobody takes is ended by :meth:`ForkServers.close` or when this process exits (its request
    socket closes). Never raises: a server that does not start is simply not there, and the call starts its
    own.
    """
    ident, state, server_env = _key(python, sdk_dir, env, None)
    with _EARLY_LOCK:
        if (ident, state) in _EARLY:
            return
        try:
            # the umask a runner has once its data dir is open (workrun.core.paths.private_umask), which this
            # process may not have set yet: calls forked from it get the same one as from any other server
            _EARLY[(ident, state)] = _Server(python, sdk_dir, server_env, cwd, None, umask=0o077, wait=False)
        except (OSError, ValueError):
            pass


def _take_early(ident: tuple[Any, ...], state: tuple[Any, ...]) -> _Server | None:
    """The server :func:`prestart` started for this key, once it is up (None when there is none or it failed)."""
    with _EARLY_LOCK:
        server = _EARLY.pop((ident, state), None)
    if server is None:
        return None
    if not server.wait_ready() or server.proc.poll() is not None:
        server.close(wait=0.5)
        return None
    return server


def _close_early() -> None:
    with _EARLY_LOCK:
        left = list(_EARLY.values())
        _EARLY.clear()
    for server in left:
        server.close(wait=0.5)


class ForkServers:
    """The runner's fork servers, one per key; thread-safe; :meth:`close` ends them all (R-P2)."""

    def __init__(self) -> None:
        self._servers: dict[tuple[Any, ...], tuple[tuple[Any, ...], _Server]] = {}
        self._cold: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        self._lock = threading.Lock()
        self._closed = False

    def _server(self, ident: tuple[Any, ...], state: tuple[Any, ...], python: str, sdk_dir: Path,
                env: dict[str, str], cwd: Path, warm: str | None) -> _Server:
        """The live server for ``ident`` in environment ``state``; a dead or outdated one is replaced."""
        with self._lock:
            if self._closed:
                raise ForkServerError("the runner is shutting down")
            if warm is not None and self._cold.get(ident) == state:  # its module failed to load: plain server
                warm, ident = None, (*ident[:2], None, "tool")
            known = self._servers.get(ident)
            if warm is not None:  # the same Tool App with another fingerprint: that server is outdated
                for other in [k for k in self._servers if k[:2] == ident[:2] and k[2] and k[2][0] == warm
                              and k != ident]:
                    self._servers.pop(other)[1].close(wait=0.5)
            if known is not None:
                if known[0] == state and known[1].proc.poll() is None:
                    return known[1]
                del self._servers[ident]
                known[1].close(wait=0.5)
            early = _take_early(ident, state) if warm is None else None
            if early is not None:
                self._servers[ident] = (state, early)
                return early
            server = _Server(python, sdk_dir, env, cwd, warm, calls=ident[3])
            if not server.ready.get("ready"):
                server.close(wait=0.5)
                if warm is None:
                    raise ForkServerError(f"the fork server did not start: {server.ready}")
                self._cold[ident] = state
            else:
                self._servers[ident] = (state, server)
                return server
        # the warm module failed to load in the server: calls load it themselves (and report why)
        return self._server((*ident[:2], None, "tool"), state, python, sdk_dir, env, cwd, None)

    def start(self, python: str, sdk_dir: Path, cwd: Path, entry: Path, call_dir: Path, env: dict[str, str],
              warm: tuple[str, str] | None = None, *, tools: bool = False) -> ForkedProcess:
        """Start one call through the server of its environment; retried once on a new server.

        Args:
            python: the App environment's python; sdk_dir: from ``sdk_path``.
            cwd: the call's working directory (the project); entry: absolute entry path.
            call_dir: the call directory, with ``input.json`` written; env: the call's environment.
            warm: ``(entry, fingerprint digest)`` of a Tool App with ``warm = true``, else None.
            tools: a Tool App call (its server has the tool SDK loaded; calls of other kinds use another).

        Raises:
            ForkServerError: no server could start the call (nothing of the call ran).
            RequestTooLarge: its environment is too large for a request (no server was asked).
        """
        real_entry = real_path(entry)
        warm_entry = (real_entry if os.fspath(entry) == warm[0] else real_path(warm[0])) if warm else None
        ident, state, server_env = _key(python, sdk_dir, env, (warm_entry, warm[1]) if warm else None,
                                        "tool" if tools else "process")
        request = json.dumps({"call_dir": str(call_dir), "cwd": str(cwd), "env": env, "entry": real_entry,
                              "args": []}).encode()
        if len(request) > REQUEST_MAX:
            raise RequestTooLarge(f"the call's request (its environment) is over {REQUEST_MAX} bytes")
        problem: BaseException | None = None
        for _ in range(2):
            try:
                server = self._server(ident, state, python, sdk_dir, server_env, cwd, warm_entry)
            except (EOFError, OSError, ValueError) as exc:  # no server: the request was never sent
                problem = exc
                continue
            try:
                return server.fork(request, str(call_dir))
            except BrokenPipeError as exc:  # the server was dead before our request: nothing was forked
                problem = exc
                self._forget(ident, server)  # dying, maybe not yet reapable: never asked again
            except (EOFError, ForkServerError, OSError, ValueError) as exc:
                problem = exc
                self._forget(ident, server)
                found = _claimed(call_dir)
                if found is not None:  # the server forked it before dying: watch that one
                    return found
        raise ForkServerError(f"no fork server could start the call: {problem}")

    def _forget(self, ident: tuple[Any, ...], server: _Server) -> None:
        """Drop a server that failed a request (the next call starts a new one) and end it."""
        with self._lock:
            known = self._servers.get(ident)
            if known is not None and known[1] is server:
                del self._servers[ident]
        server.close(wait=0.5)

    def hang_up(self) -> None:
        """Tell every server to end now, without waiting for it (:meth:`close` reaps them later): no call starts
        after this. The servers' exits then overlap what the runner still does (issue 33)."""
        with self._lock:
            self._closed = True
            servers = [s for _, s in self._servers.values()]
        for server in servers:
            server.hang_up()

    def close(self) -> None:
        """End every server (each exits when its request socket closes); calls in flight go on."""
        with self._lock:
            self._closed = True
            servers, self._servers = [s for _, s in self._servers.values()], {}
        for server in servers:
            server.close()
        _close_early()


def _claimed(call_dir: Path) -> ForkedProcess | None:
    """The supervisor a dying server may have forked for this call (by its claim), else None."""
    end = time.monotonic() + _CLAIM_WAIT
    claim = call_dir / "claim"
    while time.monotonic() < end:
        try:
            text = claim.read_text()
        except OSError:
            time.sleep(0.02)
            continue
        parts = text.split()
        if len(parts) == 2 and parts[0] == "started" and parts[1].isdigit():
            pid = int(parts[1])
            return ForkedProcess(pid, _wire.start_time(pid), str(call_dir))
        return None
    return None


def prestart_fork_server(data_dir: Path, project: Path) -> None:
    """Start the fork server of ``project``'s environment ahead of its first call (R-P1, issue 14).

    ``workrun run`` calls this first thing, so the server's own start-up (an interpreter and the SDK, ~40 ms)
    runs on the other core while the command loads the rest of itself. Does nothing unless calls start by
    fork, the environment is synced for its current lock and the SDK copy exists: nothing is synced, created
    or checked here (the command does that as always). Returns once the server's process is started, without
    waiting for it to be up (:func:`prestart`); never raises.
    """
    try:
        if launch_mode() != "fork":
            return
        sdk = existing_sdk_path(data_dir)
        python = EnvManager(data_dir).ready_python(project) if sdk is not None else None
        if sdk is None or python is None:
            return
        prestart(python, sdk, app_environment(python, sdk, Path(os.devnull)), Path(project).resolve())
    except Exception:  # ahead-of-time work only: the call starts its own server as before
        return
