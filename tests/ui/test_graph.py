"""Pure logic of the dashboard: the layered graph layout and compensation order (R-U2), and the SPEC §16 roll-up."""

from __future__ import annotations

from typing import Any

import pytest

from workrun.ui.graph import compensation_order, dependencies, layers, layout
from workrun.views import compensation_rollup, rollup_line


def op(oid: str, node: str, comp: dict[str, Any] | None) -> dict[str, Any]:
    return {"operation_id": oid, "node_key": node, "app": "a", "compensation": comp}


def comp(cid: str, status: str, started: str | None = None, held: list[str] | None = None) -> dict[str, Any]:
    attempts = [{"started_at": started}] if started else []
    return {"compensation_id": cid, "status": status, "attempts": attempts, "held_back_by": held or [],
            "reason": None}


SPEC = {"nodes": {
    "a": {"key": "a"},
    "b": {"key": "b", "needs": ["a"]},
    "c": {"key": "c", "input": {"x": "{{ nodes.a.result.id }}", "y": ["{{nodes.b.result.z}}"]}},
    "d": {"key": "d", "needs": ["c"], "prompt": "use {{ nodes.nope.result.q }} and {{ inputs.k }}"},
}}


def test_edges_from_needs_and_template_references() -> None:
    deps = dependencies(SPEC["nodes"])
    assert deps == {"a": [], "b": [("a", "needs")], "c": [("a", "template"), ("b", "template")],
                    "d": [("c", "needs")]}
    assert layers(list(SPEC["nodes"]), deps) == {"a": 0, "b": 1, "c": 2, "d": 3}


def test_layout_places_columns_by_depth_and_stacks_badges() -> None:
    view = {"nodes": [{"node_key": k, "status": s, "handled": False} for k, s in
                      (("a", "succeeded"), ("b", "succeeded"), ("c", "failed"), ("d", "skipped"))],
            "operations": [op("o1", "a", comp("k1", "succeeded", "2026-01-01T00:00:02")),
                           op("o2", "b", comp("k2", "succeeded", "2026-01-01T00:00:01")),
                           op("o3", "c", None)]}
    g = layout(SPEC, view)
    boxes = {b.key: b for b in g.boxes}
    assert boxes["a"].x < boxes["b"].x < boxes["c"].x < boxes["d"].x
    assert boxes["a"].h > boxes["c"].h  # one badge row
    assert [(bd.compensation_id, bd.order) for bd in boxes["a"].badges] == [("k1", 2)]
    assert [(bd.compensation_id, bd.order) for bd in boxes["b"].badges] == [("k2", 1)]  # reverse order: b first
    assert {(e.src, e.dst, e.kind) for e in g.edges} == {("a", "b", "needs"), ("a", "c", "template"),
                                                         ("b", "c", "template"), ("c", "d", "needs")}
    assert g.width >= boxes["d"].x + boxes["d"].w and g.height >= max(b.y + b.h for b in g.boxes)


def test_layout_without_spec_and_with_hostile_keys() -> None:
    key = 'x"<y>'
    g = layout(None, {"nodes": [{"node_key": key, "status": "running"}], "operations": []})
    assert [b.key for b in g.boxes] == [key] and g.edges == []


def test_compensation_order_started_then_planned_then_skipped() -> None:
    view = {"operations": [op("o1", "a", comp("k1", "blocked", held=["k3"])), op("o2", "b", comp("k2", "skipped")),
                           op("o3", "c", comp("k3", "failed", "2026-01-01T00:00:05")),
                           op("o4", "d", comp("k4", "pending")), op("o5", "e", None)]}
    order = compensation_order(view)
    assert [(o["compensation_id"], o["order"]) for o in order] == [("k3", 1), ("k4", 2), ("k1", 3), ("k2", None)]


@pytest.mark.parametrize("counts, state, line", [
    ({}, None, ""),
    ({"succeeded": 2, "skipped": 1}, "complete", "compensated: 3 of 3"),
    ({"succeeded": 1, "running": 1, "pending": 1}, "in_progress", "compensating: 1 of 3 done"),
    ({"succeeded": 1, "failed": 1, "blocked": 1, "pending": 1}, "needs_attention",
     "needs attention: 1 failed, 1 blocked"),
    ({"unknown": 1}, "needs_attention", "needs attention: 1 unknown"),
])
def test_rollup(counts: dict[str, int], state: str | None, line: str) -> None:
    rollup = compensation_rollup(counts)
    assert rollup["compensation"] == state
    assert sum(rollup["compensation_counts"].values()) == sum(counts.values())
    assert set(rollup["compensation_counts"]) == {"pending", "running", "succeeded", "failed", "blocked", "unknown",
                                                  "skipped"}
    assert rollup_line(rollup) == line
