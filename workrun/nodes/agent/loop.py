"""The agent loop: a model backend proposes tool calls; each call is its own journaled operation (R-C5).

Backends (``model`` in the node):

- ``scripted``: deterministic; plays ``script`` (a list of ``{tool, args}``,
  templates in ``args`` filled like a node's ``input``; a step
  ``{error = "..."}`` makes the model fail there), then answers ``answer``
  (or fails to answer when ``fail_answer = true``).
- anything else: an OpenAI-compatible chat-completions backend
  (:mod:`workrun.nodes.agent.openai_backend`), tool calls mapped from the
  discovered schemas.

Tool calls of one node depend on the node's upstream operations; among
themselves they are independent for hold-back and compensated newest first.
A tool whose App config says ``confirm = "always"`` is confirmed on the
terminal before a normal call (or needs ``--yes``); compensation never asks.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from workrun.core.errors import WorkrunError
from workrun.core.models import AgentNode, AppSpec
from workrun.core.outcomes import NodeOutcome
from workrun.core.templates import render
from workrun.effects.operations import call_app
from workrun.nodes.agent.backend import Backend, ToolCall
from workrun.nodes.agent.openai_backend import OpenAIBackend
from workrun.nodes.agent.tools import discover
from workrun.nodes.base import NodeJob
from workrun.runner.apps import load_app
from workrun.runner.context import Context

__all__ = ["ScriptedBackend", "run_agent_node"]


class ScriptedBackend:
    """Plays a fixed script (deterministic; for tests and demos).

    Args:
        node: the agent node (``answer``, ``fail_answer``).
        script: the node's ``script`` with templates already filled.
        skip: steps already played before a runner restart.
    """

    def __init__(self, node: AgentNode, script: list[dict[str, Any]], skip: int) -> None:
        self.steps: Iterator[dict[str, Any]] = iter(script[skip:])
        self.node = node

    def next(self, observation: dict[str, Any] | None) -> ToolCall | str:
        """Return the next scripted call, or the answer when the script is over."""
        for step in self.steps:
            if "error" in step:
                raise WorkrunError(f"model failed: {step['error']}")
            return ToolCall(tool=step.get("tool"), args=dict(step.get("args") or {}), id=None)
        if self.node.fail_answer:
            raise WorkrunError("the agent failed to answer (fail_answer = true)")
        return self.node.answer if self.node.answer is not None else "done"


_ASKING = threading.Lock()  # agent nodes run in parallel threads: one question on the terminal at a time


def _confirm(svc: Context, app: AppSpec, tool: str, args: dict[str, Any]) -> str | None:
    """Return None when the call may go ahead, else why not (normal calls only; never compensation, R-C5).

    ``confirm = "always"`` asks the person through ``svc.confirm`` (set by the CLI when there is a terminal),
    is approved by ``--yes`` (``svc.assume_yes``), and otherwise refuses with a message that says so.
    """
    policy = app.tools.get(tool)
    if policy is None or policy.confirm != "always" or svc.assume_yes:
        return None
    if svc.confirm is None:
        return (f"tool {tool!r} of App {app.name!r} asks for confirmation (confirm = \"always\") and there is no "
                "terminal; pass --yes to approve")
    with _ASKING:
        approved = svc.confirm(f"Call tool {tool!r} of App {app.name!r} with {json.dumps(args)}?")
    return None if approved else f"tool call {tool!r} was declined on the terminal"


def _played(script: list[dict[str, Any]], known: set[str], calls_made: int) -> int:
    """How many script steps produced the ``calls_made`` journaled calls (steps naming an unknown
    tool make no call), so a resumed scripted agent continues after them."""
    if calls_made == 0:
        return 0
    made = 0
    for i, step in enumerate(script):
        if "error" not in step and step.get("tool") in known:
            made += 1
            if made == calls_made:
                return i + 1
    return len(script)


def run_agent_node(job: NodeJob) -> NodeOutcome:
    """Run an agent node to its answer.

    The node result is ``{"answer": str, "tool_calls": [{tool, operation_id, status, result}]}``.
    Resuming after a restart continues the script after the calls already journaled.
    """
    svc, run_id, node, context, depends_on = job.svc, job.run_id, job.node, job.context, job.depends_on
    assert isinstance(node, AgentNode)
    tools: dict[str, tuple[Path, AppSpec, dict[str, Any]]] = {}
    try:
        for ref in node.tools:
            app = load_app(Path(ref.project), ref.app)
            for t in discover(svc, Path(ref.project), app):
                known = tools.get(t["name"])
                if known is not None and (known[0], known[1].name) != (Path(ref.project), app.name):
                    # one name, two tools: the later would answer every call of it, past the other's confirm = "always"
                    # (agent review); which one a model means cannot be told, so no call is made
                    return NodeOutcome("failed", error=f"tool {t['name']!r} is offered by two Tool Apps of this "
                                                       f"node ({known[1].name!r} and {app.name!r}): give each tool "
                                                       "of a node its own name")
                tools[t["name"]] = (Path(ref.project), app, t)
        prompt = render(node.prompt, context)
        script = render(node.script, context) if node.model == "scripted" else []
    except WorkrunError as exc:
        return NodeOutcome("failed", error=exc.line())
    prior = svc.journal.operations(run_id, node.key)
    calls = [{"tool": o["tool_name"], "operation_id": o["operation_id"], "status": o["status"], "result": o["result"]}
             for o in prior]
    if any(o["status"] == "unknown" for o in prior):
        return NodeOutcome("failed", error="a tool call's outcome is unknown after a restart; not re-sent")
    if node.model == "scripted":
        backend: Backend = ScriptedBackend(node, script, skip=_played(script, set(tools), len(prior)))
    else:
        if prior:
            return NodeOutcome("failed", error="the agent's conversation was interrupted by a runner restart; its "
                               "successful tool calls are kept and compensated if the run fails")
        try:
            backend = OpenAIBackend(node, prompt, [t for _, _, t in tools.values()])
        except WorkrunError as exc:
            return NodeOutcome("failed", error=exc.line())
    observation: dict[str, Any] | None = None
    for _ in range(node.max_steps):
        if svc.stopping():
            return NodeOutcome("stopped", error="stopped by the user")
        try:
            step = backend.next(observation)
        except WorkrunError as exc:
            return NodeOutcome("failed", error=exc.line())
        if isinstance(step, str):
            return NodeOutcome("succeeded", {"answer": step, "tool_calls": calls})
        name = step.get("tool")
        if name not in tools:
            observation = {"id": step.get("id"), "error": f"unknown tool {name!r}"}
            svc.say(run_id, node.key, "warning", f"model asked for unknown tool {name!r}")
            continue
        if not isinstance(step.get("args"), dict):
            error = step.get("error") or "tool arguments must be a JSON object"
            observation = {"id": step.get("id"), "error": error}
            svc.say(run_id, node.key, "warning", f"model asked for tool {name!r} with bad arguments: {error}")
            continue
        project, app, _ = tools[name]
        refusal = _confirm(svc, app, name, step["args"])
        if refusal:
            if svc.stopping():  # Ctrl-C while the question was on the terminal
                return NodeOutcome("stopped", error="stopped by the user")
            return NodeOutcome("failed", error=refusal)
        op = call_app(svc, project=project, app=app, input=step["args"], run_id=run_id, node_key=node.key,
                      depends_on=depends_on, tool_name=name, tool_call_index=len(calls))
        calls.append({"tool": name, "operation_id": op["operation_id"], "status": op["status"],
                      "result": op["result"]})
        svc.say(run_id, node.key, "info" if op["status"] == "succeeded" else "warning",
                f"tool call {len(calls) - 1} {name} (operation {op['operation_id']}): {op['status']}"
                + (f": {op['error']}" if op["error"] else ""))
        if svc.stopping():
            return NodeOutcome("stopped", error="stopped by the user")
        observation = {"id": step.get("id"), "tool": name, "status": op["status"],
                       "result": op["result"], "error": op["error"]}
    return NodeOutcome("failed", error=f"the agent did not answer within max_steps = {node.max_steps}")
