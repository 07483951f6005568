"""What a use case returns, and the run inputs it takes: shared by every use case of :mod:`workrun.app`, and
light (no journal, runner or engine), so ``check`` loads only what it checks (SPEC §24)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from workrun.core.structs import field, struct

__all__ = ["Finished"]


@struct(frozen=True)
class Finished:
    """What a use case ended with.

    Attributes:
        data: the JSON value the CLI's ``--json`` prints (a dict, or a list for ``runs``).
        code: the exit code the CLI exits with (0, 1, 4, 130; errors are raised instead).
        note: a line for people (the CLI prints it in text mode), e.g. what ``stop`` did.
        extra: facts for callers as data (never read from ``note``): ``{"killed": bool}`` for a run started under
            ``crash``, whether its child was killed at the fault point.
    """

    data: Any
    code: int = 0
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def _inputs(inputs: Mapping[str, Any] | list[str] | None) -> dict[str, str]:
    """``--input`` values: ``KEY=VALUE`` strings, or a mapping (a non-string value as its JSON text).

    Raises:
        ConfigError: a ``KEY=VALUE`` without ``=`` or with an empty key (exit 2).
    """
    from workrun.core.templates import parse_inputs

    if inputs is None:
        return {}
    if isinstance(inputs, list):
        return parse_inputs(inputs)
    return {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in inputs.items()}
