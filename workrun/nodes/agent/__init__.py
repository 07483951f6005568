"""``kind = "agent"`` nodes: a tool-calling loop over Tool Apps, each tool call its own operation (R-C5)."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from workrun.core.errors import ConfigError
from workrun.core.models import AgentNode, NodeSpec, OutputField
from workrun.core.outcomes import NodeOutcome
from workrun.nodes.agent.loop import run_agent_node
from workrun.nodes.base import NodeJob, Where
from workrun.runner.apps import load_app, project_not_found
from workrun.runner.context import Context

__all__ = ["AgentExecutor"]

_STEP_KEYS = {"tool", "args", "error"}


class AgentExecutor:
    """Runs agent nodes (see :mod:`workrun.nodes.agent.loop`)."""

    kind: ClassVar[str] = "agent"

    def check(self, node: NodeSpec, where: Where) -> dict[str, OutputField]:
        """At least one Tool App, each found and a Tool App; scripted steps well formed.

        Raises:
            ConfigError: naming the field.
        """
        assert isinstance(node, AgentNode)
        if not node.tools:
            raise ConfigError("an agent node needs at least one Tool App", file=where.file, field=where.at("tools"))
        for i, ref in enumerate(node.tools):
            if not Path(ref.project).is_dir():
                raise ConfigError(project_not_found(ref.project), file=where.file,
                                  field=where.at(f"tools[{i}].project"))
            spec = load_app(Path(ref.project), ref.app, file=where.file, field=where.at(f"tools[{i}].app"))
            if spec.kind != "tool":
                raise ConfigError(f"App {ref.app!r} is not a Tool App", file=where.file,
                                  field=where.at(f"tools[{i}].app"))
        for i, step in enumerate(node.script):  # scripted steps: {tool, args} or {error} (issue 5)
            field = where.at(f"script[{i}]")
            if set(step) - _STEP_KEYS:
                raise ConfigError("unknown key " + repr(sorted(set(step) - _STEP_KEYS)[0]), file=where.file,
                                  field=field)
            if "error" not in step and not isinstance(step.get("tool"), str):
                raise ConfigError("a script step needs tool = \"NAME\" (or error = \"...\")", file=where.file,
                                  field=field)
            if not isinstance(step.get("args", {}), dict):
                raise ConfigError("must be a table of tool arguments", file=where.file, field=f"{field}.args")
        return {}

    def run(self, job: NodeJob) -> NodeOutcome:
        """Run the loop to the agent's answer (resuming after the calls already journaled)."""
        return run_agent_node(job)

    def after_run(self, svc: Context, run_id: str) -> None:
        """Nothing: tool calls are operations, compensated by the run's compensation."""
