"""Discovering a Tool App's tools by asking the App's own environment, cached per fingerprint."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

from workrun.apps import fingerprint
from workrun.errors import ConfigError
from workrun.models import AppSpec
from workrun.runner.uv import collect, spawn, wait
from workrun.services import Services, new_id

__all__ = ["discover"]


def discover(svc: Services, project: Path, app: AppSpec) -> list[dict[str, Any]]:
    """Return ``[{name, description, input_schema}]`` of a Tool App (cached per code fingerprint).

    Raises:
        ConfigError: the module fails to import, a hint is unsupported, or two tools share a name.
        EnvironmentUnavailableError: the App's environment cannot be prepared.
    """
    project = Path(project).resolve()
    fp = fingerprint(project)
    cache = svc.data_dir / "tool-cache" / f"{fp.digest}-{app.name}.json"
    if cache.is_file():
        return json.loads(cache.read_text())
    python = svc.envs.python(project)
    call_dir = svc.call_dir(new_id("discover"))
    try:
        proc = spawn(python, project, project / app.entry, call_dir, {"kind": "tool", "input": {}, "context": None,
                                                                     "tool": None}, svc.sdk_dir)
        outcome = wait(proc, svc.watchdog, time.time() + min(app.timeout, 120))
        got = collect(call_dir)
    finally:
        pass
    if outcome.exit_code != 0 or got.error or not isinstance(got.result, dict):
        last = (got.stderr_tail.strip().splitlines() or [got.error or "no result"])[-1]
        shutil.rmtree(call_dir, ignore_errors=True)
        raise ConfigError(f"cannot list the tools of Tool App {app.name!r}: {last}",
                          file=str(project / app.entry), field=f"tool.workrun.apps.{app.name}.entry")
    shutil.rmtree(call_dir, ignore_errors=True)
    tools = got.result.get("tools", [])
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps(tools))
    return tools
