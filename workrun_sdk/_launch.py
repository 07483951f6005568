"""Launcher the runner starts instead of the bare entry script: a tiny supervisor.

``python -m workrun_sdk._launch ENTRY`` (the process group leader):

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

import os
import runpy
import signal
import sys
import traceback
from pathlib import Path

from workrun_sdk import _wire


def _exit_code(exc: SystemExit) -> int:
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF if code >= 0 else 1
    print(code, file=sys.stderr)
    return 1


def _run_app(entry: Path, envelope: dict) -> int:
    """In the child: run the App's code like ``python ENTRY`` would; return its exit code."""
    try:
        if envelope.get("kind") == "tool":
            from workrun_sdk import tool as _tool

            _tool._run_tool_call(entry, envelope)
        else:
            runpy.run_path(str(entry), run_name="__main__")
        return 0
    except SystemExit as exc:
        return _exit_code(exc)
    except KeyboardInterrupt:
        traceback.print_exc()
        return 130
    except BaseException:  # the App's own failure: report it like `python entry.py` would
        traceback.print_exc()
        return 1


def main(argv: list[str]) -> int:
    """Supervise one App call; return (or re-raise as a signal) the App's exit status."""
    directory = _wire.call_dir("_launch")
    if not _wire.claim(directory, f"started {os.getpid()}\n"):
        print("workrun: this call was abandoned by the runner before it started", file=sys.stderr)
        return 75
    entry = Path(argv[0]).resolve()
    envelope = _wire.read_envelope(directory / "input.json")
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the App
        sys.argv = [str(entry), *argv[1:]]
        sys.path[0] = str(entry.parent)
        code = _run_app(entry, envelope)
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except Exception:
            pass
        # run atexit handlers and flush like a normal interpreter exit would
        sys.exit(code)
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
        _wire.write_json_atomic(directory / "exit.json", {"v": _wire.VERSION, "exit_code": None, "signal": sig})
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        return 128 + sig
    code = os.waitstatus_to_exitcode(status)
    _wire.write_json_atomic(directory / "exit.json", {"v": _wire.VERSION, "exit_code": code, "signal": None})
    return code


if __name__ == "__main__":
    status = main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)  # the supervisor has nothing to finalise: skip the interpreter's shutdown
