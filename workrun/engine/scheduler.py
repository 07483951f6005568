"""The pure part of driving a run (issue 27): which nodes may start, and what the ended ones mean for the run.

No journal, no threads, no clock: :class:`~workrun.engine.driver.Engine` feeds these the node rows it read and
the outcomes its node threads returned, and does the writing. Property tests (``tests/test_scheduler.py``)
check them on random workflows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from workrun.core.outcomes import NodeOutcome
from workrun.core.rows import NodeRow
from workrun.core.structs import field, struct

__all__ = ["ReadySet", "Verdict"]


@struct
class ReadySet:
    """Which pending nodes of a run may start now (R-W1, R-W2), looking only at nodes whose readiness may have
    changed (issue 14: O(changes) per step).

    Attributes:
        deps: ``{node: its dependencies}`` (``needs`` and template references).
        standby: fallback nodes: run in their primary's thread, never scheduled on their own (R-W4).
        position: ``{node: its place in the workflow}``; ready nodes come in workflow order.
        dependents: ``{node: nodes that depend on it}``.
        check: nodes to look at again (every node at first).
    """

    deps: Mapping[str, tuple[str, ...]]
    standby: frozenset[str]
    position: Mapping[str, int]
    dependents: Mapping[str, frozenset[str]]
    check: set[str] = field(default_factory=set)

    @classmethod
    def of(cls, deps: Mapping[str, Iterable[str]], standby: Iterable[str]) -> ReadySet:
        """The ready set of a workflow whose nodes, in workflow order, are ``deps``' keys."""
        graph = {k: tuple(ds) for k, ds in deps.items()}
        dependents: dict[str, set[str]] = {k: set() for k in graph}
        for k, ds in graph.items():
            for d in ds:
                dependents.setdefault(d, set()).add(k)
        return cls(graph, frozenset(standby), {k: i for i, k in enumerate(graph)},
                   {k: frozenset(v) for k, v in dependents.items()}, set(graph))

    def moved(self, keys: Iterable[str]) -> None:
        """Nodes whose state changed: they, and the nodes that depend on them, are looked at again."""
        for key in keys:
            self.check.add(key)
            self.check |= self.dependents.get(key, frozenset())

    def ready(self, known: Mapping[str, NodeRow], active: Iterable[str], slots: int) -> list[str]:
        """Up to ``slots`` nodes to start now, in workflow order: ``pending`` in ``known`` (the node rows read),
        not a fallback, not running in a thread (``active``), every dependency ``succeeded`` or ``handled``.

        A node that is not ready yet is looked at again only when one of its dependencies moves; nodes left
        over when the slots ran out are looked at next time.
        """
        running = set(active)
        out: list[str] = []
        for key in sorted(self.check, key=lambda k: self.position.get(k, len(self.position))):
            row = known.get(key)
            if row is None or row["status"] != "pending" or key in self.standby or key in running:
                self.check.discard(key)
                continue
            if len(out) >= slots:
                break  # the rest stay to be looked at when a slot frees
            self.check.discard(key)
            if all(known[d]["status"] == "succeeded" or known[d]["handled"] for d in self.deps.get(key, ())):
                out.append(key)
        return out


@struct
class Verdict:
    """What the ended nodes mean for the run: the first failure (nothing new starts after it, R-W3), a
    terminate policy (R-M5), or an injected failure after ``fail_after`` succeeded (R-V1, R-V3).

    Attributes:
        fail_after: the node after whose success the run fails as if its successor had failed, or None.
        failed_node: the first node that failed (or ``fail_after`` once it succeeded), else None.
        terminated: a node's policy terminated the run.
        ended: nodes that ended since the driver last read the journal.
    """

    fail_after: str | None = None
    failed_node: str | None = None
    terminated: bool = False
    ended: list[str] = field(default_factory=list)

    def node_ended(self, key: str, outcome: NodeOutcome) -> None:
        """Take in one node's outcome."""
        self.ended.append(key)
        if self.failed_node is None and (outcome.status == "failed"
                                         or (outcome.status == "succeeded" and key == self.fail_after)):
            self.failed_node = key
        self.terminated = self.terminated or outcome.status == "terminated"

    def resumed(self, known: Mapping[str, NodeRow]) -> None:
        """Take in what the journal says before any node runs here (a restart, ``resume``): a node that failed
        unhandled, or ``fail_after`` that succeeded, before the runner stopped: nothing new starts (R-W3)."""
        if self.failed_node is not None:
            return
        for key, row in known.items():  # in workflow order
            if (row["status"] == "failed" and not row["handled"]) or (key == self.fail_after
                                                                       and row["status"] == "succeeded"):
                self.failed_node = key
                return

    def take_ended(self) -> list[str]:
        """The nodes that ended since the last call (then none)."""
        ended, self.ended = self.ended, []
        return ended

    @property
    def starts_more(self) -> bool:
        """True while new nodes may start: nothing failed and nothing terminated the run."""
        return self.failed_node is None and not self.terminated
