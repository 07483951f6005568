"""``workrun app new|run|list``: create an App project, run an App alone (R-A6), list Apps and tools."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any, List, Optional

import typer

from workrun.cli.common import JsonOpt, reading
from workrun.cli.output import console, escape, print_json, styled
from workrun.core.errors import ConfigError, ConfigErrors, UsageError
from workrun_sdk import _wire

if TYPE_CHECKING:
    from workrun.core.models import AppSpec

app = typer.Typer(no_args_is_help=True, help="Create, run and list Apps.")

_PYPROJECT = """[project]
name = "{name}"
version = "0.1.0"
requires-python = ">=3.11"
dependencies = []

[tool.workrun.apps.{name}]
kind = "process"
entry = "main.py"
timeout = 60
compensation = {{ entry = "compensate.py" }}

[tool.workrun.apps.{name}.output]
message = {{ type = "string", required = true }}
"""
_MAIN = '''"""Process App: read the input, do the work, save the result."""

from workrun_sdk import process

data = process.input()
process.result({"message": f"hello {data.get('name', 'world')}"})
'''
_COMPENSATE = '''"""Compensation: undo what main.py did for one call (exit 0 = done)."""

from workrun_sdk import compensation

ctx = compensation.context()
print(f"undoing {ctx.original_operation_id}: {dict(ctx.original_result)}")
compensation.result({"undone": ctx.original_operation_id})
'''


@app.command("new")
def new(name: str = typer.Argument(..., metavar="NAME", help="App (and project) name."),
        directory: Optional[Path] = typer.Option(None, "--dir", help="Where to create it (default ./NAME).")) -> None:
    r"""Create an App project: pyproject.toml with \[tool.workrun], main.py, compensate.py, uv.lock."""
    from workrun.runner.env import clean_env, uv_bin

    if not re.match(r"^[A-Za-z][A-Za-z0-9_\-]{0,63}$", name):
        raise UsageError("use letters, digits, '-' and '_', starting with a letter, at most 64 characters",
                         field="NAME")
    target = directory or Path(name)
    field = "--dir" if directory is not None else "NAME"
    if target.exists() and not target.is_dir():
        raise UsageError(f"{target} is not a directory", field=field)
    if target.exists() and any(target.iterdir()):
        raise UsageError("directory exists and is not empty", file=str(target))
    try:
        target.mkdir(parents=True, exist_ok=True)
        (target / "pyproject.toml").write_text(_PYPROJECT.format(name=name))
        (target / "main.py").write_text(_MAIN)
        (target / "compensate.py").write_text(_COMPENSATE)
    except OSError as exc:  # e.g. a file where a parent directory belongs (new-user review: an internal error)
        raise UsageError(f"cannot create the project in {target}: {exc.strerror or exc}", field=field) from None
    proc = subprocess.run([uv_bin(), "lock", "--quiet"], cwd=target, env=clean_env(), capture_output=True,
                          text=True)
    if proc.returncode != 0:
        raise ConfigError(f"`uv lock` failed: {proc.stderr.strip().splitlines()[-1:]}", file=str(target))
    console.print(f"created App project {target} (App {name!r}); try: workrun app run {target} {name} "
                  "--input name=you")


def _coerce(value: object) -> object:
    if not isinstance(value, str):
        return value
    try:
        return _wire.loads_strict(value)
    except ValueError:
        return value


@app.command("run")
def run(project: Path = typer.Argument(..., metavar="PROJECT_DIR", help="The App project directory."),
        app_name: str = typer.Argument(..., metavar="APP", help="The App's name (under tool.workrun.apps)."),
        input: List[str] = typer.Option([], "--input", "-i", metavar="KEY=VALUE", help="Input (repeatable)."),
        tool: Optional[str] = typer.Option(None, "--tool", help="For a Tool App: the tool to call."),
        json_mode: bool = JsonOpt) -> None:
    """Run one App alone: journaled, never compensated. Exit 0 if the call succeeded, else 1.

    \f
    Implements R-A6.
    """
    from workrun.core.templates import parse_inputs
    from workrun.effects.operations import call_app
    from workrun.engine.recovery import recover_operations
    from workrun.runner.apps import load_app

    spec = _first_error(load_app, project, app_name, field="APP")
    data: dict[str, object] = dict(parse_inputs(input))
    if spec.kind == "tool":
        if not tool:
            raise UsageError(f"App {app_name!r} is a Tool App: name the tool with --tool", field="--tool")
        data = {k: _coerce(v) for k, v in data.items()}
    elif tool:
        raise UsageError(f"App {app_name!r} is a process App; --tool is for Tool Apps", field="--tool")
    with reading(json_mode, writable=True) as svc:
        recover_operations(svc, None)
        op = call_app(svc, project=project, app=spec, input=data, run_id=None, node_key=None, depends_on=[],
                      tool_name=tool, standalone=True)
    view = {"operation_id": op["operation_id"], "app": op["app"], "status": op["status"], "input": op["input"],
            "result": op["result"], "resources": op["resources"], "error": op["error"], "exit_code": op["exit_code"],
            "signal": op["signal"], "stdout_tail": op["stdout_tail"] or "", "stderr_tail": op["stderr_tail"] or "",
            "compensation": None}
    if json_mode:
        print_json(view)
    else:
        console.print(f"operation {op['operation_id']} ({op['app']}): {styled(op['status'])}"
                      + (f": {escape(op['error'])}" if op["error"] else ""))
        if op["stdout_tail"]:
            console.print(escape(op["stdout_tail"].rstrip()))
        console.print(f"result: {json.dumps(op['result'])}")
        console.print("[dim]standalone call: journaled, never compensated[/]")
    raise typer.Exit(0 if op["status"] == "succeeded" else 1)


def _asks(spec: AppSpec, tool: str) -> bool:
    """True when the tool's App config says ``confirm = "always"`` (shown as ``(confirm)``)."""
    policy = spec.tools.get(tool)
    return policy is not None and policy.confirm == "always"


def _first_error(load: Any, *args: Any, **kwargs: Any) -> Any:
    """``load(*args, **kwargs)``, its errors said in one line (SPEC §10; only ``check`` and ``run`` list them all,
    R-L1): the first of several.

    Raises:
        ConfigError: the first error ``load`` found (exit 2).
    """
    try:
        return load(*args, **kwargs)
    except ConfigErrors as exc:
        raise exc.errors[0] from None


@app.command("list")
def list_apps(project: Path = typer.Argument(Path("."), metavar="PROJECT_DIR", show_default=False,
                                             help="The App project directory (default: the current one)."),
              json_mode: bool = JsonOpt) -> None:
    """List a project's Apps (and each Tool App's tools); PROJECT_DIR defaults to the current directory."""
    from workrun.runner.apps import load_project

    apps = _first_error(load_project, project)
    rows: list[dict[str, Any]] = []
    tools: dict[str, list[dict[str, Any]]] = {}
    with reading(json_mode, writable=True) as svc:
        for name, spec in apps.items():
            if spec.kind == "tool":
                from workrun.nodes.agent.tools import discover

                tools[name] = discover(svc, Path(project), spec)
            rows.append({"app": name, "kind": spec.kind, "entry": spec.entry,
                         "compensation": spec.compensation.model_dump() if spec.compensation else None,
                         "output": {k: v.model_dump() for k, v in spec.output.items()},
                         "tools": tools.get(name, [])})
    if json_mode:
        print_json(rows)
        return
    from rich.table import Table

    table = Table()
    for col in ("app", "kind", "entry", "compensation", "output", "tools"):
        table.add_column(col, overflow="fold")
    for r in rows:
        table.add_row(r["app"], r["kind"], r["entry"], (r["compensation"] or {}).get("entry", "-"),
                      ", ".join(f"{k}: {v['type']}{'!' if v['required'] else ''}"
                                for k, v in r["output"].items()) or "-",
                      ", ".join(str(t["name"]) + (" (confirm)" if _asks(apps[r["app"]], str(t["name"])) else "")
                                for t in r["tools"]) or "-")
    console.print(table)
