"""``workrun graph WORKFLOW|RUN`` (SPEC §21, R-L2): a workflow's nodes and edges, and for a run each node's
status and its compensations' places in compensation order, as Mermaid, Graphviz dot or JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from workrun.app.runs import Finished, compensation_plan
from workrun.app.session import reading
from workrun.core.errors import UsageError
from workrun.core.paths import path_problem

__all__ = ["FORMATS", "graph", "render"]

FORMATS = ("mermaid", "dot", "json")


def _model(spec: Any) -> dict[str, Any]:
    """``{"nodes": [{"key", "kind"}], "edges": [{"from", "to", "kind"}]}`` of a workflow spec: an edge from the
    dependency to the node that needs it; ``needs`` when written in ``needs``, else ``template`` (a
    ``{{ nodes.KEY.result… }}`` reference, SPEC §10)."""
    from workrun.core.templates import node_dependencies

    nodes = [{"key": key, "kind": node.kind} for key, node in spec.nodes.items()]
    edges = []
    for key, node in spec.nodes.items():
        for dep in node_dependencies(node.needs, node.templated()):
            if dep in spec.nodes:
                edges.append({"from": dep, "to": key, "kind": "needs" if dep in node.needs else "template"})
    return {"nodes": nodes, "edges": edges}


def graph(target: str | Path, *, fmt: str = "mermaid", home: Path | str | None = None) -> Finished:
    """The graph of a workflow file, or of a run (by id or unique prefix) when ``target`` is not a file. The file
    is checked as ``check`` checks it, except that its ``{{ env.NAME }}`` variables need not be set (R-L2).

    Returns:
        :class:`Finished` whose ``data`` is the JSON model (``{"nodes": [{"key", "kind", "status"?,
        "compensation_places"?: [int]}], "edges": [{"from", "to", "kind": "needs"|"template"}]}``) and
        ``note`` the text in ``fmt`` (the JSON itself for ``json``).

    Raises:
        UsageError: an unknown format (exit 2).
        ConfigError: a workflow file that does not load (exit 2).
        NotFoundError: no such file and no run with that id (exit 2).
    """
    from workrun.config.workflow import load_workflow
    from workrun.core.models import WorkflowSpec
    from workrun.nodes import default_checkers
    from workrun.outbound.http import env_not_needed

    if fmt not in FORMATS:
        raise UsageError(f"unknown format {fmt!r} (one of: {', '.join(FORMATS)})", field="--format")
    path = Path(target)
    if path.suffix == ".toml" or path_problem(path) is None and path.is_file():
        with env_not_needed():  # a graph sends nothing: its secrets need not be set here
            spec, _ = load_workflow(path, {}, default_checkers(), known_inputs_only=False)
        model = _model(spec)
    else:
        with reading(home=home) as svc:
            run = svc.journal.run(str(target))
            model = _model(WorkflowSpec.model_validate(run["spec"]))
            states = {n["node_key"]: n["status"] for n in svc.journal.nodes(run["run_id"])}
            places: dict[str, list[int]] = {}
            for step in compensation_plan(svc, run["run_id"])["plan"]:
                places.setdefault(step["node_key"], []).append(step["place"])
        for node in model["nodes"]:
            node["status"] = states.get(node["key"], "pending")
            if node["key"] in places:
                node["compensation_places"] = places[node["key"]]
    return Finished(model, 0, render(model, fmt))


def _label(node: dict[str, Any]) -> str:
    parts = [node["key"]]
    if "status" in node:
        parts.append(node["status"])
    if node.get("compensation_places"):
        parts.append("undo #" + ", #".join(str(p) for p in node["compensation_places"]))
    return parts[0] if len(parts) == 1 else parts[0] + " (" + ", ".join(parts[1:]) + ")"


def render(model: dict[str, Any], fmt: str) -> str:
    """The model as Mermaid (``flowchart TD``; ``-->`` needs, ``-.->`` template), Graphviz dot (dashed for
    template edges) or JSON; a run's node labels carry its status word and compensation places."""
    if fmt == "json":
        return json.dumps(model, indent=2, ensure_ascii=False)
    ids = {n["key"]: f"n{i}" for i, n in enumerate(model["nodes"])}
    if fmt == "mermaid":
        lines = ["flowchart TD"]
        lines += [f'    {ids[n["key"]]}["{_label(n)}"]' for n in model["nodes"]]
        lines += [f'    {ids[e["from"]]} {"-->" if e["kind"] == "needs" else "-.->"} {ids[e["to"]]}'
                  for e in model["edges"]]
        return "\n".join(lines)
    lines = ["digraph workflow {", "    rankdir=TB;"]
    lines += [f'    {json.dumps(n["key"])} [label={json.dumps(_label(n))}];' for n in model["nodes"]]
    lines += [f'    {json.dumps(e["from"])} -> {json.dumps(e["to"])}'
              + (" [style=dashed];" if e["kind"] == "template" else ";") for e in model["edges"]]
    lines.append("}")
    return "\n".join(lines)
