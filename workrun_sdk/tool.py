"""Tool Apps: functions marked ``@tool(name=..., description=...)`` (R-A2).

Example (``tools.py`` of a Tool App)::

    from workrun_sdk.tool import tool

    @tool(name="create_demo_file", description="Create one temporary demo file.")
    def create_demo_file(text: str = "hello") -> dict:
        ...
        return {"file_path": path}

Each decorated function is one callable tool; its JSON Schema input is derived
from its type hints when decorated (unsupported hints raise ``TypeError`` then).
The function's return value (a dict) is the tool call's result.
"""

from __future__ import annotations

import inspect
import json
import re
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["ToolInfo", "tool", "tools_of", "input_schema"]

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]{0,63}$")
_SCALARS = {str: "string", int: "integer", float: "number", bool: "boolean"}


class ToolInfo(typing.NamedTuple):
    """Metadata ``@tool`` attaches to a function as ``__workrun_tool__``."""

    name: str
    description: str
    input_schema: dict[str, Any]


def _schema(hint: Any, where: str) -> dict[str, Any]:
    if hint in _SCALARS:
        return {"type": _SCALARS[hint]}
    if hint is Any:
        return {}
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if hint in (list, dict) or origin in (list, dict):
        if (origin or hint) is list:
            return {"type": "array", **({"items": _schema(args[0], where)} if args else {})}
        if args and args[0] is not str:
            raise TypeError(f"{where}: dict keys must be str for a JSON object")
        return {"type": "object", **({"additionalProperties": _schema(args[1], where)} if args else {})}
    if origin in (typing.Union, types.UnionType):
        non_none = [a for a in args if a is not type(None)]
        if len(non_none) == 1 and len(args) == 2:
            inner = _schema(non_none[0], where)
            kind = inner.get("type")
            return {**inner, "type": [kind, "null"]} if isinstance(kind, str) else {"anyOf": [inner, {"type": "null"}]}
        return {"anyOf": [_schema(a, where) for a in args]}
    raise TypeError(f"{where}: unsupported type hint {hint!r} (use str, int, float, bool, list, dict, Optional)")


def input_schema(fn: Callable[..., Any]) -> dict[str, Any]:
    """Derive a JSON Schema object for ``fn``'s parameters from its type hints.

    Returns:
        ``{"type": "object", "properties": {name: schema}, "required": [names without default],
        "additionalProperties": False}``; a default is kept as the property's ``default``.
        ``str``/``int``/``float``/``bool`` map to string/integer/number/boolean, ``list[X]`` to an
        array of X, ``dict[str, X]`` to an object of X, ``Optional[X]`` adds ``"null"``.

    Raises:
        TypeError: for a positional-only parameter, *args/**kwargs, a missing or unresolvable
            hint, an unsupported hint, or a default that is not JSON.
    """
    name_of = getattr(fn, "__name__", repr(fn))
    if not callable(fn) or not inspect.isfunction(inspect.unwrap(fn)):
        raise TypeError(f"@tool decorates a function, not {type(fn).__name__}")
    try:
        hints = typing.get_type_hints(fn)
    except Exception as exc:  # NameError for a string hint naming nothing, TypeError for a bad one
        raise TypeError(f"tool {name_of}: cannot resolve type hints: {exc}") from None
    props: dict[str, Any] = {}
    required: list[str] = []
    for name, param in inspect.signature(fn).parameters.items():
        where = f"tool {name_of}: parameter {name!r}"
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise TypeError(f"{where}: *args/**kwargs cannot be described as a tool input")
        if param.kind is param.POSITIONAL_ONLY:
            raise TypeError(f"{where}: positional-only parameters cannot be passed by name")
        if name not in hints:
            raise TypeError(f"{where}: needs a type hint")
        prop = _schema(hints[name], where)
        if param.default is param.empty:
            required.append(name)
        else:
            try:
                prop["default"] = json.loads(json.dumps(param.default, allow_nan=False))
            except (TypeError, ValueError):
                raise TypeError(f"{where}: default {param.default!r} is not JSON") from None
        props[name] = prop
    return {"type": "object", "properties": props, "required": required, "additionalProperties": False}


def tool(*, name: str, description: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Mark a function as a tool of this Tool App.

    Args:
        name: the tool's name as models and workflows call it (letters, digits, ``_``, ``-``).
        description: one sentence for the model.

    Raises:
        TypeError/ValueError: at decoration time, for a bad name, empty description
            or a parameter whose type hint has no JSON Schema.
    """
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"@tool(name={name!r}): use letters, digits, '_' or '-' (at most 64)")
    if not isinstance(description, str) or not description.strip():
        raise ValueError(f"@tool(name={name!r}): description must be a non-empty string")

    def mark(fn: Callable[..., Any]) -> Callable[..., Any]:
        if not inspect.isfunction(fn):
            raise TypeError(f"@tool(name={name!r}) decorates a function, not {type(fn).__name__}")
        fn.__workrun_tool__ = ToolInfo(name, description.strip(), input_schema(fn))  # type: ignore[attr-defined]
        return fn

    return mark


def tools_of(namespace: dict[str, Any]) -> dict[str, Callable[..., Any]]:
    """Return ``{tool name: function}`` for the ``@tool`` functions in a module namespace.

    Raises:
        ValueError: when two functions share a tool name.
    """
    found: dict[str, Callable[..., Any]] = {}
    for value in namespace.values():
        info = getattr(value, "__workrun_tool__", None)
        if isinstance(info, ToolInfo):
            if info.name in found and found[info.name] is not value:
                raise ValueError(f"two tools are named {info.name!r}")
            found[info.name] = value
    return found


def _run_tool_call(entry: str, envelope: dict[str, Any]) -> None:
    """Launcher side: load the Tool App module and list its tools or call one."""
    import runpy

    from workrun_sdk import _call

    namespace = runpy.run_path(str(entry), run_name="__workrun_tool__")
    tools = tools_of(namespace)
    name = envelope.get("tool")
    if name is None:  # discovery
        listing = [
            {"name": n, "description": spec.description, "input_schema": spec.input_schema}
            for n, spec in ((n, vars(tools[n])["__workrun_tool__"]) for n in sorted(tools))
        ]
        _call.write_result("tool.list", {"tools": listing}, "tool")
        return
    if name not in tools:
        raise SystemExit(f"no tool named {name!r} in {Path(entry).name} (tools: {', '.join(sorted(tools)) or 'none'})")
    value = tools[name](**(envelope.get("input") or {}))
    if value is None:
        value = {}
    _call.write_result("tool result", value, "tool")
