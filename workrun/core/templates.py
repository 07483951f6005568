"""Templates in workflow fields: ``{{ inputs.NAME }}`` and ``{{ nodes.KEY.result.FIELD }}`` (R-W1, SPEC §9, §10)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from workrun.core.errors import ConfigError

__all__ = ["REFERENCE", "TemplateValueError", "check_template_braces", "node_dependencies", "parse_inputs",
           "reads_data", "render", "strings", "template_refs"]

_TEMPLATE = re.compile(r"\{\{\s*([^{}]*?)\s*\}\}")
#: what a reference inside ``{{ }}`` may look like
REFERENCE = re.compile(r"^(inputs\.[A-Za-z0-9_\-]+|data\.[A-Za-z0-9_\-]+"
                       r"|nodes\.[A-Za-z0-9_\-]+\.result(\.[A-Za-z0-9_\-]+)*)$")


def missing_value(reference: str | KeyError) -> str:
    """What is said of a template whose value is missing at run time: ``template {{ REF }} has no value``
    (``reference``: the reference, or the ``KeyError`` a fill raised for it)."""
    ref = reference.args[0] if isinstance(reference, KeyError) else reference
    return f"template {{{{ {ref} }}}} has no value"


class TemplateValueError(ConfigError):
    """Raised when a template refers to a value that is missing at run time (the node then fails)."""

    def __init__(self, reference: str) -> None:
        self.reference = reference
        super().__init__(missing_value(reference))


def strings(value: Any, path: str) -> Iterator[tuple[str, str]]:
    """Every string inside ``value`` (a JSON-like value) with its dotted path: ``(path, text)``."""
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from strings(v, f"{path}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from strings(v, f"{path}[{i}]")


def template_refs(value: Any, path: str = "input") -> list[tuple[str, str]]:
    """Return ``[(field path, reference)]`` for every ``{{ ... }}`` in ``value``."""
    return [(p, m.group(1)) for p, s in strings(value, path) for m in _TEMPLATE.finditer(s)]


def check_template_braces(value: Any, path: str, file: str) -> None:
    """Refuse a ``{{`` without its ``}}`` (or the reverse) anywhere in a templated value (SPEC §17).

    Args:
        value: a templated value (string, or tables and arrays of them).
        path: its field path, e.g. ``nodes.a.input``.
        file: the workflow file, for the error.

    Raises:
        ConfigError: naming the string's field path.
    """
    for where, text in strings(value, path):
        rest = _TEMPLATE.sub("", text)
        if "{{" in rest:
            raise ConfigError("unterminated template: '{{' without its '}}'", file=file, field=where)
        if "}}" in rest:
            raise ConfigError("'}}' without a '{{' before it", file=file, field=where)


def _lookup(ref: str, context: dict[str, Any]) -> Any:
    parts = ref.split(".")
    try:
        if parts[0] == "inputs":
            return context["inputs"][parts[1]]
        if parts[0] == "data":  # the run's data when the node starts (R-K4); a name not set yet is null
            return (context.get("data") or {}).get(parts[1])
        value: Any = context["nodes"][parts[1]]["result"]
    except (KeyError, IndexError):
        raise TemplateValueError(ref) from None
    for part in parts[3:]:
        if not isinstance(value, dict) or part not in value:
            raise TemplateValueError(ref)
        value = value[part]
    return value


def render(value: Any, context: dict[str, Any]) -> Any:
    """Fill templates in ``value`` from ``{"inputs": {...}, "nodes": {key: {"result": ...}}}``.

    A string that is exactly one template takes the referenced value as is
    (numbers stay numbers, ``null`` stays ``null``); otherwise values are interpolated
    as text (JSON for objects and lists, ``null`` as the empty string, SPEC §19). Each
    template is filled once: a value that contains ``{{ … }}`` is data (R-X1).

    Raises:
        TemplateValueError: naming the reference, when a value is missing at run time.
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
        if v is None:
            return ""
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
        try:
            pair.encode("utf-8")
        except UnicodeEncodeError:  # bytes the terminal's encoding could not decode
            raise ConfigError(f"{key.strip()!r}: the value is not valid UTF-8", field="--input") from None
        out[key.strip()] = val
    return out


def node_dependencies(needs: list[str], templated: dict[str, Any]) -> list[str]:
    """``needs`` plus every node referenced by a template (SPEC §10), in order, without duplicates.

    Args:
        needs: the node's ``needs``.
        templated: the node's template-bearing fields by name (``NodeSpec.templated()``).
    """
    deps = list(needs)
    for name, value in templated.items():
        for _, ref in template_refs(value, name):
            parts = ref.split(".")
            if parts[0] == "nodes" and len(parts) > 1 and parts[1] not in deps:
                deps.append(parts[1])
    return deps


def reads_data(value: Any) -> bool:
    """True when a templated value (any JSON-like value) reads ``{{ data.NAME }}``: the run's data is then read
    for it (R-K4)."""
    return "data." in json.dumps(value, default=str)
