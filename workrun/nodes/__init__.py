"""Node executors, one per ``kind`` (``base.py`` has the contract).

:func:`default_executors` is the registry the CLI and recovery hand to the engine;
a new kind is one line here (and its spec class in :mod:`workrun.core.models`). Each
kind's module is imported when the registry is first asked for that kind, so a
workflow of process nodes never loads the agent, remote or HTTP code (R-P3).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping

from workrun.nodes.base import NodeExecutor, NodeJob, Where

__all__ = ["NodeExecutor", "NodeJob", "Where", "default_executors"]

# kind -> (module, executor class), in the order kinds are listed to the user; the classes are imported from
# their modules (``workrun.nodes.process.ProcessExecutor``...)
_KINDS = {
    "process": ("workrun.nodes.process", "ProcessExecutor"),
    "agent": ("workrun.nodes.agent", "AgentExecutor"),
    "remote_agent": ("workrun.nodes.remote", "RemoteExecutor"),
    "http": ("workrun.nodes.http", "HttpExecutor"),
}


class _Registry(Mapping[str, NodeExecutor]):
    """``{kind: executor}`` whose executors are created (their modules imported) on first use."""

    def __init__(self) -> None:
        self._made: dict[str, NodeExecutor] = {}

    def __getitem__(self, kind: str) -> NodeExecutor:
        made = self._made.get(kind)
        if made is None:
            module, cls = _KINDS[kind]
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
    return _Registry()
