"""The runner's side of the call-directory file protocol (``workrun_sdk/_wire.py`` describes the files).

Reading what a call left (result, resources, dependencies, output tails, the
launcher's exit record, the claim) and fencing a call that must never start.
Every reader here tolerates missing or broken files.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workrun.runner.base import Collected, Outcome
from workrun_sdk import _wire

__all__ = ["CAPTURE_BYTES", "RESULT_LIMIT_BYTES", "Claim", "collect", "fence", "read_claim", "read_exit",
           "write_input"]

CAPTURE_BYTES = 64 * 1024
RESULT_LIMIT_BYTES = 1024 * 1024


@dataclass(frozen=True)
class Claim:
    """The ``claim`` file: ``started`` by the launcher (with its ``pid``) or ``abandoned`` by recovery."""

    started: bool
    pid: int | None = None


def read_claim(call_dir: Path) -> Claim | None:
    """The call directory's claim, or None when nobody claimed it yet (or it cannot be read)."""
    try:
        text = (call_dir / "claim").read_text()
    except OSError:
        return None
    words = text.split()
    if not words or words[0] != "started":
        return Claim(started=False)
    try:
        return Claim(started=True, pid=int(words[1]))
    except (IndexError, ValueError):
        return Claim(started=True)


def fence(call_dir: Path) -> bool:
    """Claim the directory as abandoned; True when this call won (the launcher will then refuse to start)."""
    return bool(_wire.claim(call_dir, "abandoned\n"))


def write_input(call_dir: Path, envelope: dict[str, Any]) -> None:
    """Write ``input.json`` (version-1 envelope) atomically."""
    _wire.write_json_atomic(call_dir / "input.json", {"v": _wire.VERSION, **envelope})


def read_exit(call_dir: Path) -> Outcome | None:
    """The launcher's exit record (``exit.json``) as an Outcome (exit code or signal), or None when there is none."""
    try:
        data = json.loads((call_dir / "exit.json").read_text())
        code, sig = data.get("exit_code"), data.get("signal")
        if code is None and sig is None:
            return None
        return Outcome(exit_code=None if code is None else int(code), signal=None if sig is None else int(sig))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _tail(path: Path) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - CAPTURE_BYTES))
            return fh.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def collect(call_dir: Path) -> Collected:
    """Read result, resources, dependencies and output tails from a finished call's directory (never raises).

    A result over 1 MiB (``RESULT_LIMIT_BYTES``, UTF-8 bytes) or not a version-1 envelope sets ``error`` (R-A3).
    """
    out = Collected(stdout_tail=_tail(call_dir / "stdout"), stderr_tail=_tail(call_dir / "stderr"))
    result_file = call_dir / "result.json"
    if result_file.exists():
        size = result_file.stat().st_size
        if size > RESULT_LIMIT_BYTES + 64:
            out.error = f"result is {size} bytes, over the 1 MiB limit ({RESULT_LIMIT_BYTES} bytes)"
        else:
            try:
                data = json.loads(result_file.read_text(encoding="utf-8"))
                if not isinstance(data, dict) or data.get("v") != _wire.VERSION or "result" not in data:
                    out.error = "result.json: not a version-1 result envelope"
                else:
                    out.result = data["result"]
                    if len(json.dumps(out.result, ensure_ascii=False).encode("utf-8")) > RESULT_LIMIT_BYTES:
                        out.error = f"result is over the 1 MiB limit ({RESULT_LIMIT_BYTES} bytes)"
                        out.result = None
            except (ValueError, UnicodeDecodeError) as exc:
                out.error = f"result.json: not JSON ({exc})"
    dep_file = call_dir / "dependencies.json"
    if dep_file.exists():
        try:
            data = json.loads(dep_file.read_text(encoding="utf-8"))
            out.depends_on = [d for d in data.get("depends_on", []) if isinstance(d, str)]
        except (ValueError, OSError, AttributeError):
            out.error = out.error or "dependencies.json: not JSON"
    res_file = call_dir / "resources.json"
    if res_file.exists():
        try:
            data = json.loads(res_file.read_text(encoding="utf-8"))
            out.resources = [r for r in data.get("resources", []) if isinstance(r, dict)]
        except (ValueError, OSError, AttributeError):
            out.error = out.error or "resources.json: not JSON"
    return out
