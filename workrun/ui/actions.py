"""Dashboard actions (R-U4): each one runs the CLI's own command in a subprocess.

Why a subprocess: the command *is* the rule book. Its checks, refusals (exit 2, one line), the
scheduler lock (exit 3, one line naming the holder), its audit rows and its resume-first behaviour
are exactly the CLI's, with nothing re-implemented here; a scheduling command runs in its own
process, so the dashboard stays responsive and a crash of one never takes the server down. The
audit's actor comes through ``WORKRUN_ACTOR=ui:<OS user>``.

A scheduling command is watched only until it is decided: it exited (its code says done, refused
or busy), or it took the scheduler lock (its pid is in the lock's holder note) and runs on in the
background while the pages follow it live.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from workrun.lock import SchedulerLock
from workrun.operator import actor

__all__ = ["ActionResult", "run_action", "ui_actor"]

DECIDE_TIMEOUT = 60.0  # seconds to wait for a command to exit or take the lock (a loaded machine is slow)


@dataclass(frozen=True)
class ActionResult:
    """What became of a dashboard action.

    Attributes:
        state: ``done`` (exited 0), ``ended`` (exited 1 or 130: ran, did not end well), ``refused`` (exit 2),
            ``busy`` (exit 3: another scheduler), ``running`` (took the lock, goes on in the background),
            ``error`` (anything else).
        code: the exit code (None while running).
        line: the command's last ``error: …`` line on stderr ("" if none).
        started_at: epoch seconds just before the command was started.
    """

    state: str
    code: int | None
    line: str
    started_at: float


def ui_actor() -> str:
    """The audit actor of dashboard actions: ``ui:<OS user>`` (R-U4)."""
    return f"ui:{actor()}"


_children: list[subprocess.Popen[bytes]] = []


def _reap(proc: subprocess.Popen[bytes], errfile: Path) -> None:
    proc.wait()
    errfile.unlink(missing_ok=True)


def _last_error(path: Path) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    errors = [ln for ln in lines if ln.startswith("error: ")]
    return (errors[-1][len("error: "):] if errors else (lines[-1] if lines else "")).strip()


def run_action(data_dir: Path, args: list[str], *, scheduling: bool, timeout: float = DECIDE_TIMEOUT) -> ActionResult:
    """Run ``workrun ARGS…`` for the dashboard and report how it was decided.

    Args:
        data_dir: the data directory the dashboard shows (passed as ``WORKRUN_HOME``).
        args: the command line after ``workrun``.
        scheduling: the command takes the scheduler lock: return as soon as it holds it (``running``).
        timeout: seconds to wait for a decision; after that the command goes on in the background.

    Returns:
        An :class:`ActionResult`.
    """
    env = {**os.environ, "WORKRUN_HOME": str(data_dir), "WORKRUN_ACTOR": ui_actor(), "NO_COLOR": "1"}
    env.pop("WORKRUN_FAULT", None)
    log_dir = data_dir / "ui-actions"
    log_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix="action-", suffix=".stderr", dir=log_dir)
    errfile = Path(name)
    started = time.time()
    with os.fdopen(fd, "wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "workrun", *args], stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=err, env=env, start_new_session=True)
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
        threading.Thread(target=_reap, args=(proc, errfile), daemon=True).start()  # no zombie when it ends
        return ActionResult("running", None, "", started)
    line = _last_error(errfile)
    errfile.unlink(missing_ok=True)
    state = {0: "done", 1: "ended", 130: "ended", 2: "refused", 3: "busy", 4: "ended"}.get(code, "error")
    return ActionResult(state, code, line, started)
