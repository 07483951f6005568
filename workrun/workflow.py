"""Parsing workflow TOML files, templates and the node DAG (R-W1, SPEC §9).

Everything here runs before a run is created: any error is a ConfigError
(exit 2) and no run exists afterwards (SPEC §10).
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any, Iterator

from pydantic import ValidationError

from workrun.apps import load_app, pydantic_error
from workrun.errors import ConfigError
from workrun.models import AppSpec, HttpAction, HttpNode, NodeSpec, RetryPolicy, WorkflowSpec
from workrun.outbound import allow_from_env, check_action, check_request, parse_allow

__all__ = [
    "FailurePolicy",
    "load_workflow",
    "node_dependencies",
    "node_templates",
    "parse_action",
    "parse_inputs",
    "parse_policy",
    "render",
    "template_refs",
]

_TEMPLATE = re.compile(r"\{\{\s*([^{}]*?)\s*\}\}")
_REF = re.compile(r"^(inputs\.[A-Za-z0-9_\-]+|nodes\.[A-Za-z0-9_\-]+\.result(\.[A-Za-z0-9_\-]+)*)$")
_KEY = re.compile(r"^[A-Za-z0-9_\-]{1,64}$")


class FailurePolicy:
    """A node's ``on_failure`` (R-W7, R-M1..R-M5).

    ``kind``: ``fail`` | ``continue`` | ``retry`` | ``fallback`` | ``notify`` | ``compensate`` |
    ``fallback_action`` | ``terminate``. ``retry`` carries ``then`` (``fail`` or ``notify``, R-M2);
    ``compensate`` and ``fallback_action`` carry their HTTP ``action`` (R-M3, R-M4).
    """

    def __init__(self, kind: str, retry: RetryPolicy | None = None, fallback: str | None = None, *,
                 then: str = "fail", action: HttpAction | None = None) -> None:
        self.kind = kind
        self.retry = retry
        self.fallback = fallback
        self.then = then
        self.action = action

    def attempts(self) -> int:
        """Calls allowed for the node in all (1 unless ``retry``)."""
        return self.retry.attempts if self.retry else 1

    @property
    def exhausted(self) -> str:
        """What a failure that is not absorbed otherwise leads to: ``fail``, ``notify``, ``compensate``,
        ``fallback_action`` or ``terminate`` (a retry budget spent leads to its ``then``)."""
        if self.kind == "retry":
            return self.then
        return self.kind if self.kind in ("notify", "compensate", "fallback_action", "terminate") else "fail"

    @property
    def opens_ticket(self) -> bool:
        """True when an unabsorbed failure opens a ticket (R-M1..R-M5)."""
        return self.exhausted != "fail"


_POLICY_HELP = ('must be "fail", "continue", "notify", "terminate", { retry = { attempts, backoff }, then = '
                '"fail" | "notify" }, { fallback = "NODE" }, { compensate = ACTION } or { fallback_action = ACTION }')


def parse_action(value: Any, file: str, field: str) -> HttpAction:
    """Parse an HTTP action table of manual repair (R-M3, R-M4, R-M8): the shape of a reverse action (R-H6).

    Templates are checked by :func:`_check_action_templates` once the graph is known.

    Raises:
        ConfigError: not a table, unknown keys, wrong types (SPEC §17), a URL that is not literal
            http(s) with a literal host and port (R-H3).
    """
    if not isinstance(value, dict):
        raise ConfigError('must be a table: { method = "POST", url = "http://…" }', file=file, field=field)
    try:
        return HttpAction.model_validate(value)
    except ValidationError as exc:
        raise pydantic_error(exc, file, field) from None


def parse_policy(value: Any, file: str, field: str) -> FailurePolicy:
    """Parse ``on_failure`` (R-W7, R-M1..R-M5).

    Raises:
        ConfigError: naming ``FIELD`` (or the sub-field) for anything but the forms of ``_POLICY_HELP``.
    """
    if value in ("fail", "continue", "notify", "terminate"):
        return FailurePolicy(value)
    if isinstance(value, dict) and value:
        keys = set(value)
        if "retry" in keys and keys <= {"retry", "then"}:
            arg = value["retry"]
            if not isinstance(arg, dict):
                raise ConfigError("must be a table: { retry = { attempts = 3, backoff = 0.5 } }", file=file,
                                  field=f"{field}.retry")
            then = value.get("then", "fail")
            if then not in ("fail", "notify"):
                raise ConfigError('must be "fail" or "notify"', file=file, field=f"{field}.then")
            try:
                return FailurePolicy("retry", retry=RetryPolicy.model_validate(arg), then=then)
            except ValidationError as exc:
                raise pydantic_error(exc, file, f"{field}.retry") from None
        if len(value) == 1:
            (kind, arg), = value.items()
            if kind == "fallback" and isinstance(arg, str):
                return FailurePolicy("fallback", fallback=arg)
            if kind in ("compensate", "fallback_action"):
                return FailurePolicy(kind, action=parse_action(arg, file, f"{field}.{kind}"))
        if "then" in keys and "retry" not in keys:
            raise ConfigError("then = … goes with retry = { … }", file=file, field=f"{field}.then")
        unknown = sorted(keys - {"retry", "then", "fallback", "compensate", "fallback_action"})
        if unknown:
            raise ConfigError("unknown key; " + _POLICY_HELP, file=file, field=f"{field}.{unknown[0]}")
    raise ConfigError(_POLICY_HELP, file=file, field=field)


def _strings(value: Any, path: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(v, f"{path}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _strings(v, f"{path}[{i}]")


def template_refs(value: Any, path: str = "input") -> list[tuple[str, str]]:
    """Return ``[(field path, reference)]`` for every ``{{ ... }}`` in ``value``."""
    return [(p, m.group(1)) for p, s in _strings(value, path) for m in _TEMPLATE.finditer(s)]


def _lookup(ref: str, context: dict[str, Any]) -> Any:
    parts = ref.split(".")
    if parts[0] == "inputs":
        return context["inputs"][parts[1]]
    value: Any = context["nodes"][parts[1]]["result"]
    for part in parts[3:]:
        if not isinstance(value, dict) or part not in value:
            raise KeyError(ref)
        value = value[part]
    return value


def render(value: Any, context: dict[str, Any]) -> Any:
    """Fill templates in ``value`` from ``{"inputs": {...}, "nodes": {key: {"result": ...}}}``.

    A string that is exactly one template takes the referenced value as is
    (numbers stay numbers); otherwise values are interpolated as text (JSON for
    objects and lists).

    Raises:
        KeyError: naming the reference, when a value is missing at run time.
    """
    if isinstance(value, dict):
        return {k: render(v, context) for k, v in value.items()}
    if isinstance(value, list):
        return [render(v, context) for v in value]
    if not isinstance(value, str):
        return value
    whole = _TEMPLATE.fullmatch(value.strip())
    if whole:
        return _lookup(whole.group(1), context)

    def sub(m: re.Match[str]) -> str:
        v = _lookup(m.group(1), context)
        return v if isinstance(v, str) else json.dumps(v)

    return _TEMPLATE.sub(sub, value)


def parse_inputs(pairs: list[str]) -> dict[str, str]:
    """Parse ``--input k=v`` options into a dict.

    Raises:
        ConfigError: for an item without ``=`` or with an empty key.
    """
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, val = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"expected KEY=VALUE, got {pair!r}", field="--input")
        out[key.strip()] = val
    return out


def node_templates(node: NodeSpec | HttpNode, prefix: str = "") -> list[tuple[str, str]]:
    """``[(field path, reference)]`` of the node's templates that read run inputs or upstream results
    (``{{ env.NAME }}`` in an http node's headers is not one of them; the reverse action's are not either)."""
    p = f"{prefix}." if prefix else ""
    if isinstance(node, HttpNode):
        refs = template_refs(node.url, f"{p}url") + template_refs(node.headers, f"{p}headers") \
            + template_refs(node.body, f"{p}body")
        return [(f, r) for f, r in refs if not r.startswith("env.")]
    return template_refs(node.input, f"{p}input") + template_refs(node.prompt, f"{p}prompt") \
        + template_refs(node.message, f"{p}message") + template_refs(node.script, f"{p}script")


def node_dependencies(node: NodeSpec | HttpNode) -> list[str]:
    """``needs`` plus every node referenced by a template (SPEC §10), in order, without duplicates."""
    deps = list(node.needs)
    for _, ref in node_templates(node):
        parts = ref.split(".")
        if parts[0] == "nodes" and len(parts) > 1 and parts[1] not in deps:
            deps.append(parts[1])
    return deps


def _check_app_action(app: AppSpec, project: Path, inputs: dict[str, Any]) -> None:
    """An App's HTTP reverse action, checked against this run: its environment variables are set and its
    ``inputs.NAME`` exist (R-H5, R-H6)."""
    if app.compensation is not None and app.compensation.http is not None:
        check_action(app.compensation.http, file=str(project / "pyproject.toml"),
                     field=f"tool.workrun.apps.{app.name}.compensation.http", inputs=inputs)


def _check_cycles(graph: dict[str, list[str]], file: str, what: str) -> None:
    state: dict[str, int] = {}

    def visit(key: str, trail: list[str]) -> None:
        state[key] = 1
        for dep in graph.get(key, []):
            if state.get(dep) == 1:
                cycle = " -> ".join([*trail[trail.index(dep):], dep]) if dep in trail else f"{key} -> {dep}"
                raise ConfigError(f"cycle: {cycle}", file=file, field=what)
            if dep not in state:
                visit(dep, [*trail, dep])
        state[key] = 2

    for key in graph:
        if key not in state:
            visit(key, [key])


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

    def upstream(key: str) -> set[str]:
        out: set[str] = set()
        todo = list(graph.get(key, []))
        while todo:
            dep = todo.pop()
            if dep not in out:
                out.add(dep)
                todo.extend(graph.get(dep, []))
        return out

    for key, deps in graph.items():
        for dep in deps:
            if dep in fallback_of:
                raise ConfigError(f"depends on {dep!r}, the fallback of {fallback_of[dep]!r}, which runs only in its "
                                  f"place: depend on {fallback_of[dep]!r} instead (it carries the fallback's result)",
                                  file=file, field=f"nodes.{key}")
    for fb, primary in fallback_of.items():
        missing = [d for d in graph.get(fb, []) if d not in upstream(primary)]
        if missing:
            raise ConfigError(f"fallback {fb!r} depends on {missing[0]!r}, which is not upstream of {primary!r}: a "
                              f"fallback runs in place of {primary!r}, only with what {primary!r} depends on done",
                              file=file, field=f"nodes.{primary}.on_failure.fallback")


def load_workflow(path: Path, overrides: dict[str, str] | None = None) -> tuple[WorkflowSpec, dict[str, Any]]:
    """Load, validate and resolve a workflow file (R-W1; SPEC §9, §10).

    Args:
        path: the workflow TOML file; ``project`` paths are relative to it.
        overrides: ``--input`` values, overriding ``[inputs]`` defaults.

    Returns:
        (spec with absolute project paths, the run's inputs).

    Raises:
        ConfigError: bad TOML, unknown keys, missing nodes, cycles, bad templates,
            unknown Apps, App config errors, bad failure policies.
    """
    path = Path(path)
    file = str(path)
    if path.is_dir():
        raise ConfigError("is a directory, not a workflow file", file=file)
    if not path.is_file():
        raise ConfigError("workflow file not found", file=file)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"not valid TOML: {exc}", file=file) from None
    unknown = set(data) - {"name", "inputs", "nodes", "description", "http_allow", "notify"}
    if unknown:
        raise ConfigError("unknown key", file=file, field=sorted(unknown)[0])
    name = data.get("name", path.stem)
    if not isinstance(name, str) or not name:
        raise ConfigError("must be a non-empty string", file=file, field="name")
    defaults = data.get("inputs", {})
    if not isinstance(defaults, dict):
        raise ConfigError("must be a table", file=file, field="inputs")
    nodes_table = data.get("nodes")
    if not isinstance(nodes_table, dict) or not nodes_table:
        raise ConfigError("a workflow needs at least one [nodes.KEY] table", file=file, field="nodes")
    inputs = {**defaults, **(overrides or {})}
    base = path.resolve().parent
    http_allow = parse_allow(data.get("http_allow", []), file=file, field="http_allow").texts()
    allow_from_env()  # a bad WORKRUN_HTTP_ALLOW is found before anything runs

    nodes: dict[str, NodeSpec | HttpNode] = {}
    apps: dict[str, AppSpec] = {}
    for key, table in nodes_table.items():
        prefix = f"nodes.{key}"
        if not _KEY.match(key):
            raise ConfigError("node keys use letters, digits, '_' and '-'", file=file, field=prefix)
        if not isinstance(table, dict):
            raise ConfigError("must be a table", file=file, field=prefix)
        table = dict(table)
        if "project" in table and isinstance(table["project"], str):
            table["project"] = str((base / table["project"]).resolve())
        if isinstance(table.get("tools"), list):
            table["tools"] = [
                {**t, "project": str((base / t["project"]).resolve())}
                if isinstance(t, dict) and isinstance(t.get("project"), str) else t
                for t in table["tools"]
            ]
        try:
            node: NodeSpec | HttpNode = (HttpNode if table.get("kind") == "http" else NodeSpec).model_validate(
                {**table, "key": key})
        except ValidationError as exc:
            raise pydantic_error(exc, file, prefix) from None
        if isinstance(node, HttpNode):  # R-H1, R-H3, R-H5, R-H6: the references are checked with all nodes below
            check_request(node, file=file, field=prefix, check_ref=lambda where, ref: None)
            if node.compensation is not None:
                check_action(node.compensation, file=file, field=f"{prefix}.compensation", inputs=inputs)
        elif node.kind == "process":
            for field in ("project", "app"):
                if not getattr(node, field):
                    raise ConfigError("is required for a process node", file=file, field=f"{prefix}.{field}")
            if not Path(node.project).is_dir():  # type: ignore[arg-type]
                raise ConfigError(f"App project directory {node.project} not found", file=file,
                                  field=f"{prefix}.project")
            apps[key] = load_app(Path(node.project), node.app, file=file, field=f"{prefix}.app")  # type: ignore[arg-type]
            if apps[key].kind != "process":
                raise ConfigError(f"App {node.app!r} is a {apps[key].kind} App; a process node needs a process App",
                                  file=file, field=f"{prefix}.app")
            _check_app_action(apps[key], Path(node.project), inputs)  # type: ignore[arg-type]
        elif node.kind == "agent":
            if not node.tools:
                raise ConfigError("an agent node needs at least one Tool App", file=file, field=f"{prefix}.tools")
            for i, ref in enumerate(node.tools):
                if not Path(ref.project).is_dir():
                    raise ConfigError(f"App project directory {ref.project} not found", file=file,
                                      field=f"{prefix}.tools[{i}].project")
                spec = load_app(Path(ref.project), ref.app, file=file, field=f"{prefix}.tools[{i}].app")
                if spec.kind != "tool":
                    raise ConfigError(f"App {ref.app!r} is not a Tool App", file=file, field=f"{prefix}.tools[{i}].app")
                _check_app_action(spec, Path(ref.project), inputs)
            for i, step in enumerate(node.script):  # scripted steps: {tool, args} or {error} (issue 5)
                where = f"{prefix}.script[{i}]"
                if set(step) - {"tool", "args", "error"}:
                    raise ConfigError("unknown key " + repr(sorted(set(step) - {"tool", "args", "error"})[0]),
                                      file=file, field=where)
                if "error" not in step and not isinstance(step.get("tool"), str):
                    raise ConfigError("a script step needs tool = \"NAME\" (or error = \"...\")", file=file,
                                      field=where)
                if not isinstance(step.get("args", {}), dict):
                    raise ConfigError("must be a table of tool arguments", file=file, field=f"{where}.args")
        elif node.kind == "remote_agent":
            if not node.url:
                raise ConfigError("is required for a remote_agent node", file=file, field=f"{prefix}.url")
            from urllib.parse import urlsplit

            parts = urlsplit(node.url)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                raise ConfigError("must be an http:// or https:// URL", file=file, field=f"{prefix}.url")
            try:  # found before anything runs, not as a failed run (SPEC §10)
                import a2a.client  # noqa: F401
            except ImportError:
                from workrun.remote import MISSING_EXTRA

                raise ConfigError(MISSING_EXTRA, file=file, field=f"{prefix}.kind") from None
        nodes[key] = node

    policies = {k: parse_policy(n.on_failure, file, f"nodes.{k}.on_failure") for k, n in nodes.items()}
    graph: dict[str, list[str]] = {}
    for key, node in nodes.items():
        prefix = f"nodes.{key}"
        for dep in node.needs:
            if dep not in nodes:
                raise ConfigError(f"unknown node {dep!r}", file=file, field=f"{prefix}.needs")
            if dep == key:
                raise ConfigError("a node cannot need itself", file=file, field=f"{prefix}.needs")
        for field, ref in node_templates(node, prefix):
            if not _REF.match(ref):
                raise ConfigError(f"bad template {{{{ {ref} }}}}: use inputs.NAME or nodes.KEY.result.FIELD",
                                  file=file, field=field)
            parts = ref.split(".")
            if parts[0] == "inputs":
                if parts[1] not in inputs:
                    raise ConfigError(f"{{{{ {ref} }}}} refers to an input that is neither in [inputs] nor given "
                                      "with --input", file=file, field=field)
                continue
            target = parts[1]
            if target not in nodes:
                raise ConfigError(f"{{{{ {ref} }}}} refers to unknown node {target!r}", file=file, field=field)
            if target == key:
                raise ConfigError(f"{{{{ {ref} }}}} refers to the node itself", file=file, field=field)
            contract = apps[target].output if target in apps else {}
            if isinstance(nodes[target], HttpNode) and len(parts) > 3 and parts[3] not in ("status", "headers", "body"):
                raise ConfigError(f"{{{{ {ref} }}}}: an http node's result has status, headers and body only",
                                  file=file, field=field)
            if contract and len(parts) > 3 and parts[3] not in contract:
                raise ConfigError(f"{{{{ {ref} }}}}: App {nodes[target].app!r} declares no output field {parts[3]!r}",
                                  file=file, field=field)
        policy = policies[key]
        if policy.kind == "fallback":
            if policy.fallback not in nodes or policy.fallback == key:
                raise ConfigError(f"fallback {policy.fallback!r} is not another node of this workflow",
                                  file=file, field=f"{prefix}.on_failure.fallback")
        graph[key] = node_dependencies(node)
    _check_cycles(graph, file, "needs")
    _check_fallbacks(graph, policies, file)
    for key, policy in policies.items():
        if policy.action is not None:
            _check_action_templates(policy.action, file, f"nodes.{key}.on_failure.{policy.kind}", inputs,
                                    _upstream(graph, key), _ACTION_NAMES)
    notify = _parse_notify(data.get("notify"), file, inputs)
    spec = WorkflowSpec(name=name, path=str(path.resolve()), inputs=defaults, nodes=nodes, http_allow=http_allow,
                        notify=notify)
    return spec, inputs


_ACTION_NAMES = frozenset({"run_id", "node_key", "ticket_id", "error"})


def _upstream(graph: dict[str, list[str]], key: str) -> set[str]:
    out: set[str] = set()
    todo = list(graph.get(key, []))
    while todo:
        dep = todo.pop()
        if dep not in out:
            out.add(dep)
            todo.extend(graph.get(dep, []))
    return out


def _check_action_templates(action: HttpAction, file: str, field: str, inputs: dict[str, Any],
                            upstream: set[str], names: frozenset[str]) -> None:
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
        if parts[0] == "nodes" and len(parts) >= 3 and parts[2] == "result":
            if parts[1] not in upstream:
                raise ConfigError(f"{{{{ {ref} }}}}: node {parts[1]!r} is not upstream of this node, so it has no "
                                  "result when the action is registered", file=file, field=where)
            return
        raise ConfigError(f"bad template {{{{ {ref} }}}}: use " + ", ".join(sorted(names)) + ", inputs.NAME, "
                          "nodes.KEY.result.FIELD or env.NAME (headers)", file=file, field=where)

    check_request(action, file=file, field=field, check_ref=check_ref)


def _parse_notify(value: Any, file: str, inputs: dict[str, Any]) -> HttpAction | None:
    """``[notify] http = { method, url, headers, body }`` (R-M8); ``{{ message }}`` is the one-line text."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ConfigError("must be a table: [notify] http = { url = … }", file=file, field="notify")
    unknown = sorted(set(value) - {"http"})
    if unknown:
        raise ConfigError("unknown key", file=file, field=f"notify.{unknown[0]}")
    if "http" not in value:
        raise ConfigError("is required", file=file, field="notify.http")
    action = parse_action(value["http"], file, "notify.http")
    _check_action_templates(action, file, "notify.http", inputs, set(),
                            frozenset({"message", "run_id", "node_key", "ticket_id", "compensation_id", "error"}))
    return action
