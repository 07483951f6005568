"""Launcher the runner starts instead of the bare entry script.

``python -m workrun_sdk._launch ENTRY [TOOL]`` claims the call directory (so a
call the runner gave up on never starts late), runs ENTRY as ``__main__`` (or,
for a tool call, imports ENTRY and calls the tool named in ``input.json``),
then writes ``exit.json`` with the exit code. The exit record lets a restarted
runner recover the outcome of a call that finished while it was down (R-R3).
A process killed by a signal writes no exit record: its outcome is decided by
the runner that killed it, or is unknown.
"""

from __future__ import annotations

import os
import runpy
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


def main(argv: list[str]) -> int:
    """Run the App entry in this process; return the exit code written to ``exit.json``."""
    directory = _wire.call_dir("_launch")
    if not _wire.claim(directory, f"started {os.getpid()}\n"):
        print("workrun: this call was abandoned by the runner before it started", file=sys.stderr)
        return 75
    entry = Path(argv[0]).resolve()
    sys.argv = [str(entry), *argv[1:]]
    sys.path[0] = str(entry.parent)
    envelope = _wire.read_envelope(directory / "input.json")
    try:
        if envelope.get("kind") == "tool":
            from workrun_sdk import tool as _tool

            _tool._run_tool_call(entry, envelope)
        else:
            runpy.run_path(str(entry), run_name="__main__")
        code = 0
    except SystemExit as exc:
        code = _exit_code(exc)
    except KeyboardInterrupt:
        traceback.print_exc()
        code = 130
    except BaseException:  # the App's own failure: report it like `python entry.py` would
        traceback.print_exc()
        code = 1
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:
        pass
    _wire.write_json_atomic(directory / "exit.json", {"v": _wire.VERSION, "exit_code": code})
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
