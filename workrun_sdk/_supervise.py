"""The supervisor of one App call: the one implementation behind both launchers.

The spawn launcher (``_launch.py``, a fresh interpreter per call) and the fork
server (``_forkserver.py``, one forked process per call) both end up in
:func:`supervise`, in a process that is the leader of its own session and
process group, whose cwd, environment, stdin (``/dev/null``) and
stdout/stderr (the call's files) are already the call's. It:

1. claims the call directory (``claim``: ``started <pid> <start time>``), so a call the
   runner gave up on before it started can never start late;
2. becomes a *child subreaper* (Linux ``prctl(PR_SET_CHILD_SUBREAPER)``):
   a descendant that leaves the process group (``setsid()``, double fork) is
   reparented to the supervisor instead of init, so the call still owns it;
3. forks: the child runs ENTRY as ``__main__`` (or, for a tool call, imports
   ENTRY and calls the tool named in ``input.json``); the parent waits,
   reaping every child that is reparented to it;
4. writes ``exit.json`` with the App's exit code or the signal that ended it
   (R-R3: a restarted runner recovers the outcome from it);
5. ends every descendant still alive (SIGTERM, the grace period, SIGKILL)
   (SPEC §17: a call owns every process it starts), creates ``ended`` (no
   process of the call is left: only then does the runner reuse the call's
   files), tells the runner so on its *done* pipe when a fork server started
   it, then exits the way the App did (same code, or the same signal).

A call whose ``input.json`` cannot be read once claimed never starts its App:
the record says exit code 70 (the reason is on stderr).

SIGTERM to the supervisor (the runner ends the call's process group on
timeout or stop, R-A7) starts step 5 at once: descendants outside the group
get SIGTERM too, and whatever is alive after the grace period gets SIGKILL.
SIGTERM, SIGINT and SIGHUP are held from before the claim, so a call ended just
as it starts still leaves its record: a SIGTERM before step 3 means the App
never runs, and the record says SIGTERM.
The grace period (seconds) comes from ``input.json`` (``grace``, default 5).
SIGINT and SIGHUP are ignored by the supervisor; they reach the App through
the group. Only when the supervisor itself is killed (SIGKILL) is there no
exit record, and the outcome is unknown.
"""

from __future__ import annotations

import _signal as signal  # type: ignore[import-not-found]  # the C module: ``signal`` would import enum, ~8 ms on every spawned call
import os
import sys

from workrun_sdk import _lightjson, _wire

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, NoReturn

__all__ = ["become_subreaper", "enter", "prepare_app", "run_app", "spare_app", "supervise"]

_PR_SET_CHILD_SUBREAPER = 36
_WAKE = (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
_libc: Any = None
_done_fd = -1
"""A fork server's supervisor: the write end of its runner's *done* pipe (non-blocking), else -1. Once the
call has ended entirely (exit record written, every descendant gone) the supervisor writes its call directory
there, a line, and exits: the runner goes on at once instead of waiting for this process's own exit
(issue 14). Never inherited by the App."""


def _call_ended(directory: str) -> None:
    """Every process of the call has ended (after ``exit.json``): create ``ended`` in the call directory (the
    runner reuses the call's files, and believes a *done* line, only then), then tell the runner through
    :data:`_done_fd`. Best effort: without ``ended`` the files are not reused; a runner that is gone, a full
    pipe or a path too long for one atomic write leaves the runner to see this process exit instead."""
    try:
        os.close(os.open(os.path.join(directory, _wire.ENDED), os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600))
    except OSError:
        return
    line = (directory + "\n").encode()
    if _done_fd >= 0 and len(line) <= 4096:  # PIPE_BUF: lines of several supervisors never interleave
        try:
            os.write(_done_fd, line)
        except OSError:
            pass


def _record_and_exit(directory: str, st: int) -> NoReturn:
    """The call ended with wait status ``st`` and no process of it is left: record it, mark it ended, exit as
    it did."""
    _record(directory, st)
    _call_ended(directory)
    _exit_as(st)


def _close_done() -> None:
    """In a process that runs App code: drop the runner's *done* pipe."""
    global _done_fd
    if _done_fd >= 0:
        try:
            os.close(_done_fd)
        except OSError:
            pass
        _done_fd = -1


def _prctl(option: int, arg: int) -> int | None:
    """libc's ``prctl(option, arg, 0, 0, 0)`` through ctypes' C module alone (issue 33: importing ctypes itself,
    with struct, costs ~2 ms of a spawned call or of a fork server's start), its address found once per process
    (a fork server finds it before forking: :func:`workrun_sdk._forkserver._preload`); None where that is not
    possible (then :func:`become_subreaper` uses ctypes)."""
    global _prctl_address
    try:
        import _ctypes

        if _prctl_address is None:
            _prctl_address = _ctypes.dlsym(_ctypes.dlopen(None, 0), "prctl")  # type: ignore[arg-type]  # None: this program
        return int(_ctypes.call_function(_prctl_address, (option, arg, 0, 0, 0)))
    except (ImportError, AttributeError, OSError, TypeError, ValueError):
        return None


_prctl_address: int | None = None


def become_subreaper() -> bool:
    """Make this process the child subreaper of its descendants (Linux); True when it worked.

    The setting is not inherited across ``fork``: every supervisor calls this itself.
    """
    global _libc
    if not sys.platform.startswith("linux"):
        return False
    if _libc is None:
        done = _prctl(_PR_SET_CHILD_SUBREAPER, 1)
        if done is not None:
            return done == 0
    try:
        if _libc is None:
            import ctypes

            _libc = ctypes.CDLL(None, use_errno=True)
        return bool(_libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError, ImportError):
        return False


def _exit_code(exc: SystemExit) -> int:
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF if code >= 0 else 1
    print(code, file=sys.stderr)
    return 1


def _exec_as_main(entry: str) -> None:
    """Run ``entry`` as ``__main__`` like ``python ENTRY`` (what runpy.run_path does, without its imports)."""
    import builtins
    import types

    with open(entry, "rb") as fh:
        code = compile(fh.read(), entry, "exec")
    module = types.ModuleType("__main__")
    module.__dict__.update(__file__=entry, __builtins__=builtins, __cached__=None, __loader__=None,
                           __spec__=None, __package__=None)
    sys.modules["__main__"] = module
    exec(code, module.__dict__)


def _exit_like_python(code: int) -> NoReturn:
    """End the App process as the interpreter would (join non-daemon threads, atexit handlers,
    flush), but skip module teardown, which only costs time in a process about to vanish."""
    try:
        threading = sys.modules.get("threading")
        if threading is not None:
            threading._shutdown()
        import atexit

        atexit._run_exitfuncs()
    except BaseException:
        import traceback

        traceback.print_exc()
        code = code or 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(code)


def run_app(entry: str, envelope: dict[str, Any]) -> int:
    """In the App process: run the App's code like ``python ENTRY`` would; return its exit code."""
    try:
        if envelope.get("kind") == "tool":
            from workrun_sdk import tool as _tool

            _tool._run_tool_call(entry, envelope)
        else:
            _exec_as_main(entry)
        return 0
    except SystemExit as exc:
        return _exit_code(exc)
    except KeyboardInterrupt:
        import traceback

        traceback.print_exc()
        return 130
    except BaseException:  # the App's own failure: report it like `python entry.py` would
        import traceback

        traceback.print_exc()
        return 1


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass


def _descendants() -> list[tuple[int, int]]:
    """``[(pid, pgid)]`` of every live descendant of this process, from ``/proc`` (Linux)."""
    me = os.getpid()
    children: dict[int, list[tuple[int, int]]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] == b"Z":
            continue
        children.setdefault(int(fields[1]), []).append((int(name), int(fields[2])))
    found: list[tuple[int, int]] = []
    todo = [me]
    while todo:
        for pid, pgid in children.get(todo.pop(), ()):
            found.append((pid, pgid))
            todo.append(pid)
    return found


def _reap(app: int, status: list[int]) -> bool:
    """Reap every exited child (the App and any reparented orphan); False when no child is left."""
    while True:
        try:
            pid, st = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return False
        if pid == 0:
            return True
        if pid == app:
            status.append(st)


def _end_all(app: int, status: list[int], grace: float, *, skip_group: bool, on_app_end: Any) -> None:
    """End every descendant: SIGTERM, then SIGKILL after ``grace`` seconds; return when none is left.

    ``skip_group``: members of our process group already got SIGTERM from the runner (``killpg``).
    """
    import time

    group = os.getpgid(0)
    kill_at = time.monotonic() + grace
    termed: set[int] = set()
    while True:
        had = bool(status)
        children = _reap(app, status)
        if status and not had:
            on_app_end(status[0])
        if not children:
            return
        late = time.monotonic() >= kill_at
        for pid, pgid in _descendants():
            if late:
                sig = signal.SIGKILL
            elif pid in termed:
                continue
            else:
                termed.add(pid)
                if skip_group and pgid == group:
                    continue
                sig = signal.SIGTERM
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        wait = 0.05 if late else min(0.05, max(0.0, kill_at - time.monotonic()))
        signal.sigtimedwait(_WAKE, wait)


def supervise(entry: str, args: list[str], spare: tuple[int, int] | None = None,
              started: str | None = None, taken: int = -1) -> NoReturn:
    """Supervise one App call in this process (see the module docstring); never returns.

    Args:
        entry: absolute path of the App's entry script (or Tool App module).
        args: the App's ``sys.argv[1:]``.
        spare: ``(pid, fd)`` of an App process forked ahead of the call by :func:`spare_app` (a fork
            server's spare supervisor) and sent the call's request already (:func:`prepare_app`): it is told
            to go once the call is claimed, instead of a new fork; a spare that cannot go is ended and the App
            forked as usual.
        started: this process's ``/proc`` start time when the caller read it already (a spare did, for its
            answer to the runner); else it is read here.
        taken: a spare's end of its socket pair with the fork server (-1: none), told ``t`` (the spare took a
            call) and closed once the App is under way: only then does the server fork the next spare, so that
            fork and the new spare's own start run beside the App, not beside the claim and the App's start
            on a machine's few cores (issue 33). A spare that exits before (the call was fenced or ended, or
            cannot start) closes it untold: the server reaps it as one that took no call.
    """
    # Held from before the claim: a SIGTERM (the runner ending the call just after it started) must never
    # end the supervisor between its claim and its exit record (that would read as an unknown outcome).
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, _WAKE) if hasattr(signal, "sigtimedwait") else None
    directory = _wire.call_dir("_launch")
    me = os.getpid()  # the claim names this supervisor: pid and start time (a reused pid is told apart, R-R3)
    if not _wire.claim(directory, f"started {me} {started or _wire.start_time(me) or '-'}\n"):
        _drop(spare)
        print("workrun: this call was abandoned by the runner before it started", file=sys.stderr)
        _flush()
        os._exit(75)
    try:
        envelope = _wire.read_envelope(os.path.join(directory, "input.json"))
        grace = float(envelope.get("grace") or 5.0)
    except Exception as exc:  # claimed, but no App can run: a record says so (exit 70), as in both launchers
        _drop(spare)
        print(f"workrun: the call cannot start: {exc}", file=sys.stderr)
        _flush()
        _record_and_exit(directory, 70 << 8)  # a wait status: exited 70
    if old_mask is None:  # macOS and others: wait for the App alone (no subreaper there)
        _supervise_plain(directory, entry, args, envelope)
    become_subreaper()
    if signal.SIGTERM in signal.sigpending():  # ended before the App began: it never runs
        _drop(spare)
        print("workrun: the call was ended before the App started", file=sys.stderr)
        _record_and_exit(directory, signal.SIGTERM)  # a wait status: ended by SIGTERM
    _flush()
    app = _hand_over(spare)
    if taken >= 0:  # before any fork here: no App process keeps it
        write_all(taken, b"t")
    if app is None:
        app = os.fork()
    if app == 0:  # the App
        _close_done()
        signal.pthread_sigmask(signal.SIG_SETMASK, set(old_mask) - set(_WAKE))  # the App gets them as usual
        sys.argv = [entry, *args]
        sys.path[0] = os.path.dirname(entry)
        call = sys.modules.get("workrun_sdk._call")
        if call is not None:  # loaded already (a fork server's call): the App need not read input.json again
            call._cache[directory] = envelope
        _exit_like_python(run_app(entry, envelope))
    if signal.SIGTERM in signal.sigpending():  # the group's SIGTERM came after the check above: if it came before
        try:  # the fork, a forked child has no pending signals and never got it (it would be SIGKILLed after the
            os.kill(app, signal.SIGTERM)  # grace, not ended by the stop's SIGTERM); a second one merges with it
        except OSError:
            pass
    status: list[int] = []
    recorded: list[int] = []

    def record(st: int) -> None:
        recorded.append(st)
        _record(directory, st)

    terminate = False
    while not status:
        if not _reap(app, status):
            break
        if status:
            break
        info = signal.sigtimedwait(_WAKE, 3600.0)
        if info is not None and info.si_signo == signal.SIGTERM:
            terminate = True
            break
    if status:
        record(status[0])
    # the App ended (or the call is being ended): nothing it started may outlive the call
    _end_all(app, status, grace, skip_group=terminate, on_app_end=record)
    if not recorded:  # cannot happen (the App is our child), but never exit without a record
        raise SystemExit("workrun: the App process vanished without a status")
    _call_ended(directory)
    _exit_as(recorded[0])


def enter(cwd: str, env: dict[str, str], call_dir: str, *, truncate: bool = True) -> None:
    """Take the call's place in this (forked) process: cwd, exactly the call's environment (only the names that
    differ are changed), stdin from ``/dev/null`` and stdout/stderr to the call's files (opened as the spawn
    launcher's are: write-only from offset 0, no append; ``truncate`` empties them first — the supervisor does,
    a spare's App process, which opens them after its supervisor, does not).

    Raises:
        OSError: a directory or file cannot be used.
    """
    os.chdir(cwd)
    for name in [n for n in os.environ if n not in env]:
        del os.environ[name]
    for name, value in env.items():
        if os.environ.get(name) != value:
            os.environ[name] = value
    null = os.open(os.devnull, os.O_RDONLY)
    # the supervisor writes nothing to them once it has handed the call to its App (it flushes first), so the
    # App's own descriptions of the files start where the spawn launcher's shared ones would: at 0
    if truncate:
        out = _wire.open_empty(os.path.join(call_dir, "stdout"))
        err = _wire.open_empty(os.path.join(call_dir, "stderr"))
    else:
        out = os.open(os.path.join(call_dir, "stdout"), os.O_WRONLY | os.O_CREAT, 0o600)
        err = os.open(os.path.join(call_dir, "stderr"), os.O_WRONLY | os.O_CREAT, 0o600)
    for fd, target in ((null, 0), (out, 1), (err, 2)):
        os.dup2(fd, target)
        os.close(fd)


def fork_waiting(child: Callable[[int], object]) -> tuple[int, int] | None:
    """Fork a process that waits on a pipe for what it is to do: ``child(read end)`` runs in it and never
    returns. Returns ``(pid, write end)`` here, or None when no pipe or process can be made (nothing is left
    open then). Used for a fork server's spare supervisor and for that spare's App process."""
    try:
        r, w = os.pipe()
    except OSError:
        return None
    _flush()
    try:
        pid = os.fork()
    except OSError:
        os.close(r)
        os.close(w)
        return None
    if pid == 0:
        try:
            os.close(w)
            child(r)
        finally:
            os._exit(70)  # child() never returns or raises on: never run on in a copy of the parent
    os.close(r)
    return pid, w


def write_all(fd: int, data: bytes) -> bool:
    """Write ``data`` to the pipe ``fd`` and close it; False when the reader is gone (nothing more is sent)."""
    try:
        _wire.write_fully(fd, data)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def spare_app(close: tuple[int, ...] = ()) -> tuple[int, int] | None:
    """In a spare supervisor (a fork server's, forked ahead of its call, signals held): fork its App process
    now, off the call's path. The App runs nothing of the App until its supervisor has claimed the call: it
    takes the call's place as soon as :func:`prepare_app` sends it the request (in parallel with the claim,
    issue 14), then waits for :func:`supervise` to tell it to go (it exits when the pipe closes first).
    ``close``: descriptors of the supervisor's the App must not keep. Returns ``(pid, fd)`` or None when it
    cannot be forked (the App is then forked at the call, as usual)."""

    def app(r: int) -> None:
        for fd in close:
            os.close(fd)
        _close_done()
        _app_waits(r)

    return fork_waiting(app)


def prepare_app(spare: tuple[int, int] | None, request: bytes) -> tuple[int, int] | None:
    """Send the spare App process the call's request (the runner's message, as the spare supervisor read it),
    so it takes the call's place while its supervisor claims the call. Returns ``spare``, or None when the App
    process is gone (it is ended and reaped: the App is forked at the call, as usual)."""
    if spare is None:
        return None
    try:
        _wire.write_fully(spare[1], len(request).to_bytes(8, "big") + request)
        return spare
    except OSError:
        _drop(spare)
        return None


def _read_exactly(fd: int, size: int) -> bytes:
    """``size`` bytes from the pipe ``fd``, fewer when it closes first."""
    chunks: list[bytes] = []
    while size > 0:
        try:
            chunk = os.read(fd, min(size, 1 << 16))
        except InterruptedError:
            continue
        except OSError:
            chunk = b""
        if not chunk:
            break
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def _app_waits(fd: int) -> NoReturn:
    """The App process of a spare: take the call's place when the request comes, run the App when told to go
    (see :func:`spare_app`)."""
    head = _read_exactly(fd, 8)
    if len(head) < 8:  # never used
        os._exit(0)
    try:
        request = _lightjson.loads(_read_exactly(fd, int.from_bytes(head, "big")).decode("utf-8"))
        call_dir = request["call_dir"]
        enter(request["cwd"], request["env"], call_dir, truncate=False)
        envelope = _wire.read_envelope(os.path.join(call_dir, "input.json"))
    except BaseException:  # its supervisor finds the same problem and never says go
        os._exit(70)
    if _read_exactly(fd, 1) != b"g":  # not claimed (fenced, ended before it began, cannot start)
        os._exit(0)
    os.close(fd)
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    signal.pthread_sigmask(signal.SIG_SETMASK, set(mask) - set(_WAKE))  # the App gets them as usual
    entry = request["entry"]
    sys.argv = [entry, *(request.get("args") or [])]
    sys.path[0] = os.path.dirname(entry)
    cache = sys.modules.get("workrun_sdk._call")
    if cache is not None:
        cache._cache[call_dir] = envelope
    _exit_like_python(run_app(entry, envelope))


def _hand_over(spare: tuple[int, int] | None) -> int | None:
    """Tell the prepared spare App process to go; its pid, or None (no spare, or it cannot go: it is ended)."""
    if spare is None:
        return None
    pid, fd = spare
    if write_all(fd, b"g"):
        return pid
    _drop((pid, -1))  # it died meanwhile: end what is left of it, fork the App as usual
    return None


def _drop(spare: tuple[int, int] | None) -> None:
    """End an unused spare App process (it ran nothing of the App) and reap it."""
    if spare is None:
        return
    pid, fd = spare
    if fd >= 0:
        os.close(fd)
    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except (OSError, ChildProcessError):
        pass


def _record(directory: str, st: int) -> None:
    if os.WIFSIGNALED(st):
        data = {"v": _wire.VERSION, "exit_code": None, "signal": os.WTERMSIG(st)}
    else:
        data = {"v": _wire.VERSION, "exit_code": os.waitstatus_to_exitcode(st), "signal": None}
    _wire.write_json_atomic(os.path.join(directory, "exit.json"), data)


def _exit_as(st: int) -> NoReturn:
    _flush()
    if os.WIFSIGNALED(st):
        _die_by(os.WTERMSIG(st))
        os._exit(128 + os.WTERMSIG(st))
    os._exit(os.waitstatus_to_exitcode(st))


def _supervise_plain(directory: str, entry: str, args: list[str], envelope: dict[str, Any]) -> NoReturn:
    """Where the platform has no ``sigtimedwait`` (not Linux): fork the App, ignore SIGTERM/SIGINT/SIGHUP
    (they reach the App through the group), wait, record, exit the same way. No subreaper."""
    _flush()
    app = os.fork()
    if app == 0:
        sys.argv = [entry, *args]
        sys.path[0] = os.path.dirname(entry)
        _exit_like_python(run_app(entry, envelope))
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    while True:
        try:
            _, st = os.waitpid(app, 0)
            break
        except InterruptedError:
            continue
    _record_and_exit(directory, st)


def _die_by(sig: int) -> None:
    """End this process by signal ``sig`` (so a parent's ``waitpid`` sees what the App got), without a
    core dump of the supervisor. SIGKILL cannot be reset to its default (EINVAL): it is sent as is.
    Returns only when the signal did not end the process."""
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    except (ImportError, OSError, ValueError):
        pass
    try:
        if sig != signal.SIGKILL:
            signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
        os.kill(os.getpid(), sig)
    except (OSError, ValueError):  # not a signal this process can die of (e.g. SIGSTOP): exit 128+N
        pass
