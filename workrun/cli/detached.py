"""A dashboard action in a process of its own: ``python -m workrun.cli.detached RESULT -- ARGS…`` (R-U4).

The run actions (``rerun``, ``compensate``, ``stop``) call the use cases of :mod:`workrun.app.runs`
directly; the operator commands (``compensations …``, ``tickets …``, ``app list``) run the CLI's own
command line in this process. Either way the outcome is written to ``RESULT`` as JSON, atomically
(``{"code": exit code, "errors": [error lines], "run_id": new run or null}``): the dashboard reads
it as data and never parses an error line from stderr.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

__all__ = ["main", "write_result"]


def write_result(path: Path, result: dict[str, Any]) -> None:
    """Write ``result`` as JSON to ``path`` atomically (a temporary file renamed over it)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(result), encoding="utf-8")
    os.replace(tmp, path)


def _run_action(args: list[str]) -> dict[str, Any]:
    """Run a run action through :mod:`workrun.app.runs`: ``rerun RUN [--wait]``, ``compensate RUN [--wait]``,
    ``stop RUN``."""
    from workrun.app import runs
    from workrun.core.errors import WorkrunError

    action, run_id, wait = args[0], args[1], "--wait" in args[2:]
    reason = next((a.split("=", 1)[1] for a in args[2:] if a.startswith("--reason=")), None)
    try:
        if action == "rerun":
            done = runs.rerun(run_id, wait=wait)
            return {"code": done.code, "errors": [], "run_id": done.data["run_id"]}
        if action == "compensate":
            done = runs.compensate(run_id, wait=wait, reason=reason)
        else:
            done = runs.stop(run_id, reason=reason)
        return {"code": done.code, "errors": [], "run_id": None}
    except WorkrunError as exc:
        return {"code": exc.exit_code, "errors": exc.lines(), "run_id": None}
    except KeyboardInterrupt:
        return {"code": 130, "errors": ["interrupted"], "run_id": None}


def main(argv: list[str]) -> int:
    """Run the action ``argv`` names (``RESULT -- ARGS…``), write its result, return its exit code."""
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python -m workrun.cli.detached RESULT -- ARGS…", file=sys.stderr)
        return 2
    result_path, args = Path(argv[0]), argv[2:]
    if args[0] in ("rerun", "compensate", "stop") and len(args) >= 2:
        result = _run_action(args)
    else:
        from workrun.cli.entry import run

        errors: list[str] = []
        code = run(args, errors)
        result = {"code": code, "errors": errors, "run_id": None}
    write_result(result_path, result)
    return int(result["code"])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
