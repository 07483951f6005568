"""What an agent's model backend is: it proposes tool calls, then answers."""

from __future__ import annotations

from typing import Any, Protocol

__all__ = ["Backend", "ToolCall"]


class ToolCall(dict):
    """A proposed tool call: ``{"tool": name, "args": {...}, "id": str | None}``.

    A call the model got wrong (arguments that are not a JSON object) has ``args`` None and
    ``error`` set: the loop does not make it and reports the error back to the model.
    """


class Backend(Protocol):
    """A model that proposes tool calls and then answers."""

    def next(self, observation: dict[str, Any] | None) -> ToolCall | str:
        """Given the last tool call's outcome (None at start), return the next ToolCall or the final answer.

        Raises:
            WorkrunError: the model failed (e.g. HTTP error, bad answer).
        """
