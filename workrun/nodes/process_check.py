"""Checking ``kind = "process"`` nodes when a workflow is loaded, apart from running them: ``workrun check``
loads this and not the call path (effects, the runner's processes), SPEC §24."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from workrun.core.errors import ConfigError
from workrun.core.models import NodeSpec, OutputField, ProcessNode
from workrun.nodes.base import Where
from workrun.runner.apps import load_app, project_not_found

__all__ = ["ProcessChecker"]


class ProcessChecker:
    """Checks a process node (a :class:`~workrun.nodes.base.NodeChecker`); the executor
    (:class:`~workrun.nodes.process.ProcessExecutor`) is one too."""

    kind: ClassVar[str] = "process"

    def check(self, node: NodeSpec, where: Where) -> dict[str, OutputField]:
        """``project`` and ``app`` present, the project a directory, the App a process App; return its contract.

        Raises:
            ConfigError: naming the field.
        """
        assert isinstance(node, ProcessNode)
        for field in ("project", "app"):
            if not getattr(node, field):
                raise ConfigError("is required for a process node", file=where.file, field=where.at(field))
        project, app_name = str(node.project), str(node.app)
        if not Path(project).is_dir():
            raise ConfigError(project_not_found(project), file=where.file,
                              field=where.at("project"))
        app = load_app(Path(project), app_name, file=where.file, field=where.at("app"))
        if app.kind != "process":
            raise ConfigError(f"App {app_name!r} is a {app.kind} App; a process node needs a process App",
                              file=where.file, field=where.at("app"))
        return dict(app.output)
