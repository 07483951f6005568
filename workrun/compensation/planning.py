"""Pure compensation ordering and hold-back logic (R-C3, R-C4). No I/O: unit-tested over graph shapes.

The graph's vertices are a run's operations; an edge B -> A means call B
depends on call A (B's ``depends_on`` holds A). Compensation runs against
the edges: A's compensation may start only when every operation downstream of
A is *cleared*. An operation is cleared when its own compensation is done
(``succeeded`` or ``skipped``) or it has none (failed/unknown calls are never
compensated, R-C1), and everything downstream of it is cleared too.

An operation downstream whose compensation is ``failed``, ``unknown`` or
``blocked`` *holds back* A: A becomes ``blocked`` with a reason naming each
holder (node key and compensation id), instead of being cleaned under it.
Independent branches are unaffected. When the holders clear (an operator
resolves or retries them), A returns to ``pending``.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from typing import Any

from workrun.core.states import COMPENSATION_DONE as DONE
from workrun.core.states import COMPENSATION_HOLDING as HOLDING
from workrun.core.structs import field, struct

__all__ = ["Item", "Plan", "plan", "reverse_order"]


@struct(frozen=True)
class Item:
    """One operation of the run, as the planner sees it.

    Attributes:
        operation_id: the call.
        node_key: its node (for reasons).
        depends_on: upstream operation ids.
        compensation_id: None when the call has no compensation record (not eligible).
        status: the compensation's status (None when there is none).
        held_back: True when ``blocked`` only because of holders downstream (the planner's own
            doing); False when blocked for its own reason (e.g. a code change).
        held_back_by: the compensation ids that held it back when it was last blocked (``held_back``).
    """

    operation_id: str
    node_key: str
    depends_on: tuple[str, ...] = ()
    compensation_id: str | None = None
    status: str | None = None
    held_back: bool = False
    held_back_by: tuple[str, ...] = ()


@struct
class Plan:
    """What to do now.

    Attributes:
        ready: compensation ids (``pending``) whose downstream is all cleared, in a stable order.
        hold: ``{compensation id: [holder compensation ids]}`` to set or keep ``blocked`` (held back).
        release: compensation ids currently held back whose holders have cleared -> ``pending``.
        waiting: compensation ids that wait for downstream work still pending/running.
    """

    ready: list[str] = field(default_factory=list)
    hold: dict[str, list[str]] = field(default_factory=dict)
    release: list[str] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)


def plan(items: list[Item]) -> Plan:
    """Compute which compensations may start, which are held back and which are released.

    Args:
        items: every operation of the run (dependencies to operations not listed are ignored).

    Returns:
        A :class:`Plan`. Holders named for X are the nearest downstream compensations that are
        ``failed``, ``unknown`` or blocked for their own reason, looking through held-back ones
        and through operations without a compensation; a held-back X keeps the holders it had while they
        are being retried (``pending``, ``running``): it is released only once they succeed (SPEC §10).
    """
    by_id = {i.operation_id: i for i in items}
    downstream: dict[str, list[str]] = {i.operation_id: [] for i in items}
    for i in items:
        for dep in i.depends_on:
            if dep in downstream and i.operation_id not in downstream[dep]:
                downstream[dep].append(i.operation_id)

    cleared_memo: dict[str, bool] = {}
    holders_memo: dict[str, list[str]] = {}

    def own_done(i: Item) -> bool:
        return i.compensation_id is None or i.status in DONE

    def cleared(op: str, trail: frozenset[str] = frozenset()) -> bool:
        if op in cleared_memo:
            return cleared_memo[op]
        if op in trail:  # a cycle cannot come from a DAG of calls; treat as not cleared
            return False
        i = by_id[op]
        value = own_done(i) and all(cleared(d, trail | {op}) for d in downstream[op])
        cleared_memo[op] = value
        return value

    def holders(op: str, trail: frozenset[str] = frozenset()) -> list[str]:
        """Root holders at or below ``op`` (op itself included when it is a holder)."""
        if op in holders_memo:
            return holders_memo[op]
        if op in trail:
            return []
        i = by_id[op]
        found: list[str] = []
        if i.compensation_id is not None and i.status in HOLDING and not (i.status == "blocked" and i.held_back):
            found = [i.compensation_id]
        else:
            for d in downstream[op]:
                for h in holders(d, trail | {op}):
                    if h not in found:
                        found.append(h)
        holders_memo[op] = found
        return found

    status_of = {i.compensation_id: i.status for i in items if i.compensation_id is not None}
    result = Plan()
    for i in items:
        if i.compensation_id is None or i.status in DONE:
            continue
        below: list[str] = []
        for d in downstream[i.operation_id]:
            for h in holders(d):
                if h not in below:
                    below.append(h)
        if i.status == "blocked" and not i.held_back:
            continue  # blocked for its own reason: only an operator changes that
        if i.status == "blocked" and i.held_back:  # a holder being retried holds it until it succeeds (SPEC §10)
            below += [h for h in i.held_back_by if status_of.get(h) in ("pending", "running") and h not in below]
        if below:
            if i.status in ("pending", "blocked"):
                result.hold[i.compensation_id] = below
            continue
        if i.status == "blocked" and i.held_back:
            result.release.append(i.compensation_id)
            continue
        if i.status != "pending":
            continue
        if all(cleared(d) for d in downstream[i.operation_id]):
            result.ready.append(i.compensation_id)
        else:
            result.waiting.append(i.compensation_id)
    return result


def reverse_order(ops: Sequence[Mapping[str, Any]]) -> list[str]:
    """Operation ids in compensation order (R-C3): a call before every call it depends on, the newest first among
    independent ones, as :func:`workrun.compensation.compensate_run` starts them. The one numbering of places
    that ``compensate --dry-run``, ``graph RUN`` and the dashboard's badges show.

    Args:
        ops: the run's operations, oldest first, each with ``operation_id`` and ``depends_on`` (ids or None).

    O(n log n) in the number of calls (the dashboard orders a run of many agent tool calls on every page).
    """
    ids = [o["operation_id"] for o in ops]
    index = {op_id: i for i, op_id in enumerate(ids)}
    waiting = dict.fromkeys(ids, 0)  # how many calls downstream of each are not placed yet
    upstream: dict[str, list[str]] = {i: [] for i in ids}
    for o in ops:
        for dep in dict.fromkeys(o["depends_on"] or ()):
            if dep in index and dep != o["operation_id"]:
                waiting[dep] += 1
                upstream[o["operation_id"]].append(dep)
    ready = [-index[i] for i in ids if waiting[i] == 0]  # a heap: the newest ready call first
    heapq.heapify(ready)
    placed: list[str] = []
    done: set[str] = set()
    while len(placed) < len(ids):
        if not ready:  # a cycle cannot come from calls; place the newest left as it is
            ready = [-max(index[i] for i in ids if i not in done)]
        op_id = ids[-heapq.heappop(ready)]
        if op_id in done:
            continue
        placed.append(op_id)
        done.add(op_id)
        for dep in upstream[op_id]:
            waiting[dep] -= 1
            if waiting[dep] == 0 and dep not in done:
                heapq.heappush(ready, -index[dep])
    return placed
