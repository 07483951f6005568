"""Node executors, one per ``kind`` (``base.py`` has the contract).

:func:`default_executors` is the registry the CLI and recovery hand to the engine;
a new kind is one line here (and its spec class in :mod:`workrun.core.models`). Each
kind's module is imported when the registry is first asked for that kind, so a
workflow of process nodes never loads the agent, remote or HTTP code (R-P3).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from typing import Any

from workrun.nodes.base import NodeChecker, NodeExecutor, NodeJob, Where

__all__ = ["NodeChecker", "NodeExecutor", "NodeJob", "Where", "default_checkers", "default_executors"]

# kind -> (module, executor class), in the order kinds are listed to the user; the classes are imported from
# their modules (``workrun.nodes.process.ProcessExecutor``...)
_KINDS = {
    "process": ("workrun.nodes.process", "ProcessExecutor"),
    "agent": ("workrun.nodes.agent", "AgentExecutor"),
    "remote_agent": ("workrun.nodes.remote", "RemoteExecutor"),
    "http": ("workrun.nodes.http", "HttpExecutor"),
}


# kind -> (module, checker class) where a kind's load-time check loads less than its executor (``workrun check``)
_CHECKERS = {
    "process": ("workrun.nodes.process_check", "ProcessChecker"),
}


class _Registry(Mapping[str, Any]):
    """``{kind: executor}`` (or checker) whose objects are created (their modules imported) on first use."""

    def __init__(self, where: Mapping[str, tuple[str, str]]) -> None:
        self._where = where
        self._made: dict[str, Any] = {}

    def __getitem__(self, kind: str) -> Any:
        made = self._made.get(kind)
        if made is None:
            module, cls = self._where[kind]
            made = self._made[kind] = getattr(importlib.import_module(module), cls)()
        return made

    def __iter__(self) -> Iterator[str]:
        return iter(_KINDS)

    def __len__(self) -> int:
        return len(_KINDS)

    def __contains__(self, kind: object) -> bool:
        return kind in _KINDS


def default_executors() -> Mapping[str, NodeExecutor]:
    """``{kind: executor}`` of every built-in node kind (each created when first asked for)."""
    return _Registry(_KINDS)


def default_checkers() -> Mapping[str, NodeChecker]:
    """``{kind: checker}`` of every built-in node kind, for loading a workflow that is not run (``workrun check``,
    ``graph``): a kind's own checker where it has one that loads less than its executor, else its executor."""
    return _Registry({**_KINDS, **_CHECKERS})
