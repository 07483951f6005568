"""The Python API (SPEC §22, R-V2): what the CLI does, as functions returning what its ``--json`` prints.

    from workrun import api

    view = api.run("demo_apps/workflows/tutorial.toml", home="/tmp/wr")   # the run, as `run --json` prints it
    view["status"]                                                          # "failed": compensated
    api.show(view["run_id"], home="/tmp/wr")["operations"][0]["compensation"]["status"]   # "succeeded"

Every function takes ``home=None``: the data directory (default as the CLI: ``WORKRUN_HOME``, else
the platform's). Each returns exactly the value the CLI's ``--json`` prints for the same command
(a dict; a list for :func:`runs`) and raises :class:`WorkrunError` (with ``.exit_code`` and
``.message``) where the CLI exits 2 (bad config or input, unknown id, refused action) or 3 (another
scheduler holds the data directory). A run that ends failed, waiting or stopped is no error: its
``status`` says so. Nothing is printed. Signals are handled only when called from the main thread
(Ctrl-C stops the run as in the CLI).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from workrun.app import runs as _runs
from workrun.core.errors import UsageError, WorkrunError

__all__ = ["WorkrunError", "check", "compensate", "rerun", "resume", "run", "runs", "show", "stop"]

Home = Path | str | None


def _path(value: Any, field: str) -> Path:
    """A path argument, or exit 2 naming it."""
    if not isinstance(value, (str, os.PathLike)) or not str(value) or "\0" in str(value):
        raise UsageError(f"must be a path (str or os.PathLike), not {value!r}", field=field)
    return Path(value)


def _home(home: Any) -> Path | None:
    return None if home is None else _path(home, "home")


def _id(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise UsageError(f"must be a run id (a non-empty str), not {value!r}", field="run_id")
    return value


def _inputs(inputs: Any) -> dict[str, Any]:
    """``{name: value}``: names are strings, values strings or JSON values (passed as their JSON text)."""
    if inputs is None:
        return {}
    if not isinstance(inputs, Mapping):
        raise UsageError(f"must be a mapping {{name: value}}, not {type(inputs).__name__}", field="inputs")
    for key, value in inputs.items():
        if not isinstance(key, str) or not key:
            raise UsageError(f"input names are non-empty strings, not {key!r}", field="inputs")
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError):
            raise UsageError(f"the value of {key!r} is not a JSON value", field="inputs") from None
    return dict(inputs)


def run(workflow: Path | str, inputs: Mapping[str, Any] | None = None, *, home: Home = None,
        wait: bool = False) -> dict[str, Any]:
    """Run a workflow to its end, as ``workrun run WORKFLOW --json`` (R-W1, R-C1).

    Args:
        workflow: the workflow TOML file.
        inputs: ``{name: value}`` as ``--input name=value`` (a non-string value is passed as its JSON text).
        home: the data directory.
        wait: wait for another scheduler instead of raising (``--wait``).

    Returns:
        The run (``runs show --json``): ``status`` is ``succeeded``, ``failed`` (compensated), ``waiting``,
        ``terminated`` or ``stopped``.

    Raises:
        WorkrunError: exit code 2 (a bad workflow or input; ``.message`` names file and field) or 3 (busy).
    """
    return dict(_runs.run(_path(workflow, "workflow"), _inputs(inputs), home=_home(home), wait=wait).data)


def rerun(run_id: str, *, home: Home = None, wait: bool = False) -> dict[str, Any]:
    """Run a run's workflow again with its inputs (``workrun rerun RUN --json``, R-W5).

    Raises:
        WorkrunError: exit code 2 (unknown run, a workflow that no longer loads) or 3 (busy).
    """
    return dict(_runs.rerun(_id(run_id), home=_home(home), wait=wait).data)


def resume(*, home: Home = None, wait: bool = False) -> dict[str, Any]:
    """Continue every unfinished run and compensation (``workrun resume --json``, R-R1).

    Returns:
        ``{"runs": [run, …]}``: the runs it handled.

    Raises:
        WorkrunError: exit code 3 (busy).
    """
    return dict(_runs.resume(home=_home(home), wait=wait).data)


def compensate(run_id: str, dry_run: bool = False, *, home: Home = None, wait: bool = False) -> dict[str, Any]:
    """Compensate a stopped, terminated or failed run (``workrun compensate RUN --json``, R-C9), or with
    ``dry_run`` return its compensation plan, changing nothing (``--dry-run --json``, R-L3).

    Raises:
        WorkrunError: exit code 2 (unknown run; a run that cannot be compensated) or 3 (busy).
    """
    return dict(_runs.compensate(_id(run_id), dry_run=bool(dry_run), home=_home(home), wait=wait).data)


def stop(run_id: str, *, home: Home = None, timeout: float = 60.0) -> dict[str, Any]:
    """Stop a running or waiting run (``workrun stop RUN --json``, R-C9): its App processes end, nothing is
    compensated.

    Returns:
        The run afterwards (``runs show --json``).

    Raises:
        WorkrunError: exit code 2 (unknown run).
    """
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= 86400:
        raise UsageError(f"must be seconds (0 to 86400), not {timeout!r}", field="timeout")
    return dict(_runs.stop(_id(run_id), home=_home(home), timeout=float(timeout)).data)


def runs(limit: int | None = None, *, home: Home = None) -> list[dict[str, Any]]:
    """The runs, newest first (``workrun runs list --json``): at most ``limit``.

    Raises:
        WorkrunError: exit code 2 (``limit`` below 1).
    """
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)):
        raise UsageError(f"must be a whole number, not {limit!r}", field="limit")
    return list(_runs.runs(limit, home=_home(home)).data)


def show(run_id: str, *, home: Home = None) -> dict[str, Any]:
    """One run (``workrun runs show RUN --json``, SPEC §9); a unique prefix of its id is enough.

    Raises:
        WorkrunError: exit code 2 (unknown run).
    """
    return dict(_runs.show(_id(run_id), home=_home(home)).data)


def check(workflow: Path | str, inputs: Mapping[str, Any] | None = None, *, home: Home = None) -> dict[str, Any]:
    """Check a workflow as ``run`` would, creating nothing (``workrun check WORKFLOW --json``, R-L1).

    Args:
        home: accepted for symmetry; a check reads no data directory.

    Returns:
        ``{"ok": True, "nodes": N, "compensable": M}``.

    Raises:
        WorkrunError: exit code 2 with every error found (``.message``: one per line).
    """
    del home
    return dict(_runs.check(_path(workflow, "workflow"), _inputs(inputs)).data)
