"""Loading a workflow TOML file: nodes, the DAG, templates and failure policies (R-W1, R-W7, SPEC §9).

Everything here runs before a run is created: any error is a ConfigError
(exit 2) and no run exists afterwards (SPEC §10). What a node of each kind
must satisfy is its executor's ``check`` (:mod:`workrun.nodes`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from workrun.core.errors import ConfigError, ConfigErrors
from workrun.core.models import (
    NODE_MODELS,
    AgentNode,
    AppSpec,
    ConnectorSpec,
    FailurePolicy,
    HttpAction,
    HttpNode,
    HttpRequestSpec,
    NodeSpec,
    OutputField,
    PolicyError,
    ProcessNode,
    SmtpSpec,
    WorkflowSpec,
)
from workrun.core.paths import path_problem
from workrun.core.shape import ShapeError, jsonable, toml_type, typo_hints
from workrun.core.templates import REFERENCE, check_template_braces, node_dependencies, template_refs
from workrun.nodes.base import NodeChecker, Where
from workrun.outbound.http import (
    action_field,
    allow_from_env,
    check_action,
    check_request,
    connector_of,
    parse_allow,
    whole_reference,
)
from workrun.outbound.mail import check_smtp
from workrun.runner.apps import load_app, one_reading, parse_toml, shape_error

__all__ = ["compensable", "compensable_nodes", "load_workflow", "parse_policy"]

_KEY = re.compile(r"^[A-Za-z0-9_\-]{1,64}$")


def parse_policy(value: Any, file: str, field: str) -> FailurePolicy:
    """Parse ``on_failure`` (R-W7, R-M1..R-M5), once, when the workflow is loaded.

    Raises:
        ConfigError: naming the field (or sub-field) for anything but the written forms of
            :class:`~workrun.core.models.FailurePolicy`.
    """
    try:
        return FailurePolicy.parse(value)
    except PolicyError as exc:
        raise ConfigError(exc.message, file=file, field=f"{field}.{exc.where}" if exc.where else field) from None
    except ShapeError as exc:
        sub = next((k for k in ("compensate", "fallback_action") if isinstance(value, dict) and k in value), "retry")
        raise shape_error(exc, file, f"{field}.{sub}") from None


def _check_reverse_actions(node: NodeSpec, inputs: Mapping[str, Any], file: str, prefix: str,
                           connectors: Mapping[str, Any] | None = None) -> list[tuple[Any, str, str]]:
    """HTTP reverse actions that this run may send, checked against its inputs and environment (R-H5, R-H6):
    an http node's ``compensation`` table, and ``compensation = { … }`` of the Apps a node calls.

    Returns:
        ``(action, file, field)`` of each action checked, where the file wrote it (their ``{{ inputs.NAME }}``
        count as uses of NAME, SPEC §17).

    Raises:
        ConfigError: an ``{{ inputs.NAME }}`` that is not an input; an ``{{ env.NAME }}`` that is not set.
    """
    if isinstance(node, HttpNode):
        if node.compensation is not None:
            check_action(node.compensation, file=file, field=f"{prefix}.compensation", inputs=inputs,
                         connectors=connectors)
            return [(node.compensation, file, f"{prefix}.compensation")]
        return []
    checked: list[tuple[Any, str, str]] = []
    refs: list[tuple[str, str]] = []
    if isinstance(node, ProcessNode) and node.project and node.app:
        refs.append((node.project, node.app))
    if isinstance(node, AgentNode):
        refs += [(t.project, t.app) for t in node.tools]
    for project, name in refs:
        app: AppSpec = load_app(Path(project), name)
        if app.compensation is not None and app.compensation.http is not None:
            where = (str(Path(project) / "pyproject.toml"), f"tool.workrun.apps.{name}.compensation")
            check_action(app.compensation.http, file=where[0], field=action_field(where[1], app.compensation.http),
                         inputs=inputs, connectors=connectors)
            checked.append((app.compensation.http, *where))
    return checked


def _check_cycles(graph: dict[str, list[str]], file: str) -> list[ConfigError]:
    """Every dependency cycle of ``graph`` (node key -> the keys it depends on, by ``needs`` or a template), one
    error each, naming its first node's field ``nodes.KEY`` (R-L1): a cycle that shares a node with one reported
    already is not reported again."""
    state: dict[str, int] = {}
    errors: list[ConfigError] = []
    reported: set[str] = set()

    def visit(key: str, trail: list[str]) -> None:
        state[key] = 1
        for dep in graph.get(key, []):
            if state.get(dep) == 1:
                ring = [*trail[trail.index(dep):], dep] if dep in trail else [key, dep]
                if not reported.intersection(ring):
                    reported.update(ring)
                    errors.append(ConfigError(f"cycle: {' -> '.join(ring)}", file=file, field=f"nodes.{ring[0]}"))
            elif dep not in state:
                visit(dep, [*trail, dep])
        state[key] = 2

    for key in graph:
        if key not in state:
            visit(key, [key])
    return errors


def _check_fallbacks(graph: dict[str, list[str]], policies: dict[str, FailurePolicy], file: str) -> None:
    """Fallback rules (R-W7): no cycles; a fallback node runs only in place of its primary, so no other
    node may depend on it (downstream reads it through the primary), and everything it depends on must
    be upstream of the primary (done when the primary fails).

    Raises:
        ConfigError: naming ``nodes.KEY.on_failure.fallback`` or the dependent node's field.
    """
    fallback_of = {p.fallback: k for k, p in policies.items() if p.fallback}
    for key in policies:
        seen, cur = [key], policies[key].fallback
        while cur:
            if cur in seen:
                raise ConfigError("fallback cycle: " + " -> ".join([*seen[seen.index(cur):], cur]), file=file,
                                  field=f"nodes.{key}.on_failure.fallback")
            seen.append(cur)
            cur = policies[cur].fallback if cur in policies else None

    for key, deps in graph.items():
        for dep in deps:
            if dep in fallback_of:
                raise ConfigError(f"depends on {dep!r}, the fallback of {fallback_of[dep]!r}, which runs only in its "
                                  f"place: depend on {fallback_of[dep]!r} instead (it carries the fallback's result)",
                                  file=file, field=f"nodes.{key}")
    for fb, primary in fallback_of.items():
        missing = [d for d in graph.get(fb, []) if d not in _upstream(graph, primary)]
        if missing:
            raise ConfigError(f"fallback {fb!r} depends on {missing[0]!r}, which is not upstream of {primary!r}: a "
                              f"fallback runs in place of {primary!r}, only with what {primary!r} depends on done",
                              file=file, field=f"nodes.{primary}.on_failure.fallback")


def _check_input_names(defaults: dict[str, Any], overrides: dict[str, str],
                       refs_of: dict[str, list[tuple[str, str]]], file: str) -> None:
    """Refuse ``--input NAME`` for a NAME the workflow neither declares nor uses (SPEC §17: no typo unnoticed).

    Raises:
        ConfigError: naming the unknown input and the known ones (field ``--input``).
    """
    known = set(defaults) | {ref.split(".")[1] for refs in refs_of.values() for _, ref in refs
                             if ref.startswith("inputs.") and len(ref.split(".")) == 2}
    unknown = sorted(set(overrides) - known)
    if unknown:
        names = ", ".join(sorted(known)) if known else "none"
        what = f"unknown input {unknown[0]!r}" if len(unknown) == 1 else \
            f"unknown inputs {', '.join(repr(u) for u in unknown)}"
        raise ConfigError(f"{what}: this workflow declares or uses only: {names}", file=file, field="--input")


_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")  # control characters and line breaks


def load_workflow(path: Path, overrides: dict[str, str] | None,
                  executors: Mapping[str, NodeChecker], *,
                  known_inputs_only: bool = True) -> tuple[WorkflowSpec, dict[str, Any]]:
    """Load, validate and resolve a workflow file (R-W1; SPEC §9, §10, §17).

    Args:
        path: the workflow TOML file; ``project`` paths are relative to it.
        overrides: ``--input`` values, overriding ``[inputs]`` defaults.
        executors: ``{kind: executor}`` or ``{kind: checker}``; each node is checked by its kind's.
        known_inputs_only: refuse an override whose name is neither under ``[inputs]`` nor used by a
            ``{{ inputs.NAME }}`` template (SPEC §17); ``rerun`` passes False (its inputs are recorded).

    Returns:
        (spec with absolute project paths, the run's inputs).

    Raises:
        ConfigError: bad TOML, unknown keys, missing nodes, cycles, bad templates,
            unknown Apps, App config errors, bad failure policies; :class:`~workrun.core.errors.ConfigErrors`
            when there are several (all reported, R-L1: one per field, node by node in the file's order; a node
            whose App is wrong still has its needs and templates checked).
    """
    path = Path(path)
    file = str(path)
    problem = path_problem(path)
    if problem is not None:
        raise ConfigError(f"not a usable path: {problem}", file=file)
    if path.is_dir():
        raise ConfigError("is a directory, not a workflow file", file=file)
    if not path.is_file():
        raise ConfigError("not a regular file" if path.exists() else "workflow file not found", file=file)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"not valid TOML: {exc}", file=file) from None
    data = parse_toml(text, file)
    errors: list[ConfigError] = []  # every error found (R-L1: all are reported, the first of each field)
    known = ("name", "inputs", "nodes", "description", "http_allow", "notify", "connectors", "smtp")
    unknown = sorted(set(data) - set(known))
    if unknown:  # with the key each is most likely a typo of (``node`` → ``nodes``)
        typos = typo_hints(unknown, [k for k in known if k not in data])
        errors += [ConfigError("unknown key" + (f" (did you mean {typos[key]!r}?)" if key in typos else ""),
                               file=file, field=key) for key in unknown]
    name = data.get("name", path.stem)
    if not isinstance(name, str) or not name:  # reported; the nodes are checked all the same
        errors.append(ConfigError("must be a non-empty string", file=file, field="name"))
        name = path.stem
    elif _CONTROL.search(name):  # a name is shown on one line everywhere
        errors.append(ConfigError("must be one line, without control characters", file=file, field="name"))
        name = path.stem
    if not isinstance(data.get("description", ""), str):
        errors.append(ConfigError(f"must be a string, not {toml_type(data['description'])}", file=file,
                                  field="description"))
    defaults = data.get("inputs", {})
    if not isinstance(defaults, dict):
        errors.append(ConfigError("must be a table", file=file, field="inputs"))
        defaults = {}
    defaults = jsonable(defaults)  # a TOML date is an ISO string, as in a node's input
    nodes_table = data.get("nodes")
    if not isinstance(nodes_table, dict) or not nodes_table:
        raise _with_earlier(errors, ConfigError("a workflow needs at least one [nodes.KEY] table", file=file,
                                                field="nodes"))
    inputs = {**defaults, **(overrides or {})}
    base = path.resolve().parent
    http_allow: list[str] = []  # a bad list is said with the rest (R-L1): no URL is checked against it here
    try:
        http_allow = parse_allow(data.get("http_allow", []), file=file, field="http_allow").texts()  # R-H3
    except ConfigError as exc:
        errors.append(exc)
    try:
        allow_from_env()  # a bad WORKRUN_HTTP_ALLOW is found before anything runs
    except ConfigError as exc:
        errors.append(exc)
    connectors = _parse_connectors(data.get("connectors"), file, errors)  # R-K1
    smtp = None
    try:
        smtp = _parse_smtp(data.get("smtp"), file)  # R-K2
    except ConfigError as exc:
        errors.append(exc)

    nodes: dict[str, NodeSpec] = {}
    outputs: dict[str, dict[str, OutputField]] = {}
    unchecked: set[str] = set()  # nodes whose kind's check failed (their App): read, but their contract unknown
    action_refs = template_refs(data.get("notify"), "notify")  # inputs used by actions count as used (§17)
    data_refs = [(file, field, ref) for field, ref in action_refs]  # each action's {{ data.NAME }}, where written
    checked_actions: list[Any] = []  # every action of a node that was read (its own, its Apps')
    with one_reading():  # each App project is read once however many nodes call it
        for key, table in nodes_table.items():
            try:
                node, contract, placed, problems = _load_node(key, table, base, executors, inputs, file, connectors)
            except ConfigError as exc:
                errors.append(exc)
                action_refs += template_refs(table, f"nodes.{key}")  # the inputs it uses are not unknown ones
                continue
            errors += problems
            action_refs += [r for action, _, _ in placed for r in template_refs(action.model_dump(), f"nodes.{key}")]
            data_refs += [(where, path, ref) for action, where, written in placed
                          for path, ref in template_refs(action.model_dump(), written)]
            checked_actions += [action for action, _, _ in placed]
            nodes[key] = node
            outputs[key] = contract or {}
            if contract is None:
                unchecked.add(key)
    bad = set(nodes_table) - set(nodes)  # nodes with an error: what refers to them is not checked again

    policies = {k: n.on_failure for k, n in nodes.items()}
    refs_of: dict[str, list[tuple[str, str]]] = {}
    for key, node in list(nodes.items()):
        try:
            for field, value in node.templated().items():
                check_template_braces(value, f"nodes.{key}.{field}", file)
        except ConfigError as exc:
            errors.append(exc)
            bad.add(key)
        refs_of[key] = [r for field, value in node.templated().items()
                        for r in template_refs(value, f"nodes.{key}.{field}")]
    if known_inputs_only:  # (an input only an unchecked node's App uses, in its reverse action, is named too)
        try:
            _check_input_names(defaults, overrides or {}, {**refs_of, "": action_refs}, file)
        except ConfigError as exc:
            errors.append(exc)
    graph: dict[str, list[str]] = {}
    data_names = set(inputs) | _update_data_fields(nodes, checked_actions)  # what {{ data.NAME }} may read (R-K4)
    for where, field, ref in data_refs:  # in actions too: reverse, failure and [notify] actions, Apps' (R-K4)
        parts = ref.split(".")
        if parts[0] == "data" and len(parts) == 2 and parts[1] not in data_names:
            errors.append(ConfigError(f"{{{{ {ref} }}}}: {parts[1]!r} is neither an input nor set by an update_data "
                                      "action of this workflow", file=where, field=field))
    for key, node in nodes.items():
        found = list(_node_ref_errors(key, node, nodes, bad, refs_of[key], data_names, outputs, policies[key],
                                      file, inputs))
        if found:
            errors += found
            bad.add(key)
        graph[key] = [d for d in node_dependencies(node.needs, node.templated()) if d in nodes]
    good = {k: [d for d in ds if d not in bad] for k, ds in graph.items() if k not in bad}
    good_policies = {k: p for k, p in policies.items() if k not in bad}
    # a cycle is one whatever else is wrong with a node on it (a template's field, say): said with the rest (R-L1);
    # a node that names itself is said as such already
    errors += _check_cycles({k: [d for d in ds if d != k] for k, ds in graph.items()}, file)
    try:
        _check_fallbacks(good, good_policies, file)
    except ConfigError as exc:
        errors.append(exc)
    for key, policy in good_policies.items():
        if policy.action is not None:
            try:
                _check_action_templates(policy.action, file, f"nodes.{key}.on_failure.{policy.kind}", inputs,
                                        _upstream(graph, key), _ACTION_NAMES, connectors)
            except ConfigError as exc:
                errors.append(exc)
    notify = None
    try:
        notify = _parse_notify(data.get("notify"), file, inputs, connectors)
    except ConfigError as exc:
        errors.append(exc)
    if smtp is None and "smtp" not in data:  # an email action needs [smtp] (R-K5)
        with one_reading():  # each App project is read once here too (not once per node)
            errors += _emails_without_smtp({k: n for k, n in nodes.items() if k not in unchecked}, notify, file)
    if errors:  # one line per field (its first error): two nodes using one bad App project report its error once
        firsts: dict[tuple[str | None, str | None], ConfigError] = {}
        for one in [part for e in errors for part in (e.errors if isinstance(e, ConfigErrors) else [e])]:
            firsts.setdefault((one.file, one.field), one)
        place = {f"nodes.{k}": i for i, k in enumerate(nodes_table)}  # each node's errors together, in file order
        errors = sorted(firsts.values(), key=lambda e: place.get(".".join((e.field or "").split(".")[:2]), -1))
        raise ConfigErrors.of(errors)
    # every part was validated above (each node, action, connector and [smtp] by its own model; name, inputs and
    # http_allow by hand): the whole is put together without validating it again, which would build the
    # validator of every model at once (~4 ms of each check, SPEC §24)
    spec = WorkflowSpec.model_construct(name=name, path=str(path.resolve()), inputs=defaults, nodes=nodes,
                                        http_allow=http_allow, notify=notify, connectors=connectors, smtp=smtp)
    return spec, inputs


def _load_node(key: str, table: Any, base: Path, executors: Mapping[str, NodeChecker], inputs: dict[str, Any],
               file: str, connectors: dict[str, ConnectorSpec]
               ) -> tuple[NodeSpec, dict[str, OutputField] | None, list[tuple[Any, str, str]], list[ConfigError]]:
    """One ``[nodes.KEY]`` table, validated and checked by its kind's checker (or executor).

    Returns:
        ``(node, its output contract, its actions as ``(action, file, field)`` where each is written (its reverse
        action, its Apps' compensations, its failure action), errors found that did not keep the
        node from being checked: a bad ``on_failure``, with which the node is checked as if it said "fail",
        unknown keys, without which it is checked, and its kind's check — an unknown App, a missing project —
        after which the node's own ``needs`` and templates are still checked)``; the contract is None when the
        kind's check failed (what the node's result holds is then unknown).

    Raises:
        ConfigError: naming the node's field, when the table itself cannot be read as a node.
    """
    prefix = f"nodes.{key}"
    if not _KEY.match(key):
        raise ConfigError("node keys are 1 to 64 letters, digits, '_' and '-'", file=file, field=prefix)
    if not isinstance(table, dict):
        raise ConfigError("must be a table", file=file, field=prefix)
    table = dict(table)
    if "project" in table and isinstance(table["project"], str):
        table["project"] = _resolved(base, table["project"], file, f"{prefix}.project")
    if isinstance(table.get("tools"), list):
        table["tools"] = [
            {**t, "project": _resolved(base, t["project"], file, f"{prefix}.tools[{i}].project")}
            if isinstance(t, dict) and isinstance(t.get("project"), str) else t
            for i, t in enumerate(table["tools"])
        ]
    kind = table.get("kind", "process")
    if not isinstance(kind, str) or kind not in executors or kind not in NODE_MODELS:
        known = ", ".join(repr(k) for k in executors)
        raise ConfigError(f"unknown node kind {kind!r} (one of: {known})", file=file, field=f"{prefix}.kind")
    problems: list[ConfigError] = []  # errors that do not keep the node from being checked further (R-L1)
    meant: set[str] = set()  # keys an unknown key is a typo of: said with its hint, not also as missing
    try:
        table["on_failure"] = parse_policy(table.get("on_failure", "fail"), file, f"{prefix}.on_failure")
    except ConfigError as exc:  # reported; the rest of the node (its needs, its App) is checked as if it failed
        problems.append(exc)
        table["on_failure"] = parse_policy("fail", file, f"{prefix}.on_failure")
    try:
        node: NodeSpec = NODE_MODELS[kind].model_validate({**table, "key": key})  # type: ignore[assignment]
    except ShapeError as exc:
        error = shape_error(exc, file, prefix)
        wrong = {e["loc"][0] for e in exc.errors() if e["loc"]}
        unknown = [str(e["loc"][0]) for e in exc.errors() if e["type"] == "extra_forbidden" and len(e["loc"]) == 1]
        meant = set(typo_hints(unknown, [k for k in NODE_MODELS[kind].model_fields if k not in table]).values())
        if not wrong or any(not e["loc"] for e in exc.errors()) or "key" in wrong:
            raise _with_earlier(problems, error) from None
        try:  # unknown keys, or wrong values of keys the node can do without (a timeout): reported, and the
            # node is checked further without them (its App, its needs, its templates; R-L1: all errors at once)
            node = NODE_MODELS[kind].model_validate(  # type: ignore[assignment]
                {**{k: v for k, v in table.items() if k not in wrong}, "key": key})
        except ShapeError:
            raise _with_earlier(problems, error) from None
        problems.append(error)
    try:
        node = _with_connector_timeouts(node, connectors)
        contract = executors[kind].check(node, Where(file, prefix, connectors))
    except ConfigError as exc:  # its App (or request) is wrong: reported, and its needs and templates are checked
        if exc.field not in {f"{prefix}.{k}" for k in meant}:  # (`projct`: the hint says it; not "project: is
            problems.append(exc)  # required" too) all the same; its output contract and reverse actions are unknown
        contract = None
    if contract is not None or isinstance(node, HttpNode):  # an App that did not load has no action to check;
        try:  # an http node's own reverse action is checked whatever its request (R-L1: every error at once)
            actions = _check_reverse_actions(node, inputs, file, prefix, connectors)
        except ConfigError as exc:
            problems.append(exc)
            contract = None
    if contract is None:
        return node, None, [], problems
    policy = node.on_failure
    if policy.action is not None:
        actions.append((policy.action, file, f"{prefix}.on_failure.{policy.kind}"))
    return node, contract, actions, problems


def _with_earlier(earlier: list[ConfigError], error: ConfigError) -> ConfigError:
    """``error`` with the errors found before it in the same node (all are reported, R-L1)."""
    return ConfigErrors.of([*earlier, error])


def _resolved(base: Path, written: str, file: str, field: str) -> str:
    """``written`` (a ``project`` path) made absolute against the workflow's folder, symlinks resolved.

    Raises:
        ConfigError: a path no system call takes (a NUL character) or a symlink loop, naming the field.
    """
    problem = path_problem(base / written)
    if problem is not None:
        raise ConfigError(f"not a usable path: {problem}", file=file, field=field)
    try:
        return str((base / written).resolve())
    except (OSError, ValueError, RuntimeError) as exc:  # ValueError: NUL; RuntimeError: a symlink loop
        raise ConfigError(f"not a usable path: {exc}", file=file, field=field) from None


def _node_ref_errors(key: str, node: NodeSpec, nodes: dict[str, NodeSpec], bad: set[str],
                     refs: list[tuple[str, str]], data_names: set[str],
                     outputs: dict[str, dict[str, OutputField]], policy: FailurePolicy, file: str,
                     inputs: dict[str, Any]) -> Iterator[ConfigError]:
    """Every error of a node's ``needs``, template references and fallback against the other nodes (``bad``: nodes
    with an error of their own, not reported again here), each naming its field (R-L1: all of them)."""
    prefix = f"nodes.{key}"
    known = set(nodes) | bad
    for dep in node.needs:
        if dep not in known:
            yield ConfigError(f"unknown node {dep!r}", file=file, field=f"{prefix}.needs")
        elif dep == key:
            yield ConfigError("a node cannot need itself", file=file, field=f"{prefix}.needs")
    for field, ref in refs:
        if not REFERENCE.match(ref):
            yield ConfigError(f"bad template {{{{ {ref} }}}}: use inputs.NAME or nodes.KEY.result.FIELD",
                              file=file, field=field)
            continue
        parts = ref.split(".")
        if parts[0] == "inputs":
            if parts[1] not in inputs:
                yield ConfigError(f"{{{{ {ref} }}}} refers to an input that is neither in [inputs] nor given "
                                  "with --input", file=file, field=field)
            continue
        if parts[0] == "data":
            if parts[1] not in data_names:
                yield ConfigError(f"{{{{ {ref} }}}}: {parts[1]!r} is neither an input nor set by an update_data "
                                  "action of this workflow", file=file, field=field)
            continue
        target = parts[1]
        if target in bad:
            continue
        if target not in nodes:
            yield ConfigError(f"{{{{ {ref} }}}} refers to unknown node {target!r}", file=file, field=field)
            continue
        if target == key:
            yield ConfigError(f"{{{{ {ref} }}}} refers to the node itself", file=file, field=field)
            continue
        contract = outputs.get(target) or {}
        if contract and len(parts) > 3 and parts[3] not in contract:
            what = (f"an http node's result has {', '.join(contract)} only" if isinstance(nodes[target], HttpNode)
                    else f"App {getattr(nodes[target], 'app', None)!r} declares no output field {parts[3]!r}")
            yield ConfigError(f"{{{{ {ref} }}}}: {what}", file=file, field=field)
    if policy.kind == "fallback" and policy.fallback not in bad:  # (a node with its own error: said there)
        if policy.fallback not in nodes or policy.fallback == key:
            yield ConfigError(f"fallback {policy.fallback!r} is not another node of this workflow",
                              file=file, field=f"{prefix}.on_failure.fallback")


def compensable(node: NodeSpec) -> bool:
    """True when a call of ``node`` would be compensated if its run failed (R-L1's ``compensable``): a process
    node whose App declares a compensation (a script or a reverse action), an http node with a
    ``compensation`` table, an agent node with a Tool App that declares one. Loads the App configs.

    Raises:
        ConfigError: an App config that does not load (as at load time).
    """
    if isinstance(node, HttpNode):
        return node.compensation is not None
    refs: list[tuple[str, str]] = []
    if getattr(node, "project", None) and getattr(node, "app", None) and node.kind == "process":
        refs.append((str(node.project), str(node.app)))
    refs += [(t.project, t.app) for t in getattr(node, "tools", None) or []]
    return any(load_app(Path(project), app).compensation is not None for project, app in refs)


def compensable_nodes(nodes: Mapping[str, NodeSpec]) -> list[str]:
    """The keys of ``nodes`` whose calls would be compensated (:func:`compensable`), in their order; each App
    project is read once however many nodes call it (``workrun check`` of a 50-node chain read it 50 times
    more, SPEC §24).

    Raises:
        ConfigError: an App config that does not load (as at load time).
    """
    with one_reading():
        return [key for key, node in nodes.items() if compensable(node)]


_ACTION_NAMES = frozenset({"run_id", "node_key", "ticket_id", "error"})


def _upstream(graph: dict[str, list[str]], key: str) -> set[str]:
    """Every node ``key`` depends on, directly or through others (``graph``: ``{node: its dependencies}``)."""
    out: set[str] = set()
    todo = list(graph.get(key, []))
    while todo:
        dep = todo.pop()
        if dep not in out:
            out.add(dep)
            todo.extend(graph.get(dep, []))
    return out


def _check_action_templates(action: HttpAction, file: str, field: str, inputs: dict[str, Any],
                            upstream: set[str], names: frozenset[str],
                            connectors: Mapping[str, Any] | None = None) -> None:
    """Check an action's URL (R-H3) and every ``{{ … }}``: known names, inputs that exist, upstream nodes
    only (they have a result when the action is registered), ``env.NAME`` only in header values and set
    now (R-H5).

    Raises:
        ConfigError: naming the action's field.
    """

    def check_ref(where: str, ref: str) -> None:
        parts = ref.split(".")
        if ref in names:
            return
        if parts[0] == "inputs" and len(parts) == 2:
            if parts[1] not in inputs:
                raise ConfigError(f"{{{{ {ref} }}}} refers to an input that is neither in [inputs] nor given "
                                  "with --input", file=file, field=where)
            return
        if parts[0] == "data" and len(parts) == 2:  # the run's data when the action is prepared (R-K4)
            return
        if parts[0] == "nodes" and len(parts) >= 3 and parts[2] == "result":
            if parts[1] not in upstream:
                raise ConfigError(f"{{{{ {ref} }}}}: node {parts[1]!r} is not upstream of this node, so it has no "
                                  "result when the action is registered", file=file, field=where)
            return
        raise ConfigError(f"bad template {{{{ {ref} }}}}: use " + ", ".join(sorted(names)) + ", inputs.NAME, "
                          "nodes.KEY.result.FIELD or env.NAME (headers)", file=file, field=where)

    if action.connector is None and whole_reference(action.url) is not None:
        raise ConfigError("a url that is one whole template needs a connector (its base_url is the origin the "
                          "value is resolved against, R-K6)", file=file, field=f"{field}.url")
    check_request(action, file=file, field=field, check_ref=check_ref, connectors=connectors)


_NOTIFY_INSIDE_HTTP = {
    "update_data": "a notification cannot update the run's data (update_data is an action of a node)",
    "sms": "write it as [notify] sms = {…}, not inside http",
    "email": "write it as [notify] email = {…}, not inside http",
    "http": "[notify] http is the request itself: { method, url, headers, body }",
}
"""What a key of another action kind inside ``[notify] http`` is told (R-K5); ``update_data`` in ``[notify]`` too."""


def _parse_notify(value: Any, file: str, inputs: dict[str, Any],
                  connectors: dict[str, ConnectorSpec] | None = None) -> HttpAction | None:
    """``[notify] http = { method, url, headers, body }`` or ``[notify] sms = { connector, template_id, recipients,
    fields }`` (R-M8, R-K3); ``{{ message }}`` is the one-line text."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ConfigError("must be a table: [notify] http = { url = … }", file=file, field="notify")
    if "update_data" in value:  # R-K5: a notification tells people; it never writes the run's data
        raise ConfigError(_NOTIFY_INSIDE_HTTP["update_data"], file=file, field="notify.update_data")
    unknown = sorted(set(value) - {"http", "sms", "email"})
    if unknown:
        raise ConfigError("unknown key (http, sms or email)", file=file, field=f"notify.{unknown[0]}")
    kinds = [k for k in ("http", "sms", "email") if k in value]
    if len(kinds) != 1:
        raise ConfigError("give exactly one of http, sms and email", file=file, field="notify")
    kind = kinds[0]
    if not isinstance(value[kind], dict):
        raise ConfigError('must be a table: { method = "POST", url = "http://…" }', file=file, field=f"notify.{kind}")
    if kind == "http":  # a request, not another kind of action inside it (it passed check and wedged every run
        for inner, said in _NOTIFY_INSIDE_HTTP.items():  # after, adversarial review)
            if inner in value["http"]:
                raise ConfigError(said, file=file, field=f"notify.http.{inner}")
    try:
        action = HttpAction.model_validate(value["http"] if kind == "http" else {kind: value[kind]})
    except ShapeError as exc:  # an sms or email table's errors are placed under their own key already
        raise shape_error(exc, file, f"notify.{kind}" if kind == "http" else "notify") from None
    action = _with_connector_timeouts(action, connectors or {})
    _check_action_templates(action, file, f"notify.{kind}", inputs, set(),
                            frozenset({"message", "run_id", "node_key", "ticket_id", "compensation_id", "error"}),
                            connectors)
    return action


def _parse_smtp(value: Any, file: str) -> SmtpSpec | None:
    """``[smtp]`` (R-K2): host, port, starttls/tls, username/password (``{{ env.NAME }}``), from, timeout.

    Raises:
        ConfigError: naming the field.
    """
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ConfigError("must be a table", file=file, field="smtp")
    try:
        smtp = SmtpSpec.model_validate(value)
    except ShapeError as exc:
        raise shape_error(exc, file, "smtp") from None
    check_smtp(smtp, file=file)
    return smtp


def _update_data_fields(nodes: Mapping[str, NodeSpec], checked: list[Any]) -> set[str]:
    """Every field an ``update_data`` action of the workflow sets: a node's reverse action or failure action, and
    ``checked``, the actions read with the nodes (the compensations of the Apps they call; an App that could not be
    read adds none: its error is reported)."""
    actions = [*checked, *(a for n in nodes.values() for a in (getattr(n, "compensation", None), n.on_failure.action))]
    return {f for a in actions if isinstance(a, HttpRequestSpec) and a.update_data is not None
            for f in a.update_data.fields}


def _emails_without_smtp(nodes: Mapping[str, NodeSpec], notify: HttpAction | None, file: str) -> list[ConfigError]:
    """An error for each email action of a workflow without ``[smtp]`` (R-K5), naming its field."""
    found: list[tuple[str, str]] = []
    for key, node in nodes.items():
        comp = getattr(node, "compensation", None)
        if isinstance(comp, HttpAction) and comp.kind == "email":
            found.append((file, f"nodes.{key}.compensation"))
        if node.on_failure.action is not None and node.on_failure.action.kind == "email":
            found.append((file, f"nodes.{key}.on_failure.{node.on_failure.kind}"))
        refs = [(node.project, node.app)] if isinstance(node, ProcessNode) and node.project and node.app else []
        refs += [(t.project, t.app) for t in node.tools] if isinstance(node, AgentNode) else []
        for project, app_name in refs:
            app = load_app(Path(project), app_name)
            if app.compensation is not None and app.compensation.http is not None \
                    and app.compensation.http.kind == "email":
                found.append((str(Path(project) / "pyproject.toml"), f"tool.workrun.apps.{app_name}.compensation"))
    if notify is not None and notify.kind == "email":
        found.append((file, "notify.email"))
    return [ConfigError("an email action needs [smtp] in the workflow (host, port, from, …)", file=f, field=w)
            for f, w in found]


def _parse_connectors(value: Any, file: str, errors: list[ConfigError]) -> dict[str, ConnectorSpec]:
    """``[connectors.NAME]`` (R-K1): a literal ``base_url``, ``headers`` (``{{ env.NAME }}`` allowed and set now),
    ``timeout``, ``rate_limit`` and ``circuit_breaker``. Each connector's first error is added to ``errors``. A
    connector with a valid name and a table stays declared even when a key, a type, its ``base_url`` or a
    header is wrong (an unset ``{{ env.NAME }}``): what uses it is then not also reported as using an unknown
    connector (the load fails on the connector's own error all the same, R-L1).
    """
    if value is None:
        return {}
    if not isinstance(value, dict):
        errors.append(ConfigError("must be a table of [connectors.NAME] tables", file=file, field="connectors"))
        return {}
    out: dict[str, ConnectorSpec] = {}
    for name, table in value.items():
        try:
            out[name] = _parse_connector(name, table, file, out)
        except ConfigError as exc:  # a connector that validated is in ``out`` already: it stays declared
            errors.append(exc)
    return out


def _parse_connector(name: str, table: Any, file: str, out: dict[str, ConnectorSpec]) -> ConnectorSpec:
    """One ``[connectors.NAME]`` table (see :func:`_parse_connectors`).

    Raises:
        ConfigError: naming the field.
    """
    field = f"connectors.{name}"
    if not _KEY.match(name):
        raise ConfigError("connector names use letters, digits, '_' and '-'", file=file, field=field)
    if not isinstance(table, dict):
        raise ConfigError("must be a table", file=file, field=field)
    try:
        spec = ConnectorSpec.model_validate(table)
    except ShapeError as exc:  # declared all the same (a stand-in never used: the load fails on this error)
        out[name] = ConnectorSpec(base_url="http://127.0.0.1/")
        extra = {e["loc"][0] for e in exc.errors() if e["type"] == "extra_forbidden" and len(e["loc"]) == 1}
        if len(extra) < len(exc.errors()):
            raise shape_error(exc, file, field) from None
        try:  # only unknown keys: the rest is checked too, and its errors said with them (R-L1: all of them)
            _parse_connector(name, {k: v for k, v in table.items() if k not in extra}, file, {})
        except ConfigError as more:
            found = [part for e in (shape_error(exc, file, field), more)
                     for part in (e.errors if isinstance(e, ConfigErrors) else [e])]
            raise ConfigErrors.of(found) from None
        raise shape_error(exc, file, field) from None
    out[name] = spec
    connector_of(out, name, file=file, field=field)  # a literal http(s) base_url, no query
    headers = HttpRequestSpec(method="GET", url="http://127.0.0.1/", headers=spec.headers)

    def no_refs(where: str, ref: str) -> None:
        raise ConfigError(f"{{{{ {ref} }}}}: a connector's headers may use env.NAME only", file=file, field=where)

    check_request(headers, file=file, field=field, check_ref=no_refs)
    return spec


def _with_connector_timeouts(spec: Any, connectors: Mapping[str, ConnectorSpec]) -> Any:
    """``spec`` (a node or an action) with its connector's ``timeout`` where it sets none itself, and the same for
    the reverse action and failure action it holds (R-K1)."""
    update: dict[str, Any] = {}
    conn = connectors.get(getattr(spec, "connector", None) or "")
    if conn is not None and conn.timeout is not None and "timeout" not in spec.model_fields_set \
            and "timeout" in type(spec).model_fields:
        update["timeout"] = conn.timeout
    comp = getattr(spec, "compensation", None)
    if isinstance(comp, HttpAction):
        update["compensation"] = _with_connector_timeouts(comp, connectors)
    policy = getattr(spec, "on_failure", None)
    if policy is not None and getattr(policy, "action", None) is not None:
        update["on_failure"] = policy.model_copy(update={"action": _with_connector_timeouts(policy.action, connectors)})
    return spec.model_copy(update=update) if update else spec
