"""An OpenAI-compatible chat-completions model backend for agent nodes (issue 5, SPEC §9 ``kind = "agent"``).

Needs the optional extra ``workrun[openai]`` (the ``openai`` package). Settings:

- model: the node's ``model`` (any value other than ``"scripted"`` is the model
  name, e.g. ``"gpt-4o-mini"``); ``model = "openai"`` takes the name from
  ``OPENAI_MODEL``.
- base URL: the node's ``base_url``, else ``OPENAI_BASE_URL``, else the
  client's default (api.openai.com).
- key: ``OPENAI_API_KEY`` only (never from the workflow file, so it is never
  journaled, R-J4). A server given by base URL may need none.
- bounds: each HTTP request times out after ``min(node.timeout, 120)``
  seconds and is retried at most once; the number of steps is bounded by the
  node's ``max_steps`` (the loop's count).

Discovered tools are sent as the API's ``tools`` list (``type = "function"``
with ``name``, ``description`` and ``parameters`` = the tool's input schema).
Several tool calls in one assistant message are queued and handed to the loop
one at a time; each tool call's outcome goes back as a ``role = "tool"``
message with its ``tool_call_id`` before the next request.
"""

from __future__ import annotations

import json
import os
from collections import deque
from typing import Any

from workrun.core.errors import WorkrunError
from workrun.core.models import AgentNode
from workrun.core.redact import remember
from workrun.nodes.agent.backend import ToolCall
from workrun_sdk import _wire

__all__ = ["REQUEST_TIMEOUT_CAP", "OpenAIBackend"]

REQUEST_TIMEOUT_CAP = 120.0  # seconds per HTTP request, whatever the node's timeout says
_SYSTEM = ("You are an agent inside a Workrun workflow. Use the tools to do the task; each tool call really "
           "happens. When the task is done, reply with a short final answer and no tool call.")
_OBSERVATION_LIMIT = 16 * 1024  # characters of a tool outcome sent back to the model


class OpenAIBackend:
    """A model behind an OpenAI-compatible ``/chat/completions`` endpoint (see module doc).

    Args:
        node: the agent node (``model``, ``base_url``, ``timeout`` are read).
        prompt: the node's rendered prompt (the first user message).
        tool_schemas: discovered tools, ``[{name, description, input_schema}]``.

    Raises:
        WorkrunError: the ``openai`` package is missing (names the extra ``workrun[openai]``),
            no model name, or no API key for the default endpoint.
    """

    def __init__(self, node: AgentNode, prompt: str, tool_schemas: list[dict[str, Any]]) -> None:
        try:
            import openai
        except ImportError:
            raise WorkrunError("the OpenAI-compatible backend needs the `openai` package: "
                               "pip install 'workrun[openai]'") from None
        self._openai = openai
        model = node.model
        if model == "openai":
            model = os.environ.get("OPENAI_MODEL", "")
            if not model:
                raise WorkrunError('model = "openai" takes the model name from OPENAI_MODEL, which is not set')
        self.model = model
        base_url = node.base_url or os.environ.get("OPENAI_BASE_URL") or None
        key = os.environ.get("OPENAI_API_KEY")
        if key:  # a secret from here on: a server that echoes it (in an error) never gets it into the journal or
            remember({"OPENAI_API_KEY": key})  # on screen (R-X2, agents.md; agent review: a proxy quoted it in a 401)
        if not key:
            if base_url is None:
                raise WorkrunError(f"model {model!r}: OPENAI_API_KEY is not set (or give the node a base_url "
                                   "for a server that needs no key)")
            key = "unused"  # local OpenAI-compatible servers often ignore the key; the client needs one
        self.timeout = min(float(node.timeout), REQUEST_TIMEOUT_CAP)
        self.client = openai.OpenAI(api_key=key, base_url=base_url, timeout=self.timeout, max_retries=1)
        self.tools = [{"type": "function", "function": {
            "name": t["name"], "description": t.get("description", ""),
            "parameters": t.get("input_schema") or {"type": "object", "properties": {}}}} for t in tool_schemas]
        self.messages: list[dict[str, Any]] = [{"role": "system", "content": _SYSTEM},
                                               {"role": "user", "content": prompt}]
        self.queue: deque[ToolCall] = deque()
        self.requests = 0

    def _answer_tool(self, observation: dict[str, Any]) -> None:
        if observation.get("id") is None:
            return
        if "status" in observation:
            body = {"status": observation["status"], "result": observation.get("result"),
                    "error": observation.get("error")}
        else:
            body = {"status": "not called", "error": observation.get("error")}
        text = json.dumps(body, default=str)
        if len(text) > _OBSERVATION_LIMIT:
            text = text[:_OBSERVATION_LIMIT] + "...(truncated)"
        self.messages.append({"role": "tool", "tool_call_id": observation["id"], "content": text})

    def next(self, observation: dict[str, Any] | None) -> ToolCall | str:
        """Feed back the last tool call's outcome; return the next queued or requested tool call, or the answer.

        Args:
            observation: ``{id, tool, status, result, error}`` of the last call (``{id, error}`` when the
                loop did not call it, e.g. unknown tool), or None at the start.

        Returns:
            A :class:`ToolCall` (``args`` a dict; ``args`` None with ``error`` set when the model's
            arguments were not a JSON object) or the final answer text.

        Raises:
            WorkrunError: the HTTP request failed or timed out, or the response had no choice.
        """
        if observation is not None:
            self._answer_tool(observation)
        if self.queue:
            return self.queue.popleft()
        openai = self._openai
        self.requests += 1
        try:
            messages: Any = self.messages  # plain dicts in the API's shape (the SDK's TypedDicts)
            tools: Any = self.tools or openai.NOT_GIVEN
            response = self.client.chat.completions.create(model=self.model, messages=messages, tools=tools)
        except openai.APITimeoutError:
            raise WorkrunError(f"model request timed out after {self.timeout:g} s") from None
        except openai.APIStatusError as exc:
            raise WorkrunError(f"model request failed: HTTP {exc.status_code}: {_short(exc.message)}") from None
        except openai.OpenAIError as exc:
            raise WorkrunError(f"model request failed: {_short(str(exc))}") from None
        if not response.choices:
            raise WorkrunError("model response has no choices")
        message = response.choices[0].message
        calls: list[Any] = list(message.tool_calls or [])
        if not calls:
            return message.content or ""
        self.messages.append({"role": "assistant", "content": message.content, "tool_calls": [
            {"id": c.id, "type": "function", "function": {"name": c.function.name,
                                                          "arguments": c.function.arguments}} for c in calls]})
        for c in calls:
            self.queue.append(_tool_call(c.id, c.function.name, c.function.arguments))
        return self.queue.popleft()


def _tool_call(call_id: str, name: str, arguments: str | None) -> ToolCall:
    try:
        args = _wire.loads_strict(arguments) if arguments else {}
    except ValueError as exc:
        return ToolCall(tool=name, args=None, id=call_id, error=f"arguments are not valid JSON: {exc}")
    if not isinstance(args, dict):
        return ToolCall(tool=name, args=None, id=call_id, error="arguments must be a JSON object")
    return ToolCall(tool=name, args=args, id=call_id)


def _short(text: str) -> str:
    line = " ".join((text or "").split())
    return line[:300]
