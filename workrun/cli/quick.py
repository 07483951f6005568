"""Read commands without typer's argument parsing, for start-up speed (R-P3).

typer converts every option value through a pydantic ``TypeAdapter``, so parsing any
command line imports pydantic and builds adapters (~50-150 ms). The read commands
``runs list``, ``runs show``, ``compensations list`` and ``compensations show`` take a
handful of plain options; when a command line is one of those, written in the plain
form below, :func:`match` names the command's function in :mod:`workrun.cli.reads` and its
arguments, and the caller runs it directly (typer is never imported), after the same settings
check as the root callback. Every other
command line (help, ``--opt=value``, ``--``, repeated or unknown options, a value
that starts with ``-``, a ``--limit`` that is not digits) goes through typer unchanged,
so usage errors and help stay exactly typer's.

Shapes (options in any order after the subcommand; a leading ``--debug`` is allowed)::

    runs list [--json] [--limit DIGITS]
    runs show RUN [--json]
    compensations list [--json] [--status S] [--run R]
    compensations show ID [--json]
    run WORKFLOW [--json] [--wait] [--eval] [--yes] [--input KEY=VALUE | -i KEY=VALUE]...
    check WORKFLOW [--json] [--input KEY=VALUE | -i KEY=VALUE]...

``run`` and ``check`` need neither typer nor pydantic (the workflow is validated by
:mod:`workrun.core.shape`): ``run`` runs
:func:`workrun.cli.running.run_workflow`, what the typer command calls (issue 14).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["match"]

# (group, command) -> (positional parameter or None, {flag: parameter}, {option taking a value: parameter})
_SHAPES: dict[tuple[str, str], tuple[str | None, dict[str, str], dict[str, str]]] = {
    ("runs", "list"): (None, {"--json": "json_mode", "--all": "all_runs"}, {"--limit": "limit"}),
    ("runs", "show"): ("run_id", {"--json": "json_mode"}, {}),
    ("compensations", "list"): (None, {"--json": "json_mode", "--all": "all_runs"},
                                {"--status": "status", "--run": "run", "--workflow": "workflow"}),
    ("compensations", "show"): ("compensation_id", {"--json": "json_mode"}, {}),
}
# the typer defaults of the options above (every parameter is passed explicitly)
_DEFAULTS: dict[tuple[str, str], dict[str, Any]] = {
    ("runs", "list"): {"json_mode": False, "limit": None, "all_runs": False},
    ("runs", "show"): {"json_mode": False},
    ("compensations", "list"): {"json_mode": False, "status": None, "run": None, "workflow": None,
                                "all_runs": False},
    ("compensations", "show"): {"json_mode": False},
}


def _parse(shape: tuple[str | None, dict[str, str], dict[str, str]], rest: list[str]) -> dict[str, Any] | None:
    positional, flags, valued = shape
    kwargs: dict[str, Any] = {}
    i = 0
    while i < len(rest):
        token = rest[i]
        if token in flags:
            if flags[token] in kwargs:
                return None
            kwargs[flags[token]] = True
        elif token in valued:
            name = valued[token]
            if name in kwargs or i + 1 >= len(rest) or rest[i + 1].startswith("-") or not rest[i + 1]:
                return None
            i += 1
            kwargs[name] = rest[i]
        elif token.startswith("-") or positional is None or positional in kwargs or not token:
            return None
        else:
            kwargs[positional] = token
        i += 1
    if positional is not None and positional not in kwargs:
        return None
    if "limit" in kwargs:
        if not (kwargs["limit"].isascii() and kwargs["limit"].isdigit()):
            return None
        kwargs["limit"] = int(kwargs["limit"])
    return kwargs


_RUN_FLAGS = {"--json": "json_mode", "--wait": "wait", "--eval": "eval_run", "--yes": "yes"}


_CHECK_FLAGS = {"--json": "json_mode"}


def _parse_run(rest: list[str], flags: dict[str, str] = _RUN_FLAGS) -> dict[str, Any] | None:
    """``run``'s (or with ``flags`` ``check``'s) arguments as :func:`workrun.cli.running.run_workflow` (or
    :func:`~workrun.cli.running.check_workflow`) takes them, or None (typer parses it)."""
    kwargs: dict[str, Any] = {name: False for name in flags.values()}
    seen: set[str] = set()
    inputs: list[str] = []
    workflow: str | None = None
    i = 0
    while i < len(rest):
        token = rest[i]
        if token in flags and token not in seen:
            seen.add(token)
            kwargs[flags[token]] = True
        elif token in ("--input", "-i"):
            if i + 1 >= len(rest) or not rest[i + 1] or rest[i + 1].startswith("-"):
                return None
            i += 1
            inputs.append(rest[i])
        elif token.startswith("-") or not token or workflow is not None:
            return None
        else:
            workflow = token
        i += 1
    if workflow is None:
        return None
    return {**kwargs, "workflow": workflow, "inputs": inputs}


def match(args: list[str]) -> tuple[Callable[..., Any], dict[str, Any]] | None:
    """The read command a command line names, with every parameter's value; None: let typer parse it.

    Args:
        args: the arguments after the program name.

    Returns:
        ``(function, kwargs)``: a function of :mod:`workrun.cli.reads` or :mod:`workrun.cli.running` (what
        the typer command calls) to call as ``function(**kwargs)``; it may raise a ``WorkrunError`` exactly
        as under typer, and returns the exit code (None: 0).
        None for any other command line.
    """
    i = 0
    while i < len(args) and args[i] == "--debug":
        i += 1
    if i < len(args) and args[i] == "run":
        parsed = _parse_run(args[i + 1:])
        if parsed is None:
            return None
        from workrun.cli.running import run_workflow

        return run_workflow, parsed
    if i < len(args) and args[i] == "check":
        parsed = _parse_run(args[i + 1:], _CHECK_FLAGS)
        if parsed is None:
            return None
        from workrun.cli.running import check_workflow

        return check_workflow, parsed
    if len(args) < i + 2:
        return None
    key = (args[i], args[i + 1])
    shape = _SHAPES.get(key)
    if shape is None:
        return None
    parsed = _parse(shape, args[i + 2:])
    if parsed is None:
        return None
    kwargs = {**_DEFAULTS[key], **parsed}
    from workrun.cli import reads

    commands: dict[tuple[str, str], Callable[..., Any]] = {
        ("runs", "list"): reads.list_runs, ("runs", "show"): reads.show_run,
        ("compensations", "list"): reads.list_compensations, ("compensations", "show"): reads.show_compensation,
    }
    return commands[key], kwargs
