"""Discovering a Tool App's tools by asking the App's own environment, cached per fingerprint."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

from workrun.core.errors import ConfigError
from workrun.core.models import AppSpec
from workrun.runner.apps import fingerprint
from workrun.runner.context import Context, new_id

__all__ = ["DISCOVERY_TIMEOUT", "discover"]

DISCOVERY_TIMEOUT = 120.0  # seconds at most to import a Tool App module and list its tools


def discover(svc: Context, project: Path, app: AppSpec) -> list[dict[str, Any]]:
    """Return ``[{name, description, input_schema}]`` of a Tool App (cached per code fingerprint).

    Args:
        project: the App project directory.
        app: a Tool App of that project.

    Returns:
        One dict per ``@tool`` function, sorted by name; ``input_schema`` is a JSON Schema object.
        The listing is cached under ``<data>/tool-cache/<fingerprint>-<app>.json`` (R-J2), so a
        code change lists again.

    Raises:
        ConfigError: the module fails to import, a hint is unsupported, two tools share a name,
            or listing takes longer than ``min(app.timeout, 120)`` seconds.
        EnvironmentUnavailableError: the App's environment cannot be prepared.
    """
    project = Path(project).resolve()
    fp = fingerprint(project)
    cache = svc.data_dir / "tool-cache" / f"{fp.digest}-{app.name}.json"
    if cache.is_file():
        return json.loads(cache.read_text())
    python = svc.runner.prepare(project)
    call_dir = svc.call_dir(new_id("discover"))
    envelope: dict[str, Any] = {"kind": "tool", "input": {}, "context": None, "tool": None}
    try:
        started = svc.runner.start(python, project, project / app.entry, call_dir, envelope)
        outcome = svc.runner.wait(started, time.time() + min(app.timeout, DISCOVERY_TIMEOUT))
        got = svc.runner.collect(call_dir)
    finally:
        shutil.rmtree(call_dir, ignore_errors=True)
    if outcome.exit_code != 0 or got.error or not isinstance(got.result, dict):
        last = (got.stderr_tail.strip().splitlines() or [got.error or "no result"])[-1]
        if outcome.timed_out:
            last = f"listing the tools timed out after {min(app.timeout, DISCOVERY_TIMEOUT):g} s"
        raise ConfigError(f"cannot list the tools of Tool App {app.name!r}: {last}",
                          file=str(project / app.entry), field=f"tool.workrun.apps.{app.name}.entry")
    tools = got.result.get("tools", [])
    cache.parent.mkdir(parents=True, exist_ok=True)
    tmp = cache.with_name(f"{cache.name}.{new_id('tmp')}")
    tmp.write_text(json.dumps(tools))
    tmp.replace(cache)  # atomic: a concurrent reader never sees half a listing
    return tools
