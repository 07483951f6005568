"""Pure tests of compensation ordering and hold-back (R-C3, R-C4) over many graph shapes."""

from __future__ import annotations

import random

import pytest

from workrun.compensation.planning import Item, plan


def simulate(ops: dict[str, list[str]], has_comp: dict[str, bool], fails: set[str]) -> tuple[dict[str, str], list[str]]:
    """Run the planner to a fixed point; ready ones 'run' (succeed, or fail when in ``fails``).

    Returns (final status by op, order in which compensations ran).
    """
    status = {op: ("pending" if has_comp[op] else None) for op in ops}
    held = {op: False for op in ops}
    order: list[str] = []
    for _ in range(10 * len(ops) + 10):
        items = [Item(op, op, tuple(deps), f"c-{op}" if has_comp[op] else None, status[op], held[op])
                 for op, deps in ops.items()]
        p = plan(items)
        changed = False
        for cid in p.hold:
            op = cid[2:]
            if status[op] != "blocked":
                status[op], held[op], changed = "blocked", True, True
        for cid in p.release:
            op = cid[2:]
            status[op], held[op], changed = "pending", False, True
        for cid in p.ready:
            op = cid[2:]
            status[op] = "failed" if op in fails else "succeeded"
            order.append(op)
            changed = True
        if not changed:
            break
    return status, order


def downstream_closure(ops: dict[str, list[str]], op: str) -> set[str]:
    below: set[str] = set()
    stack = [o for o, deps in ops.items() if op in deps]
    while stack:
        cur = stack.pop()
        if cur not in below:
            below.add(cur)
            stack.extend(o for o, deps in ops.items() if cur in deps)
    return below


def test_chain_runs_newest_first():
    ops = {"a": [], "b": ["a"], "c": ["b"]}
    status, order = simulate(ops, {k: True for k in ops}, set())
    assert order == ["c", "b", "a"]
    assert set(status.values()) == {"succeeded"}


def test_diamond_waits_for_both_branches():
    ops = {"a": [], "b": ["a"], "c": ["a"], "d": ["b", "c"]}
    _, order = simulate(ops, {k: True for k in ops}, set())
    assert order[0] == "d" and order[-1] == "a" and set(order[1:3]) == {"b", "c"}


def test_failure_holds_back_upstream_only():
    ops = {"upload": [], "publish": ["upload"], "notify": [], "boom": ["publish", "notify"]}
    has = {"upload": True, "publish": True, "notify": True, "boom": False}
    status, order = simulate(ops, has, {"publish"})
    assert status == {"upload": "blocked", "publish": "failed", "notify": "succeeded", "boom": None}
    assert "upload" not in order


def test_hold_reason_names_root_holders_through_held_back_and_uncompensated():
    items = [Item("a", "a", (), "c-a", "pending"), Item("b", "b", ("a",), None, None),
             Item("c", "c", ("b",), "c-c", "blocked", held_back=True), Item("d", "d", ("c",), "c-d", "unknown")]
    p = plan(items)
    assert p.hold == {"c-a": ["c-d"], "c-c": ["c-d"]}
    assert p.ready == []


def test_own_block_is_a_holder_and_never_released_by_planner():
    items = [Item("a", "a", (), "c-a", "pending"), Item("b", "b", ("a",), "c-b", "blocked", held_back=False)]
    p = plan(items)
    assert p.hold == {"c-a": ["c-b"]} and p.release == []


def test_release_after_holder_resolved():
    items = [Item("a", "a", (), "c-a", "blocked", held_back=True), Item("b", "b", ("a",), "c-b", "succeeded")]
    p = plan(items)
    assert p.release == ["c-a"] and p.hold == {}


@pytest.mark.parametrize("retried", ["pending", "running"])
def test_a_holder_being_retried_keeps_holding_until_it_succeeds(retried):
    """SPEC §10: "when it succeeds, compensations held back only by it become pending" (conformance review:
    an operator's retry released them at once, pending, and they were blocked again when it failed)."""
    held = Item("a", "a", (), "c-a", "blocked", held_back=True, held_back_by=("c-b",))
    p = plan([held, Item("b", "b", ("a",), "c-b", retried)])
    assert p.hold == {"c-a": ["c-b"]} and p.release == [] and "c-a" not in p.ready
    assert plan([held, Item("b", "b", ("a",), "c-b", "succeeded")]).release == ["c-a"]
    assert plan([held, Item("b", "b", ("a",), "c-b", "failed")]).hold == {"c-a": ["c-b"]}


def test_running_downstream_means_wait():
    items = [Item("a", "a", (), "c-a", "pending"), Item("b", "b", ("a",), "c-b", "running")]
    p = plan(items)
    assert p.ready == [] and p.waiting == ["c-a"] and p.hold == {}


def test_skipped_passes_through_in_order():
    ops = {"a": [], "b": ["a"], "c": ["b"]}
    status, order = simulate(ops, {"a": True, "b": False, "c": True}, set())
    assert order == ["c", "a"]


@pytest.mark.parametrize("seed", range(60))
def test_random_dags_respect_order_and_isolation(seed):
    rng = random.Random(seed)
    n = rng.randint(1, 12)
    names = [f"o{i}" for i in range(n)]
    ops = {name: sorted(rng.sample(names[:i], k=rng.randint(0, min(i, 3)))) for i, name in enumerate(names)}
    has = {name: rng.random() < 0.8 for name in names}
    fails = {name for name in names if has[name] and rng.random() < 0.2}
    status, order = simulate(ops, has, fails)
    position = {op: i for i, op in enumerate(order)}
    for op in names:
        below = downstream_closure(ops, op)
        if op in position:
            # every compensated op downstream ran (and succeeded) before this one started (R-C3)
            for d in below:
                if has[d]:
                    assert d in position and position[d] < position[op], (ops, order)
                    assert status[d] == "succeeded"
        if not has[op]:
            assert status[op] is None
            continue
        blocked_by_failure = any(d in fails for d in below)
        if blocked_by_failure:
            assert status[op] == "blocked", (seed, op, ops, status)  # held back (R-C4)
        else:
            assert status[op] == ("failed" if op in fails else "succeeded"), (seed, op, ops, status)


def _slow_reverse_order(ops: list[dict]) -> list[str]:
    """The order by its definition, one step at a time: the newest call whose downstream calls are all placed."""
    ids = [o["operation_id"] for o in ops]
    downstream = {i: {o["operation_id"] for o in ops if i in (o["depends_on"] or ())} for i in ids}
    placed: list[str] = []
    while len(placed) < len(ids):
        placed.append(next(i for i in reversed(ids) if i not in placed and downstream[i] <= set(placed)))
    return placed


def test_reverse_order_is_its_definition_on_random_call_graphs_and_on_a_long_chain():
    """R-C3's order (the places dry-run, graph RUN and the dashboard show), computed with a heap (diff review:
    the step-by-step version took 0.4 s for 3,000 calls on every dashboard refresh)."""
    from workrun.compensation.planning import reverse_order

    rng = random.Random(7)
    for _ in range(2000):
        n = rng.randint(0, 12)
        ops = [{"operation_id": f"o{i}",
                "depends_on": rng.sample([f"o{j}" for j in range(i)], k=min(i, rng.randint(0, 3)))
                + (["gone"] if rng.random() < 0.1 else [])} for i in range(n)]
        assert reverse_order(ops) == _slow_reverse_order(ops), ops
    chain = [{"operation_id": f"o{i}", "depends_on": [f"o{i - 1}"] if i else None} for i in range(20000)]
    assert reverse_order(chain) == [f"o{i}" for i in reversed(range(20000))]  # (step by step: minutes)
