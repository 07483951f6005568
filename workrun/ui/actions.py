"""Dashboard actions (R-U4): each one runs in a process of its own (:mod:`workrun.cli.detached`).

The run actions call the use cases of :mod:`workrun.app.runs` (what ``workrun.api`` and the CLI call);
the operator commands run the CLI's own command line. Their checks, refusals (exit 2), the
scheduler lock (exit 3, naming the holder), audit rows and resume-first behaviour are exactly the
CLI's, with nothing re-implemented here; a scheduling action runs in its own process, so the
dashboard stays responsive and a crash of one never takes the server down. The audit's actor comes
through ``WORKRUN_ACTOR=ui:<OS user>``.

The child writes its outcome as data (``{"code", "errors", "run_id"}``) to a result file; the
dashboard reads that, never its stderr. A scheduling action is watched only until it is decided: it
exited (its code says done, refused or busy), or it took the scheduler lock (its pid is in the
lock's holder note) and runs on in the background while the pages follow it live.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from workrun.core.lock import SchedulerLock
from workrun.core.structs import struct
from workrun.repair.operator import actor

__all__ = ["ActionResult", "run_action", "ui_actor"]

DECIDE_TIMEOUT = 60.0  # seconds to wait for a command to exit or take the lock (a loaded machine is slow)


@struct(frozen=True)
class ActionResult:
    """What became of a dashboard action.

    Attributes:
        state: ``done`` (exited 0), ``ended`` (exited 1 or 130: ran, did not end well), ``refused`` (exit 2),
            ``busy`` (exit 3: another scheduler), ``running`` (took the lock, goes on in the background),
            ``error`` (anything else).
        code: the exit code (None while running).
        line: the error lines the action reported, as data (joined by a space; "" if none).
        started_at: epoch seconds just before the command was started.
        run_id: the new run of a ``rerun`` that ended (None otherwise).
    """

    state: str
    code: int | None
    line: str
    started_at: float
    run_id: str | None = None


def ui_actor() -> str:
    """The audit actor of dashboard actions: ``ui:<OS user>`` (R-U4)."""
    return f"ui:{actor()}"


_children: list[subprocess.Popen[bytes]] = []


def _reap(proc: subprocess.Popen[bytes], result: Path) -> None:
    proc.wait()
    result.unlink(missing_ok=True)


def _read_result(path: Path) -> dict[str, object] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def run_action(data_dir: Path, args: list[str], *, scheduling: bool, timeout: float = DECIDE_TIMEOUT) -> ActionResult:
    """Run the action ``workrun ARGS…`` for the dashboard in a process of its own and report how it was decided.

    Args:
        data_dir: the data directory the dashboard shows (passed as ``WORKRUN_HOME``).
        args: the command line after ``workrun`` (``rerun|compensate|stop RUN`` run through the use cases).
        scheduling: the action takes the scheduler lock: return as soon as it holds it (``running``).
        timeout: seconds to wait for a decision; after that the action goes on in the background.

    Returns:
        An :class:`ActionResult` built from the child's result file (its exit code and error lines as data).
    """
    env = {**os.environ, "WORKRUN_HOME": str(data_dir), "WORKRUN_ACTOR": ui_actor(), "NO_COLOR": "1"}
    env.pop("WORKRUN_FAULT", None)
    log_dir = data_dir / "ui-actions"
    log_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix="action-", suffix=".json", dir=log_dir)
    os.close(fd)
    result = Path(name)
    result.unlink()  # the child writes it (atomically) when it ends
    started = time.time()
    proc = subprocess.Popen([sys.executable, "-m", "workrun.cli.detached", str(result), "--", *args],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                            start_new_session=True)
    lock = SchedulerLock(data_dir)
    deadline = time.monotonic() + timeout
    code = None
    while time.monotonic() < deadline:
        code = proc.poll()
        if code is not None:
            break
        if scheduling and lock.holder().get("pid") == proc.pid:
            break
        time.sleep(0.05)
    if code is None:
        _children.append(proc)
        threading.Thread(target=_reap, args=(proc, result), daemon=True).start()  # no zombie when it ends
        return ActionResult("running", None, "", started)
    data = _read_result(result) or {}
    result.unlink(missing_ok=True)
    errors = data.get("errors")
    lines = [str(x) for x in errors] if isinstance(errors, list) else []
    if not data:
        lines = [f"the action ended without a result (exit {code})"]
    state = {0: "done", 1: "ended", 130: "ended", 2: "refused", 3: "busy", 4: "ended"}.get(code, "error")
    run_id = data.get("run_id")
    return ActionResult(state, code, " ".join(lines), started, run_id if isinstance(run_id, str) else None)
