"""Inside a normal App call: read the input, save the result, record resources.

Example (``main.py`` of a Process App)::

    from workrun_sdk import process
    data = process.input()
    process.resource("file", "/tmp/x.txt")
    process.result({"file_path": "/tmp/x.txt"})
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # typing costs ~14 ms of every App call's start-up; annotations are strings
if TYPE_CHECKING:
    from typing import Any

from workrun_sdk import _call, _wire

__all__ = ["depends_on", "input", "operation_id", "result", "resource"]

_resources: list[dict[str, Any]] = []
_depends: list[str] = []


def input() -> dict[str, Any]:  # noqa: A001 - the SDK's public name
    """Return this call's input (the node's rendered ``input`` table) as a dict.

    Raises:
        NotInAppError: outside a call started by the runner.
    """
    _, env = _call.require_kind("process.input", "process", "tool")
    return dict(env.get("input") or {})


def result(data: dict[str, Any]) -> None:
    """Save ``data`` as this call's result (R-A3: checked against the App's output contract).

    Calling it again replaces the earlier result. Results over 1 MiB fail the call.

    Raises:
        NotInAppError: outside a call started by the runner.
        TypeError: when ``data`` is not a JSON-serialisable dict.
    """
    _call.write_result("process.result", data, "process", "tool")


def resource(kind: str, id: str, **attrs: Any) -> None:  # noqa: A002 - SPEC §10 names it id
    """Record a resource this call created, e.g. ``resource("file", path)`` (R-C2).

    The compensation of this call receives the list as ``context().resources``,
    each ``{"kind": kind, "id": id, **attrs}``. Recorded immediately (atomically),
    so a resource is known even if the App fails afterwards.

    Raises:
        NotInAppError: outside a call started by the runner.
        TypeError: when kind/id are not strings or attrs are not JSON-serialisable.
    """
    directory, _ = _call.require_kind("process.resource", "process", "tool")
    if not isinstance(kind, str) or not isinstance(id, str):
        raise TypeError("workrun_sdk.process.resource(kind, id): kind and id must be strings")
    _resources.append({"kind": kind, "id": id, **attrs})
    _wire.write_json_atomic(os.path.join(directory, "resources.json"),
                            {"v": _wire.VERSION, "resources": _resources})


def operation_id() -> str:
    """Return this call's operation id (stable; e.g. to hand to a later call that builds on it).

    Raises:
        NotInAppError: outside a call started by the runner.
    """
    _, env = _call.require_kind("process.operation_id", "process", "tool")
    return str(env.get("operation_id") or "")


def depends_on(*operation_ids: str) -> None:
    """Record that this call builds on earlier calls of the same run (by operation id).

    Compensation then undoes this call before those (R-C3), and a failing compensation of this
    call holds them back (R-C4). Useful for an agent's tool calls, which are otherwise
    independent of each other. Ids that are not succeeded calls of the same run are ignored.

    Raises:
        NotInAppError: outside a call started by the runner.
        TypeError: when an id is not a string.
    """
    directory, _ = _call.require_kind("process.depends_on", "process", "tool")
    for op in operation_ids:
        if not isinstance(op, str):
            raise TypeError("workrun_sdk.process.depends_on(): operation ids are strings")
        if op not in _depends:
            _depends.append(op)
    _wire.write_json_atomic(os.path.join(directory, "dependencies.json"),
                            {"v": _wire.VERSION, "depends_on": _depends})
