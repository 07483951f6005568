"""Node executors, one per ``kind`` (``base.py`` has the contract).

:func:`default_executors` is the registry the CLI and recovery hand to the engine;
a new kind is one line here (and its spec class in :mod:`workrun.models`).
"""

from __future__ import annotations

from workrun.nodes.agent import AgentExecutor
from workrun.nodes.base import NodeExecutor, NodeJob, Where
from workrun.nodes.process import ProcessExecutor
from workrun.nodes.remote import RemoteExecutor

__all__ = ["AgentExecutor", "NodeExecutor", "NodeJob", "ProcessExecutor", "RemoteExecutor", "Where",
           "default_executors"]


def default_executors() -> dict[str, NodeExecutor]:
    """``{kind: executor}`` of every built-in node kind."""
    executors: list[NodeExecutor] = [ProcessExecutor(), AgentExecutor(), RemoteExecutor()]
    return {e.kind: e for e in executors}
