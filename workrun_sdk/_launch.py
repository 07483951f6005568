"""Launcher the runner starts instead of the bare entry script: a tiny supervisor.

``python <sdk>/workrun_sdk/_launch.py ENTRY`` (the process group leader; run as a
script, not with ``-m``, which would import runpy: ~9 ms on every call):

1. claims the call directory (``claim``: ``started <pid>``), so a call the
   runner gave up on before it started can never start late;
2. forks: the child runs ENTRY as ``__main__`` (or, for a tool call, imports
   ENTRY and calls the tool named in ``input.json``); the parent only waits;
3. writes ``exit.json`` with the child's exit code or the signal that ended it,
   then exits the same way (same code, or re-raising the same signal), so the
   runner's own ``waitpid`` sees what the App did.

The exit record lets a restarted runner recover the outcome of a call that
finished while it was down (R-R3) even when the App ended with ``os._exit``,
a crash or a signal. Only when the supervisor itself is killed (SIGKILL of the
whole group) is there no record, and the outcome is unknown. The supervisor
ignores SIGTERM/SIGINT/SIGHUP: those reach the App through the process group,
and the supervisor stays to record how it ended.
"""

from __future__ import annotations

import _signal as signal  # type: ignore[import-not-found]  # the C module: ``signal`` would import enum, ~8 ms on every call
import os
import sys

if __name__ == "__main__" and sys.path and os.path.basename(sys.path[0]) == "workrun_sdk":
    del sys.path[0]  # run as a script: its own folder must not shadow anything
from workrun_sdk import _wire  # noqa: E402

# Light imports only: this runs before every App call (traceback, runpy are imported when needed).


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


def _exit_like_python(code: int) -> None:
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


def _run_app(entry: str, envelope: dict) -> int:
    """In the child: run the App's code like ``python ENTRY`` would; return its exit code."""
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


def main(argv: list[str]) -> int:
    """Supervise one App call; return (or re-raise as a signal) the App's exit status."""
    directory = _wire.call_dir("_launch")
    if not _wire.claim(directory, f"started {os.getpid()}\n"):
        print("workrun: this call was abandoned by the runner before it started", file=sys.stderr)
        return 75
    entry = os.path.realpath(argv[0])
    envelope = _wire.read_envelope(os.path.join(directory, "input.json"))
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the App
        sys.argv = [entry, *argv[1:]]
        sys.path[0] = os.path.dirname(entry)
        code = _run_app(entry, envelope)
        _exit_like_python(code)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        _wire.write_json_atomic(os.path.join(directory, "exit.json"),
                                {"v": _wire.VERSION, "exit_code": None, "signal": sig})
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        return 128 + sig
    code = os.waitstatus_to_exitcode(status)
    _wire.write_json_atomic(os.path.join(directory, "exit.json"),
                            {"v": _wire.VERSION, "exit_code": code, "signal": None})
    return code


if __name__ == "__main__":
    status = main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)  # the supervisor has nothing to finalise: skip the interpreter's shutdown
