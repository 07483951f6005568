"""The run's workflow as a layered graph (R-U2), laid out in Python; the template draws it as SVG.

Pure functions of a run's recorded workflow spec and its ``runs show --json`` view: no I/O, so the
layout is unit-tested without a server. Edges come from ``needs`` and from ``{{ nodes.KEY… }}``
template references (SPEC §10: a reference is a dependency). Each node lists its operations'
compensation badges, numbered in compensation order.
"""

from __future__ import annotations

import re
from typing import Any

from workrun.compensation.planning import reverse_order
from workrun.core.structs import field, struct

__all__ = ["Badge", "Box", "Edge", "Graph", "compensation_order", "dependencies", "layers", "layout", "wrap_name"]

_REF = re.compile(r"\{\{\s*nodes\.([A-Za-z0-9_\-]+)\.")

BOX_W = 190  # pixels
LABEL_H = 42  # a box's label with one line of name (and its status line)
LINE_H = 16  # each further line of a long name
NAME_CHARS = 22  # characters of a name per line (12 px monospace: about 160 px of the box's 170)
BADGE_H = 20
COL_GAP = 70
ROW_GAP = 26
LANE_H = 14  # the slot a long edge takes in each column it passes (so no box sits on it)
MARGIN = 16
SWEEPS = 4  # barycentre sweeps (down and up) to reduce crossings


@struct(frozen=True)
class Badge:
    """One compensation of one operation of a node: ``order`` is its place in compensation order (None: skipped)."""

    compensation_id: str
    operation_id: str
    status: str
    order: int | None
    held_back: bool = False


@struct(frozen=True)
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
    lines: tuple[str, ...] = ()  # the whole name, wrapped (never cut)

    @property
    def label_h(self) -> int:
        """Height of the name and status part (pixels): badges start below it."""
        return LABEL_H + LINE_H * (max(1, len(self.lines)) - 1)


@struct(frozen=True)
class Edge:
    """A dependency ``src`` -> ``dst`` (dst depends on src); ``kind``: ``needs`` or ``template``; ``d``: SVG path."""

    src: str
    dst: str
    kind: str
    d: str


@struct
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
    """The run's compensations numbered by their places in compensation order (R-C3), the places
    ``compensate --dry-run`` and ``graph RUN`` show (:func:`workrun.compensation.planning.reverse_order`);
    skipped ones last, unnumbered.

    Returns:
        ``[{order | None, compensation_id, operation_id, node_key, app, status, reason}]``, by place.
    """
    by_id = {op["operation_id"]: op for op in view["operations"]}
    out: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    for op_id in reverse_order(view["operations"]):
        op = by_id[op_id]
        comp = op["compensation"]
        if not comp:
            continue
        entry = {"order": None, "compensation_id": comp["compensation_id"], "operation_id": op_id,
                 "node_key": op["node_key"], "app": op["app"], "status": comp["status"], "reason": comp["reason"]}
        if comp["status"] == "skipped":
            skipped.append(entry)
        else:
            entry["order"] = len(out) + 1
            out.append(entry)
    return out + skipped


def wrap_name(key: str, width: int = NAME_CHARS) -> tuple[str, ...]:
    """A node name in lines of at most ``width`` characters, broken after ``-``, ``_``, ``.`` or ``/`` where
    possible, else hard: the whole name, never cut (R-D6)."""
    lines: list[str] = []
    rest = key
    while len(rest) > width:
        cut = max(rest.rfind(ch, 0, width) for ch in "-_./ ")
        cut = cut + 1 if cut >= width // 3 else width
        lines.append(rest[:cut])
        rest = rest[cut:]
    lines.append(rest)
    return tuple(lines)


def _order_columns(columns: dict[int, list[str]], ups: dict[str, list[str]], downs: dict[str, list[str]],
                   first: list[str]) -> None:
    """Order each column by the mean position of its neighbours, sweeping down then up (barycentre heuristic,
    fewer crossings); ties keep the workflow's order. Changes ``columns`` in place."""
    index = {k: i for i, k in enumerate(first)}
    pos: dict[str, float] = {}
    for col in sorted(columns):
        for i, k in enumerate(columns[col]):
            pos[k] = float(i)

    def sweep(cols: list[int], near: dict[str, list[str]]) -> None:
        for col in cols:
            members = columns[col]

            def centre(k: str, members: list[str] = members) -> float:
                seen = [pos[d] for d in near.get(k, []) if d in pos]
                return sum(seen) / len(seen) if seen else pos[k]

            members.sort(key=lambda k: (centre(k), index.get(k, 0)))
            for i, k in enumerate(members):
                pos[k] = float(i)

    order = sorted(columns)
    for n in range(SWEEPS):
        if n % 2 == 0:
            sweep(order[1:], ups)
        else:
            sweep(list(reversed(order[:-1])), downs)


def layout(spec: dict[str, Any] | None, view: dict[str, Any]) -> Graph:
    """Lay out the run's nodes in columns by dependency depth (left to right), ordered within a column to reduce
    crossings, with every name whole, and route edges so none runs under a box (R-U2, R-D6).

    An edge that spans several columns gets a slot of its own (a *lane*, ``LANE_H`` pixels) in each column it
    passes, ordered with the boxes, and runs straight through it: curves only in the gaps between columns, where
    no box is, so no edge crosses a box.

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

    # the columns, with a lane (a virtual node "\0src\0dst\0col") where a long edge passes a column
    columns: dict[int, list[str]] = {}
    for k in sorted(keys, key=lambda k: (layer[k], keys.index(k))):
        columns.setdefault(layer[k], []).append(k)
    ups: dict[str, list[str]] = {k: [] for k in keys}
    downs: dict[str, list[str]] = {k: [] for k in keys}
    chains: dict[tuple[str, str], list[str]] = {}
    for k in keys:
        for d, _ in deps[k]:
            chain = [d]
            for col in range(layer[d] + 1, layer[k]):
                lane = f"\0{d}\0{k}\0{col}"
                columns.setdefault(col, []).append(lane)
                chain.append(lane)
            chain.append(k)
            chains[(d, k)] = chain
            for left, right in zip(chain, chain[1:], strict=False):
                ups.setdefault(right, []).append(left)
                downs.setdefault(left, []).append(right)
    _order_columns(columns, ups, downs, keys)

    graph = Graph(width=0, height=0)
    placed: dict[str, Box] = {}
    lane_y: dict[str, int] = {}
    for col in sorted(columns):
        y = MARGIN
        x = MARGIN + col * (BOX_W + COL_GAP)
        for k in columns[col]:
            if k.startswith("\0"):
                lane_y[k] = y + LANE_H // 2
                y += LANE_H + ROW_GAP // 2
                continue
            n = status.get(k, {})
            lines = wrap_name(k)
            h = LABEL_H + LINE_H * (len(lines) - 1) + BADGE_H * len(badges.get(k, []))
            box = Box(k, n.get("status", "pending"), bool(n.get("handled")), x, y, BOX_W, h,
                      tuple(badges.get(k, [])), lines)
            placed[k] = box
            graph.boxes.append(box)
            y += h + ROW_GAP
        graph.height = max(graph.height, y - ROW_GAP + MARGIN)
        graph.width = max(graph.width, x + BOX_W + MARGIN)
    graph.boxes.sort(key=lambda b: keys.index(b.key))
    for k in keys:
        for d, kind in deps[k]:
            a, b = placed[d], placed[k]
            points = [(a.x + a.w, a.y + a.label_h // 2)]
            for lane in chains[(d, k)][1:-1]:
                col = int(lane.rsplit("\0", 1)[1])
                x = MARGIN + col * (BOX_W + COL_GAP)
                points += [(x, lane_y[lane]), (x + BOX_W, lane_y[lane])]
            points.append((b.x - 6, b.y + b.label_h // 2))
            graph.edges.append(Edge(d, k, kind, _path(points)))
    return graph


def _path(points: list[tuple[int, int]]) -> str:
    """An SVG path through ``points``: pairs (gap start, gap end) joined by S-curves, lanes by straight lines."""
    (x0, y0), rest = points[0], points[1:]
    d = [f"M{x0},{y0}"]
    for i, (x, y) in enumerate(rest):
        if i % 2 == 0:  # across a gap between columns: a curve that stays inside the gap
            bend = max(12, (x - x0) // 2)
            d.append(f"C{x0 + bend},{y0} {x - bend},{y} {x},{y}")
        else:  # through a lane: straight
            d.append(f"L{x},{y}")
        x0, y0 = x, y
    return " ".join(d)
