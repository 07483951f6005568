"""Pure logic of the dashboard: the layered graph layout and compensation order (R-U2), and the SPEC §16 roll-up."""

from __future__ import annotations

from typing import Any

import pytest

from workrun.app.views import compensation_rollup, rollup_line
from workrun.ui.graph import compensation_order, dependencies, layers, layout


def op(oid: str, node: str, comp: dict[str, Any] | None, deps: list[str] | None = None) -> dict[str, Any]:
    return {"operation_id": oid, "node_key": node, "app": "a", "compensation": comp, "depends_on": deps}


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
                           op("o2", "b", comp("k2", "succeeded", "2026-01-01T00:00:01"), ["o1"]),
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


def test_compensation_order_is_the_plans_places_whenever_they_started_skipped_last() -> None:
    """The badges' numbers are the places ``compensate --dry-run`` and ``graph RUN`` show (one numbering, dashboard
    review): a call before the calls it depends on, the newest first among independent ones, whatever order
    their first attempts happened to start in."""
    from workrun.compensation.planning import reverse_order

    view = {"operations": [op("o1", "a", comp("k1", "blocked", held=["k3"])), op("o2", "b", comp("k2", "skipped")),
                           op("o3", "c", comp("k3", "failed", "2026-01-01T00:00:05"), ["o1"]),
                           op("o4", "d", comp("k4", "succeeded", "2026-01-01T00:00:09")), op("o5", "e", None)]}
    order = compensation_order(view)
    assert [(o["compensation_id"], o["order"]) for o in order] == [("k4", 1), ("k3", 2), ("k1", 3), ("k2", None)]
    assert reverse_order(view["operations"]) == ["o5", "o4", "o3", "o2", "o1"]


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


def _points(d: str, steps: int = 24) -> list[tuple[float, float]]:
    """Points along an SVG path of M, C and L commands (what the layout draws)."""
    import re

    tokens = re.findall(r"[MCL]|-?\d+(?:\.\d+)?", d)
    out: list[tuple[float, float]] = []
    cur = (0.0, 0.0)
    i = 0
    while i < len(tokens):
        cmd = tokens[i]
        if cmd == "M":
            cur = (float(tokens[i + 1]), float(tokens[i + 2]))
            out.append(cur)
            i += 3
        elif cmd == "L":
            end = (float(tokens[i + 1]), float(tokens[i + 2]))
            out += [(cur[0] + (end[0] - cur[0]) * t / steps, cur[1] + (end[1] - cur[1]) * t / steps)
                    for t in range(1, steps + 1)]
            cur = end
            i += 3
        else:  # C x1,y1 x2,y2 x,y
            p = [float(v) for v in tokens[i + 1:i + 7]]
            c1, c2, end = (p[0], p[1]), (p[2], p[3]), (p[4], p[5])
            for t in (k / steps for k in range(1, steps + 1)):
                u = 1 - t
                out.append((u ** 3 * cur[0] + 3 * u * u * t * c1[0] + 3 * u * t * t * c2[0] + t ** 3 * end[0],
                            u ** 3 * cur[1] + 3 * u * u * t * c1[1] + 3 * u * t * t * c2[1] + t ** 3 * end[1]))
            cur = end
            i += 7
    return out


def _dag(n: int, seed: int) -> dict[str, Any]:
    import random

    rnd = random.Random(seed)
    nodes: dict[str, Any] = {}
    for i in range(n):
        key = f"step-{i:02d}" if i % 7 else f"a-rather-long-node-name-for-step-number-{i:02d}"
        ups = sorted({rnd.randrange(i) for _ in range(rnd.randint(0, 3))}) if i else []
        nodes[key] = {"key": key, "needs": [k for j, k in enumerate(nodes) if j in ups]}
    return {"nodes": nodes}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_fifty_nodes_no_edge_runs_under_a_box_and_names_are_whole(seed: int) -> None:
    """R-D6: at 50 nodes with edges that skip columns, every edge stays out of every box (sampled along its
    curves and lanes), boxes do not overlap, and every name is shown whole."""
    from workrun.ui.graph import NAME_CHARS

    spec = _dag(50, seed)
    view = {"nodes": [{"node_key": k, "status": "succeeded"} for k in spec["nodes"]], "operations": []}
    g = layout(spec, view)
    assert sorted(b.key for b in g.boxes) == sorted(spec["nodes"])
    long_skips = 0
    for b in g.boxes:
        assert "".join(b.lines) == b.key and all(len(line) <= NAME_CHARS for line in b.lines)
    for e in g.edges:
        pts = _points(e.d)
        long_skips += pts[-1][0] - pts[0][0] > 300
        for b in g.boxes:
            inside = [(x, y) for x, y in pts if b.x + 1 < x < b.x + b.w - 1 and b.y + 1 < y < b.y + b.h - 1]
            assert not inside, (e.src, e.dst, b.key, inside[:2])
    assert long_skips > 5  # the graph does have edges that pass other columns
    for i, a in enumerate(g.boxes):
        for b in g.boxes[i + 1:]:
            assert a.x + a.w <= b.x or b.x + b.w <= a.x or a.y + a.h <= b.y or b.y + b.h <= a.y, (a.key, b.key)
        assert a.x + a.w <= g.width and a.y + a.h <= g.height


def test_a_long_name_wraps_at_separators() -> None:
    from workrun.ui.graph import wrap_name

    assert wrap_name("short") == ("short",)
    assert wrap_name("charge-the-customer-card-then-notify") == ("charge-the-customer-", "card-then-notify")
    assert "".join(wrap_name("x" * 50)) == "x" * 50
