"""The run's workflow as a layered graph (R-U2), laid out in Python; the template draws it as SVG.

Pure functions of a run's recorded workflow spec and its ``runs show --json`` view: no I/O, so the
layout is unit-tested without a server. Edges come from ``needs`` and from ``{{ nodes.KEY… }}``
template references (SPEC §10: a reference is a dependency). Each node lists its operations'
compensation badges, numbered in compensation order.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Badge", "Box", "Edge", "Graph", "compensation_order", "dependencies", "layers", "layout"]

_REF = re.compile(r"\{\{\s*nodes\.([A-Za-z0-9_\-]+)\.")

BOX_W = 190  # pixels
LABEL_H = 42
BADGE_H = 20
COL_GAP = 70
ROW_GAP = 26
MARGIN = 16


@dataclass(frozen=True)
class Badge:
    """One compensation of one operation of a node: ``order`` is its place in compensation order (None: skipped)."""

    compensation_id: str
    operation_id: str
    status: str
    order: int | None
    held_back: bool = False


@dataclass(frozen=True)
class Box:
    """A node drawn at ``(x, y)`` (top-left, pixels) with size ``w`` x ``h``."""

    key: str
    status: str
    handled: bool
    x: int
    y: int
    w: int
    h: int
    badges: tuple[Badge, ...] = ()


@dataclass(frozen=True)
class Edge:
    """A dependency ``src`` -> ``dst`` (dst depends on src); ``kind``: ``needs`` or ``template``; ``d``: SVG path."""

    src: str
    dst: str
    kind: str
    d: str


@dataclass
class Graph:
    """The laid-out graph: ``width`` x ``height`` pixels."""

    width: int
    height: int
    boxes: list[Box] = field(default_factory=list)
    edges: list[Edge] = field(default_factory=list)


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def dependencies(spec_nodes: dict[str, Any]) -> dict[str, list[tuple[str, str]]]:
    """``{node key: [(upstream key, "needs" | "template")]}`` for the nodes of a workflow spec.

    Args:
        spec_nodes: the recorded spec's ``nodes`` (key -> node table); references to unknown nodes are dropped.
    """
    out: dict[str, list[tuple[str, str]]] = {}
    for key, node in spec_nodes.items():
        node = node if isinstance(node, dict) else {}
        deps: list[tuple[str, str]] = [(d, "needs") for d in node.get("needs", []) or [] if d in spec_nodes]
        seen = {d for d, _ in deps}
        rest = {k: v for k, v in node.items() if k not in ("key", "needs")}
        for s in _strings(rest):
            for m in _REF.finditer(s):
                ref = m.group(1)
                if ref in spec_nodes and ref not in seen and ref != key:
                    deps.append((ref, "template"))
                    seen.add(ref)
        out[key] = deps
    return out


def layers(keys: list[str], deps: dict[str, list[tuple[str, str]]]) -> dict[str, int]:
    """Layer of each node: 0 for nodes without dependencies, else 1 + the deepest upstream layer (a cycle, which a
    checked workflow cannot have, is cut)."""
    memo: dict[str, int] = {}

    def depth(k: str, trail: frozenset[str]) -> int:
        if k in memo:
            return memo[k]
        ups = [d for d, _ in deps.get(k, []) if d not in trail]
        value = 0 if not ups else 1 + max(depth(d, trail | {k}) for d in ups)
        memo[k] = value
        return value

    return {k: depth(k, frozenset({k})) for k in keys}


def compensation_order(view: dict[str, Any]) -> list[dict[str, Any]]:
    """The run's compensations in the order they ran or will run (R-C3).

    Those with attempts come first, by their first attempt's start; then the others in planned order
    (newest operation first, as the runner starts independent ones); skipped ones last, unnumbered.

    Returns:
        ``[{order | None, compensation_id, operation_id, node_key, app, status, reason}]``.
    """
    entries = [(i, op) for i, op in enumerate(view["operations"]) if op["compensation"]]
    started = sorted((e for e in entries if e[1]["compensation"]["attempts"]),
                     key=lambda e: (e[1]["compensation"]["attempts"][0]["started_at"] or "", e[0]))
    waiting = sorted((e for e in entries if not e[1]["compensation"]["attempts"]
                      and e[1]["compensation"]["status"] != "skipped"), key=lambda e: -e[0])
    skipped = [e for e in entries
               if not e[1]["compensation"]["attempts"] and e[1]["compensation"]["status"] == "skipped"]
    out = []
    for n, (_, op) in enumerate([*started, *waiting], start=1):
        out.append({"order": n, "compensation_id": op["compensation"]["compensation_id"],
                    "operation_id": op["operation_id"], "node_key": op["node_key"], "app": op["app"],
                    "status": op["compensation"]["status"], "reason": op["compensation"]["reason"]})
    for _, op in skipped:
        out.append({"order": None, "compensation_id": op["compensation"]["compensation_id"],
                    "operation_id": op["operation_id"], "node_key": op["node_key"], "app": op["app"],
                    "status": "skipped", "reason": op["compensation"]["reason"]})
    return out


def layout(spec: dict[str, Any] | None, view: dict[str, Any]) -> Graph:
    """Lay out the run's nodes in columns by dependency depth (left to right), ordered within a column by the
    mean row of their upstream nodes (fewer crossings), and route edges as curves.

    Args:
        spec: the run's recorded workflow spec (``{"nodes": {...}}``), or None when unavailable.
        view: the run's ``runs show --json`` view (statuses, operations, compensations).
    """
    spec_nodes = (spec or {}).get("nodes") or {}
    keys = [n["node_key"] for n in view["nodes"]]
    keys += [k for k in spec_nodes if k not in keys]
    deps = dependencies({k: spec_nodes.get(k, {}) for k in keys})
    layer = layers(keys, deps)
    order = {c["compensation_id"]: c["order"] for c in compensation_order(view)}
    badges: dict[str, list[Badge]] = {}
    for op in view["operations"]:
        c = op["compensation"]
        if c:
            badges.setdefault(op["node_key"], []).append(
                Badge(c["compensation_id"], op["operation_id"], c["status"], order.get(c["compensation_id"]),
                      bool(c.get("held_back_by"))))
    status = {n["node_key"]: n for n in view["nodes"]}

    columns: dict[int, list[str]] = {}
    row_of: dict[str, float] = {}
    for k in sorted(keys, key=lambda k: (layer[k], keys.index(k))):
        columns.setdefault(layer[k], []).append(k)
    for col in sorted(columns):
        members = columns[col]
        if col:
            def centre(k: str) -> float:
                ups = [row_of[d] for d, _ in deps[k] if d in row_of]
                return sum(ups) / len(ups) if ups else float(keys.index(k))
            members.sort(key=lambda k: (centre(k), keys.index(k)))
        for i, k in enumerate(members):
            row_of[k] = float(i)

    graph = Graph(width=0, height=0)
    placed: dict[str, Box] = {}
    for col in sorted(columns):
        y = MARGIN
        for k in columns[col]:
            n = status.get(k, {})
            h = LABEL_H + BADGE_H * len(badges.get(k, []))
            box = Box(k, n.get("status", "pending"), bool(n.get("handled")), MARGIN + col * (BOX_W + COL_GAP), y,
                      BOX_W, h, tuple(badges.get(k, [])))
            placed[k] = box
            graph.boxes.append(box)
            y += h + ROW_GAP
            graph.height = max(graph.height, y - ROW_GAP + MARGIN)
        graph.width = max(graph.width, MARGIN + (col + 1) * (BOX_W + COL_GAP) - COL_GAP + MARGIN)
    for k in keys:
        for d, kind in deps[k]:
            a, b = placed[d], placed[k]
            x1, y1 = a.x + a.w, a.y + LABEL_H // 2
            x2, y2 = b.x, b.y + LABEL_H // 2
            bend = max(30, (x2 - x1) // 2)
            graph.edges.append(Edge(d, k, kind, f"M{x1},{y1} C{x1 + bend},{y1} {x2 - bend},{y2} {x2 - 6},{y2}"))
    return graph
