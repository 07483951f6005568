"""The contract between the engine and the executors of node kinds (one executor per ``kind``).

An executor knows how to run one kind of node; it knows nothing of the engine,
of scheduling or of failure policies other than what its own kind needs. The
engine is handed a registry ``{kind: executor}``; registering a new kind is one
entry in :func:`workrun.nodes.default_executors` plus its spec class in
:mod:`workrun.core.models`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from workrun.core import structs
from workrun.core.models import NodeSpec, OutputField
from workrun.core.outcomes import NodeOutcome
from workrun.core.structs import struct

if TYPE_CHECKING:  # a name in annotations only: checking a workflow needs no runner or journal (SPEC §24)
    from workrun.runner.context import Context

__all__ = ["NodeChecker", "NodeExecutor", "NodeJob", "Where"]


@struct(frozen=True)
class Where:
    """Where a node is written: the workflow ``file``, the node's field prefix (``nodes.KEY``) and the workflow's
    ``[connectors]`` (R-K1) its requests may name."""

    file: str
    field: str
    connectors: Mapping[str, Any] = structs.field(default_factory=dict)

    def at(self, sub: str) -> str:
        """The full field name of ``sub`` (``nodes.KEY.sub``)."""
        return f"{self.field}.{sub}" if sub else self.field


@struct
class NodeJob:
    """Everything an executor needs to run one node of one run.

    Attributes:
        run_id: the run.
        node: the node's spec (its ``kind``'s class; ``on_failure`` already parsed).
        context: the template context ``{"inputs": {...}, "nodes": {key: {"result": ...}}}`` of done nodes.
        depends_on: succeeded upstream operation ids its calls depend on (compensation order, R-C3).
        svc: services (journal, App runner, reporter, stop event).
        should_stop: returns True once the run is being stopped (R-C9); cheap, call it often.
        fresh: the node was ``pending`` when it was scheduled: it has no call yet, so an executor need not read
            its earlier calls back (a node resumed after a restart is not fresh).
    """

    run_id: str
    node: NodeSpec
    context: dict[str, Any]
    depends_on: list[str]
    svc: Context
    should_stop: Callable[[], bool] = structs.field(default=lambda: False)
    fresh: bool = False

    def say(self, level: str, text: str) -> None:
        """Record a message on this node (journal + reporter)."""
        self.svc.say(self.run_id, self.node.key, level, text)

    def wait_left_backoff(self, last_failed_at: float | None, delay: float, what: str) -> bool:
        """A node resumed after a restart between two calls of ``on_failure = { retry }`` (R-W7): wait what is left
        of the backoff ``delay`` (seconds) after its last failed call ended (epoch seconds ``last_failed_at``), as
        the runner that died would have (conformance review: the next call started at once). ``what``: the
        "call N of M" words of the message. True when the run was stopped meanwhile."""
        if last_failed_at is None:
            return False
        left = last_failed_at + delay - self.svc.now()
        if left <= 0:
            return False
        self.say("warning", f"retrying ({what}) in {left:.2g} s (on_failure = retry; resumed)")
        return self.svc.stop_event.wait(left)


class NodeChecker(Protocol):
    """Checks one kind of node when a workflow is loaded: all that ``workrun check`` needs of a kind, so a
    kind may give a checker that loads less than its executor (SPEC §24: ``check`` is quick)."""

    kind: ClassVar[str]

    def check(self, node: NodeSpec, where: Where) -> dict[str, OutputField]:
        """Check a node when the workflow is loaded (before any run exists, SPEC §10).

        Returns:
            The node result's declared fields (an App's output contract), or ``{}`` when unknown.

        Raises:
            ConfigError: naming ``where.file`` and the field.
        """


class NodeExecutor(NodeChecker, Protocol):
    """Checks and runs one kind of node. Knows nothing of the engine, and never writes its node's start: the
    engine does, and the journal holds it for the node's first write
    (:meth:`~workrun.journal.base.RunRecords.start_node`)."""

    def run(self, job: NodeJob) -> NodeOutcome:
        """Run the node to its end, in a worker thread; resume after a runner restart from the journal.

        Returns:
            ``succeeded`` with the node result, ``failed`` with a one-line error, or ``stopped``.
        """

    def after_run(self, svc: Context, run_id: str) -> None:
        """Called when a run ended ``failed`` or ``stopped`` (and again by ``resume``): e.g. remote: one cancel."""
