"""Inside a compensation call (``compensate.py``): the original call's record.

Example::

    from workrun_sdk import compensation
    ctx = compensation.context()
    Path(ctx.original_result["file_path"]).unlink(missing_ok=True)
    compensation.result({"removed": True})

Exit 0 means done; any other exit means not done (retried with backoff).
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs ~14 ms of every App call's start-up; annotations are strings
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

from workrun_sdk import _call, _lightjson

__all__ = ["Context", "context", "result"]

_FIELDS = ("original_operation_id", "compensation_id", "original_input", "original_result", "resources",
           "attempt", "app", "node_key", "run_id")


class Context:
    """The record of the call being compensated (R-C2). Immutable (attributes cannot be set).

    Attributes:
        original_operation_id: stable id of the original call.
        compensation_id: stable id of this compensation; use it as an idempotency key.
        original_input: the input the original call actually got (a dict, your own copy).
        original_result: the result the original call saved (a dict, your own copy).
        resources: resources the call recorded, a list of ``{"kind", "id", ...}`` dicts (SPEC §10).
        attempt: 1 for the first attempt of this compensation, 2 for the next, ...
        app: the App name; node_key / run_id: where the call was made.
    """

    __slots__ = _FIELDS
    original_operation_id: str
    compensation_id: str
    original_input: Mapping[str, Any]
    original_result: Mapping[str, Any]
    resources: list[Mapping[str, Any]]
    attempt: int
    app: str
    node_key: str
    run_id: str

    def __init__(self, **values: Any) -> None:
        for name in _FIELDS:
            object.__setattr__(self, name, values[name])

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"compensation.Context is immutable: cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"compensation.Context is immutable: cannot delete {name!r}")

    def __repr__(self) -> str:
        return "Context(" + ", ".join(f"{n}={getattr(self, n)!r}" for n in _FIELDS) + ")"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Context) and all(getattr(self, n) == getattr(other, n) for n in _FIELDS)

    __hash__ = None  # type: ignore[assignment]


def _freeze(value: Any) -> Any:
    # A fresh plain copy: the Context cannot be changed, and what it holds stays JSON-serialisable.
    return _lightjson.loads(_lightjson.dumps(value))


def context() -> Context:
    """Return the immutable :class:`Context` of this compensation.

    Raises:
        NotInAppError: outside a call started by the runner.
        WrongCallKindError: inside a normal (non-compensation) call.
    """
    _, env = _call.require_kind("compensation.context", "compensation")
    ctx = env.get("context") or {}
    return Context(
        original_operation_id=ctx["original_operation_id"],
        compensation_id=ctx["compensation_id"],
        original_input=_freeze(ctx.get("original_input") or {}),
        original_result=_freeze(ctx.get("original_result") or {}),
        resources=_freeze(list(ctx.get("resources") or [])),
        attempt=int(ctx.get("attempt", 1)),
        app=ctx.get("app", ""),
        node_key=ctx.get("node_key", ""),
        run_id=ctx.get("run_id", ""),
    )


def result(data: dict[str, Any]) -> None:
    """Optionally save ``data`` as this compensation's result (shown in ``runs show``).

    Raises:
        NotInAppError: outside a call started by the runner.
        TypeError: when ``data`` is not a JSON-serialisable dict.
    """
    _call.write_result("compensation.result", data, "compensation")
