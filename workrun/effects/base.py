"""The protocol of a journaled side effect (issue 27): what Workrun must know of each kind of call.

A side effect is one call that changes the world: an App process, an HTTP request (and, later, an
email, an SMS, a data update). Each kind is one :class:`Effect`, registered in
:mod:`workrun.effects`; nothing outside ``workrun/effects/`` branches on the kind of a call.
The life of a call, each step journaled before the next (R-J1, R-R3):

1. *prepare* what will be sent or started (templates filled once, R-X1);
2. *intent* (``starting``) -> *start/send* (``running``) -> *outcome* (``succeeded`` | ``failed`` | ``unknown``);
3. after a crash, *settle* an in-flight call from what it left (exit record, claim) — never start it again;
4. *compensate with* its reverse: an attempt of a compensation, journaled the same way.

The transport (this process, or a worker's executor through a shared journal) is the runner's
(:class:`~workrun.runner.base.AppRunner`: ``start``/``wait`` for processes, ``send_request`` for
requests), injected once in the :class:`~workrun.runner.context.Context`: no effect names it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from workrun.core.errors import StaleStatusError
from workrun.core.rows import AttemptRow, CompensationRow, OperationRow
from workrun.core.structs import struct

if TYPE_CHECKING:
    from workrun.effects.operations import Attempted
    from workrun.runner.context import Context

__all__ = ["ActionOnly", "Compensator", "Effect", "Planned", "begin_attempt"]


@struct(frozen=True)
class Planned:
    """How a succeeded call is compensated (R-C1, R-C2), as its compensation record stores it.

    Attributes:
        kind: the name of the :class:`Effect` that runs its attempts.
        context: what the record's ``context`` adds to the common keys (e.g. ``reverse_action``).
        knobs: ``{"max_attempts", "timeout", "backoff", "idempotent"}`` (R-C7).
    """

    kind: str
    context: dict[str, Any]
    knobs: dict[str, Any]


class Compensator(Protocol):
    """What runs a compensation's attempts (R-C7, R-R3, R-V1): every kind of side effect, and the kinds that are
    only ever a compensation's action (an email, a data update).

    Attributes:
        name: the kind's name (``app``, ``http``, ``email``, ``data``), stored in the compensation records.
    """

    name: str

    def run_attempt(self, svc: Context, comp: CompensationRow, op: OperationRow, trigger: str) -> Attempted:
        """Make one attempt of a compensation this kind runs (R-C7); journaled as intent -> running -> finished."""

    def recover_attempt(self, svc: Context, comp: CompensationRow, attempt: AttemptRow, *,
                        claim_wait: float) -> CompensationRow:
        """Settle an attempt a dead runner left in flight (R-R3); return the compensation row afterwards."""

    def run_again(self, svc: Context, comp: CompensationRow, op: OperationRow) -> str | None:
        """Make a succeeded compensation's attempt once more with the same context and key, outside the journal
        (``workrun verify``'s idempotency check, R-V1); None when it succeeded again, else why not."""


class Effect(Compensator, Protocol):
    """One kind of journaled side effect that a node's operation can be (see the module doc): it also settles,
    ends, describes and plans the compensation of its operations."""

    def settle_operation(self, svc: Context, op: OperationRow, *, claim_wait: float) -> OperationRow:
        """Decide an operation a dead runner left in flight (R-R3) and journal it; return the row afterwards.
        ``claim_wait``: seconds left of the recovery pass's window for a launcher's claim."""

    def end_operation(self, svc: Context, op: OperationRow) -> OperationRow:
        """End an in-flight operation of a run whose scheduler is gone (``workrun stop``, R-C9); return the row."""

    def describe(self, op: OperationRow) -> str:
        """What the operation called, for people: ``App NAME (PROJECT)``, ``http node KEY``."""

    def plan(self, op: OperationRow) -> Planned | None:
        """How this kind compensates ``op`` (a succeeded call), or None when it does not."""

    def no_compensation(self, op: OperationRow) -> str:
        """The reason a call of this kind has no compensation (a ``skipped`` record's reason)."""


class ActionOnly:
    """A base for the kinds that are only ever a compensation's action (an email, a data update): each is a
    :class:`Compensator`, never a node's operation, and is planned by the HTTP kind whose written form (an
    ACTION) it shares."""

    name = "action"

    def begin_attempt(self, svc: Context, comp: CompensationRow, trigger: str) -> AttemptRow | None:
        """As :func:`begin_attempt`."""
        return begin_attempt(svc, comp, trigger)


def begin_attempt(svc: Context, comp: CompensationRow, trigger: str) -> AttemptRow | None:
    """Journal the intent of a compensation's next attempt with no process of its own (a reverse action, R-C3):
    ``{"compensation_id", "number", "trigger"}``, or None when another process moved the compensation on first
    (its status is no longer ``comp["status"]``: nothing was written, nothing may be sent)."""
    cid = comp["compensation_id"]
    number = len(svc.journal.attempts(cid)) + 1
    try:
        svc.journal.start_attempt(cid, number, trigger=trigger, call_dir="", seen=comp["status"], at=svc.now())
    except StaleStatusError:
        return None
    return {"compensation_id": cid, "number": number, "trigger": trigger}
