"""The one context object behind the SDK's module-level functions."""

from __future__ import annotations

import os

TYPE_CHECKING = False  # typing costs ~14 ms of every App call's start-up; annotations are strings
if TYPE_CHECKING:
    from typing import Any

from workrun_sdk import _wire
from workrun_sdk.errors import WrongCallKindError

_cache: dict[str, dict[str, Any]] = {}


def envelope(function: str) -> tuple[str, dict[str, Any]]:
    """Return (call directory, input envelope) of this App process; cached per directory.

    Raises:
        NotInAppError: outside a call started by the runner.
    """
    directory = _wire.call_dir(function)
    key = str(directory)
    if key not in _cache:
        _cache[key] = _wire.read_envelope(os.path.join(directory, "input.json"))
    return directory, _cache[key]


def require_kind(function: str, *kinds: str) -> tuple[str, dict[str, Any]]:
    """Like :func:`envelope`, but raise WrongCallKindError unless the call kind is one of ``kinds``."""
    directory, env = envelope(function)
    if env.get("kind") not in kinds:
        raise WrongCallKindError(function, str(env.get("kind")))
    return directory, env


def write_result(function: str, data: Any, *kinds: str) -> None:
    """Save ``data`` (a dict) as this call's result.

    Raises:
        TypeError: when ``data`` is not a dict or not JSON-serialisable.
    """
    directory, _ = require_kind(function, *kinds)
    if not isinstance(data, dict):
        raise TypeError(f"workrun_sdk.{function}() takes a dict, not {type(data).__name__}")
    try:
        _wire.write_json_atomic(os.path.join(directory, "result.json"), {"v": _wire.VERSION, "result": data})
    except ValueError as exc:  # NaN/inf
        raise TypeError(f"workrun_sdk.{function}(): result is not JSON: {exc}") from None
