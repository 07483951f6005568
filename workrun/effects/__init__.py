"""Side effects, one module per kind, behind one protocol (:class:`~workrun.effects.base.Effect`, issue 27).

- :mod:`workrun.effects.app_call`: App processes (node calls, Tool App calls, compensation scripts);
- :mod:`workrun.effects.http_request`: HTTP requests (http nodes, HTTP reverse actions, SMS through a connector);
- :mod:`workrun.effects.email`: email reverse actions over SMTP;
- :mod:`workrun.effects.data`: ``update_data`` reverse actions (a write to the run's data with a receipt).

Adding a kind is one module plus its :func:`register` line below. Everything outside this package that
must treat calls differently by kind asks :func:`for_operation` or :func:`for_compensation`.
"""

from __future__ import annotations

import time

from workrun.core.rows import CompensationRow, OperationRow
from workrun.effects.app_call import AppCall
from workrun.effects.base import Compensator, Effect, Planned
from workrun.effects.data import DataUpdate
from workrun.effects.email import Email
from workrun.effects.http_request import HttpRequest
from workrun.effects.operations import current_owner, owner_gone
from workrun.runner.base import CLAIM_WAIT
from workrun.runner.context import Context

__all__ = ["Compensator", "Effect", "Planned", "for_compensation", "for_operation", "operation_connector", "plan",
           "register", "register_action", "settle_operations"]

_BY_NAME: dict[str, Compensator] = {}
_BY_OPERATION_KIND: dict[str, Effect] = {}
_PLANNERS: list[Effect] = []  # asked in turn how a succeeded call is compensated
_DEFAULT = "app"


def register(effect: Effect, *, operation_kinds: tuple[str, ...]) -> None:
    """Make ``effect`` the one for operations of ``operation_kinds`` and for compensations named like it; it is
    asked, before those registered earlier, how a succeeded call is compensated.

    Args:
        effect: the kind (its ``name`` is stored in compensation records it plans).
        operation_kinds: the ``operations.kind`` values whose calls it makes.
    """
    register_action(effect)
    for kind in operation_kinds:
        _BY_OPERATION_KIND[kind] = effect
    _PLANNERS.insert(0, effect)


def register_action(action: Compensator) -> None:
    """Make ``action`` the one that runs the attempts of compensations named like it (a kind that is only ever
    a compensation's action, planned by another kind as its written form)."""
    _BY_NAME[action.name] = action


register(AppCall(), operation_kinds=("process", "tool"))
register(HttpRequest(), operation_kinds=("http",))  # asked first: an App may declare a reverse action (R-H6)
register_action(Email())  # an email reverse action, planned by the HTTP kind as its written form (R-K2)
register_action(DataUpdate())  # an update_data reverse action, likewise (R-K4)


def for_operation(op: OperationRow) -> Effect:
    """The effect that made ``op`` (by its ``kind``; an App call for any kind not registered)."""
    return _BY_OPERATION_KIND.get(op.get("kind") or "", _BY_OPERATION_KIND["process"])


def operation_connector(op: OperationRow) -> str | None:
    """The connector ``op``'s request went through (R-K1); None when it names none or is no request (an App
    call's input is the App's own data, whatever keys it has)."""
    if not isinstance(for_operation(op), HttpRequest):
        return None
    name = (op.get("input") or {}).get("connector")
    return name if isinstance(name, str) else None


def for_compensation(comp: CompensationRow) -> Compensator:
    """The effect that runs ``comp``'s attempts: the one its record names (``context.effect``), else an HTTP
    reverse action when the record carries one, else an App's compensation script."""
    context = comp.get("context") or {}
    action = context.get("reverse_action") or {}
    name = context.get("effect") or ({"email": "email", "update_data": "data"}.get(action.get("kind") or "", "http")
                                     if action else _DEFAULT)
    return _BY_NAME.get(name, _BY_NAME[_DEFAULT])


def plan(op: OperationRow) -> Planned | None:
    """How a succeeded call is compensated (the first registered effect that compensates it), or None."""
    for effect in _PLANNERS:
        planned = effect.plan(op)
        if planned is not None:
            return planned
    return None


def settle_operations(svc: Context, run_id: str | None) -> list[OperationRow]:
    """Settle the in-flight operations of a run (of standalone calls when ``run_id`` is None) after a restart.

    Only calls whose owner is gone are settled: a call whose owning process still lives (another
    ``workrun app run``, or this process) is left to it. On a shared journal the run's claim decides
    instead (R-R3, R-F2): a scheduler holding the claim of ``run_id`` settles every call of the run that
    another process made, alive or not (a frozen worker whose lease passed has lost the run; its call is
    decided from its call directory and exit record, never started again). An orphaned call is adopted
    first (a conditional write), so of two recoverers only one settles it. Each is decided by its effect
    (:meth:`~workrun.effects.base.Effect.settle_operation`), exactly as a live call would be (R-R1, R-R3).

    Returns:
        The operation rows afterwards.
    """
    settled = []
    me_pid, me_start = current_owner()
    claim_by = time.monotonic() + CLAIM_WAIT  # one window for every call of this pass (see CLAIM_WAIT)
    by_claim = run_id is not None and svc.runner.decides_by_claim
    for op in svc.journal.operations_in_flight(run_id):
        mine = op.get("owner_pid") == me_pid and op.get("owner_start") == me_start
        if mine or not (by_claim or owner_gone(op)):
            continue
        if not svc.journal.adopt_operation(op["operation_id"], owner_pid=me_pid, owner_start=me_start,
                                           seen_pid=op.get("owner_pid"), seen_start=op.get("owner_start")):
            continue
        if run_id:  # said first: a call still running is waited for, which may take until its deadline
            svc.say(run_id, op["node_key"], "info",
                    f"operation {op['operation_id']} was in flight when the runner stopped: its outcome is decided "
                    "from its process and exit record (while its process runs, up to its deadline, this waits)")
        row = for_operation(op).settle_operation(svc, op, claim_wait=max(0.0, claim_by - time.monotonic()))
        if run_id:
            svc.say(run_id, op["node_key"], "warning",
                    f"operation {op['operation_id']} was in flight when the runner stopped; recovered: "
                    f"{row['status']}" + (f" ({row['error']})" if row["error"] else ""))
        settled.append(row)
    return settled
