"""Agent nodes: a tool-calling loop over Tool Apps, each tool call its own operation (R-C5)."""

from workrun.agent.loop import run_agent_node

__all__ = ["run_agent_node"]
