"""``kind = "remote_agent"`` nodes: one message to an A2A agent, its task followed; one cancel owed (R-C10)."""

from __future__ import annotations

from typing import ClassVar

from workrun.core.errors import ConfigError
from workrun.core.models import NodeSpec, OutputField, RemoteAgentNode
from workrun.core.outcomes import NodeOutcome
from workrun.nodes.base import NodeJob, Where
from workrun.nodes.remote.a2a import MISSING_EXTRA, a2a_available, cancel_open_tasks, run_remote_node, url_problem
from workrun.runner.context import Context

__all__ = ["RemoteExecutor"]


class RemoteExecutor:
    """Runs remote agent nodes (see :mod:`workrun.nodes.remote.a2a`)."""

    kind: ClassVar[str] = "remote_agent"

    def check(self, node: NodeSpec, where: Where) -> dict[str, OutputField]:
        """``url`` present and http(s); the A2A extra installed (found before anything runs, SPEC §10).

        Raises:
            ConfigError: naming the field.
        """
        assert isinstance(node, RemoteAgentNode)
        if not node.url:
            raise ConfigError("is required for a remote_agent node", file=where.file, field=where.at("url"))
        if url_problem(node.url):
            raise ConfigError("must be an http:// or https:// URL", file=where.file, field=where.at("url"))
        if not a2a_available():
            raise ConfigError(MISSING_EXTRA, file=where.file, field=where.at("kind"))
        return {}

    def run(self, job: NodeJob) -> NodeOutcome:
        """Send the message and follow the task (never sent twice, even across restarts)."""
        assert isinstance(job.node, RemoteAgentNode)
        return run_remote_node(job.svc, job.run_id, job.node, job.context)

    def after_run(self, svc: Context, run_id: str) -> None:
        """Send the one best-effort cancel owed to each open remote task of the run (R-C10)."""
        cancel_open_tasks(svc, run_id)
