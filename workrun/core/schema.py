"""JSON Schemas (draft 2020-12) of a workflow file and of a pyproject's ``[tool.workrun]`` table (SPEC §21, R-L4).

Built from the same models the loader validates with (node kinds, App configs, actions), with the
written forms the loader accepts besides them (``on_failure``'s strings and tables, ``[notify] http``, a
node's ``kind`` defaulting to ``process``). A workflow file may start with ``#:schema URL`` so that TOML
editors (Taplo, Even Better TOML) complete and check it; ``workrun schema workflow > workflow.schema.json``
writes the file to point at.
"""

from __future__ import annotations

import copy
from typing import Any

from workrun.core.models import NODE_MODELS, AppSpec, ConnectorSpec, HttpAction, RetryPolicy, SmtpSpec

__all__ = ["APP_NAME", "DRAFT", "app_schema", "workflow_schema"]

DRAFT = "https://json-schema.org/draft/2020-12/schema"

_INVISIBLE = "\\u0000-\\u001f\\u007f-\\u009f\\u00ad\\u061c\\u180e\\u200b-\\u200f\\u2028-\\u202e\\u2060-\\u206f\\ufeff"
_PRINTABLE_NAME = f"^[^{_INVISIBLE}]*[^\\s{_INVISIBLE}][^{_INVISIBLE}]*$"
APP_NAME = _PRINTABLE_NAME
"""The pattern (JSON Schema's and Python's ``re``) an App name matches, in the schema and in the loader alike
(R-L4): not blank, and no control, line-separator, zero-width or bidi-override character (a NUL or an escape
once reached the dashboard's HTML)."""


def _inline(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """A model's schema with its ``$defs`` moved into ``defs`` (refs kept as ``#/$defs/NAME``)."""
    schema = copy.deepcopy(schema)
    defs.update(schema.pop("$defs", {}))
    return schema


def _policy(defs: dict[str, Any]) -> dict[str, Any]:
    """``on_failure`` as written (R-W7, R-M1..R-M5); an ACTION is an HTTP request or an ``sms`` (R-K3)."""
    defs["HttpAction"] = _inline(HttpAction.model_json_schema(), defs)
    for written_by_the_loader in ("kind", "email", "update_data"):  # the other kinds have forms of their own
        defs["HttpAction"]["properties"].pop(written_by_the_loader, None)
    defs["RetryPolicy"] = _inline(RetryPolicy.model_json_schema(), defs)
    defs["Sms"] = {"type": "object", "additionalProperties": False,
                   "required": ["connector", "template_id", "recipients"],
                   "properties": {"connector": {"type": "string"}, "template_id": {"type": "string"},
                                  "recipients": {"type": "array", "items": {"type": "string"}},
                                  "fields": {"type": "object"}}}
    knobs = {k: v for k, v in defs["HttpAction"]["properties"].items()
             if k in ("timeout", "idempotent", "max_retries", "backoff")}
    defs["SmsAction"] = {"type": "object", "additionalProperties": False, "required": ["sms"],
                         "properties": {"sms": {"$ref": "#/$defs/Sms"}, **knobs}}
    defs["Email"] = {"type": "object", "additionalProperties": False, "required": ["to", "body"],
                     "properties": {"to": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                                    "cc": {"type": "array", "items": {"type": "string"}}, "body": {"type": "string"}}}
    defs["EmailAction"] = {"type": "object", "additionalProperties": False, "required": ["email"],
                           "properties": {"email": {"$ref": "#/$defs/Email"}, **knobs}}
    defs["DataAction"] = {"type": "object", "additionalProperties": False, "required": ["update_data"],
                          "properties": {"update_data": {
                              "type": "object", "additionalProperties": False, "required": ["fields"],
                              "properties": {"fields": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                                             "values": {"type": "object"}}}, **knobs}}
    action = {"oneOf": [{"$ref": "#/$defs/HttpAction"}, {"$ref": "#/$defs/SmsAction"},
                        {"$ref": "#/$defs/EmailAction"}, {"$ref": "#/$defs/DataAction"}]}
    defs["Action"] = action
    return {
        "description": "What a failure of the node leads to (SPEC §12).",
        "oneOf": [
            {"enum": ["fail", "continue", "notify", "terminate"]},
            {"type": "object", "additionalProperties": False, "required": ["retry"],
             "properties": {"retry": {"$ref": "#/$defs/RetryPolicy"}, "then": {"enum": ["fail", "notify"]}}},
            {"type": "object", "additionalProperties": False, "required": ["fallback"],
             "properties": {"fallback": {"type": "string"}}},
            {"type": "object", "additionalProperties": False, "required": ["compensate"],
             "properties": {"compensate": action}},
            {"type": "object", "additionalProperties": False, "required": ["fallback_action"],
             "properties": {"fallback_action": action}},
        ],
    }


def _node(kind: str, defs: dict[str, Any]) -> dict[str, Any]:
    schema = _inline(NODE_MODELS[kind].model_json_schema(), defs)
    props = schema.get("properties", {})
    props.pop("key", None)
    props["on_failure"] = {"$ref": "#/$defs/Policy"}
    if "compensation" in props:  # an http node's reverse action: any ACTION form (SPEC §19)
        props["compensation"] = {"anyOf": [{"$ref": "#/$defs/Action"}, {"type": "null"}]}
    schema["required"] = [r for r in schema.get("required", []) if r not in ("key", "on_failure")]
    if kind == "process":  # ``project`` and ``app`` are required (the process checker says so at load)
        schema["required"] = [r for r in schema["required"] if r != "kind"] + ["project", "app"]
        props["kind"] = {"const": "process", "default": "process"}
    else:
        props["kind"] = {"const": kind}
        if "kind" not in schema["required"]:
            schema["required"].append("kind")
    schema["additionalProperties"] = False
    schema.pop("title", None)
    return schema


_HTTP_URL = "^[Hh][Tt][Tt][Pp][Ss]?://"
#: a path inside the project: relative, with no ``..`` segment (R-A4)
_INSIDE = "^(?![/\\\\])(?!.*(^|[/\\\\])\\.\\.([/\\\\]|$)).+$"


def _as_the_checks_say(defs: dict[str, Any]) -> None:
    """What the loader's checks beyond the models refuse, said in the schema where JSON Schema can (R-L4): a
    remote agent's ``url`` (required, http or https), an agent's tools (one at least) and script steps (``tool``,
    ``args``, ``error``), a connector's literal http(s) ``base_url``, a request through a connector with a
    relative ``url`` (or one whole template, R-K6), ``[smtp]`` with ``tls`` or ``starttls``, not both."""
    remote = defs["Node_remote_agent"]
    remote["required"] = [*remote["required"], "url"]
    remote["properties"]["url"] = {"type": "string", "pattern": _HTTP_URL, "title": "Url"}
    agent = defs["Node_agent"]["properties"]
    agent["tools"]["minItems"] = 1
    agent["script"]["items"] = {"type": "object", "additionalProperties": False,
                                "properties": {"tool": {"type": "string"}, "args": {"type": "object"},
                                               "error": {"type": "string"}},
                                "anyOf": [{"required": ["tool"]}, {"required": ["error"]}]}
    defs["Connector"]["properties"]["base_url"]["pattern"] = _HTTP_URL
    whole = "\\{\\{[^{}]*\\}\\}$"  # a url that is one whole template (R-K6)
    for name, alone in (("Node_http", _HTTP_URL), ("HttpAction", f"({_HTTP_URL}|^{whole})")):
        # through a connector a url is relative (or one whole template); without one, http(s) (a reverse action's
        # may be one whole template: resolved against the original request's origin)
        defs[name].setdefault("allOf", []).append({
            "if": {"required": ["connector"], "properties": {"connector": {"type": "string"}}},
            "then": {"properties": {"url": {"type": "string", "pattern": f"^(/|{whole})"}}},
            "else": {"properties": {"url": {"type": "string", "pattern": alone}}}})
    defs["Smtp"]["not"] = {"required": ["tls", "starttls"],
                           "properties": {"tls": {"const": True}, "starttls": {"const": True}}}
    for name, one in defs.items():  # a node lists each node it needs once
        if name.startswith("Node_") and "needs" in one.get("properties", {}):
            one["properties"]["needs"]["uniqueItems"] = True


def workflow_schema() -> dict[str, Any]:
    """The JSON Schema of a workflow file (R-W1, SPEC §9, §11, §12)."""
    defs: dict[str, Any] = {}
    defs["Policy"] = _policy(defs)
    defs["Connector"] = _inline(ConnectorSpec.model_json_schema(), defs)
    defs["Smtp"] = _inline(SmtpSpec.model_json_schema(by_alias=True), defs)
    kinds = list(NODE_MODELS)
    for kind in kinds:
        defs[f"Node_{kind}"] = _node(kind, defs)
    _as_the_checks_say(defs)
    node = {"oneOf": [{"$ref": f"#/$defs/Node_{k}"} for k in kinds]}
    return {
        "$schema": DRAFT,
        "$id": "https://workrun.invalid/schema/workflow.json",
        "title": "Workrun workflow",
        "type": "object",
        "additionalProperties": False,
        "required": ["nodes"],
        "properties": {
            "name": {"type": "string", "minLength": 1,  # one line: no control character or line break
                     "pattern": "^[^\\u0000-\\u001f\\u007f-\\u009f\\u2028\\u2029]+$"},
            "description": {"type": "string"},
            "inputs": {"type": "object", "description": "Input defaults; `--input NAME=VALUE` overrides."},
            "http_allow": {"type": "array", "items": {"type": "string"},
                           "description": "Addresses the outbound guard lets through (R-H3)."},
            "notify": {"type": "object", "additionalProperties": False, "minProperties": 1, "maxProperties": 1,
                       "properties": {"http": {"$ref": "#/$defs/HttpAction"}, "sms": {"$ref": "#/$defs/Sms"},
                                      "email": {"$ref": "#/$defs/Email"}}},
            "smtp": {"$ref": "#/$defs/Smtp"},
            "connectors": {"type": "object", "propertyNames": {"pattern": "^[A-Za-z0-9_-]+$"},
                           "additionalProperties": {"$ref": "#/$defs/Connector"}},
            "nodes": {"type": "object", "minProperties": 1, "propertyNames": {"pattern": "^[A-Za-z0-9_-]{1,64}$"},
                      "additionalProperties": node},
        },
        "$defs": defs,
    }


def app_schema() -> dict[str, Any]:
    """The JSON Schema of a pyproject's ``[tool.workrun]`` table (R-A1..R-A5): ``apps`` by name."""
    defs: dict[str, Any] = {}
    app = _inline(AppSpec.model_json_schema(), defs)
    app.get("properties", {}).pop("name", None)
    app["required"] = [r for r in app.get("required", []) if r != "name"]
    app.pop("title", None)
    app["properties"]["entry"]["pattern"] = _INSIDE
    defs["App"] = app
    # the written forms of SPEC §19 beside ``entry`` and ``http``: an ACTION of any kind in place (the loader
    # turns each into ``http``); exactly one of them, as the loader says
    _policy(defs)
    comp = defs["CompensationSpec"]["properties"]
    request = defs["HttpAction"]["properties"]
    comp.update({k: request[k] for k in ("method", "url", "headers", "body", "connector") if k in request})
    comp.update(sms={"$ref": "#/$defs/Sms"}, email={"$ref": "#/$defs/Email"},
                update_data=defs["DataAction"]["properties"]["update_data"])
    # the compensation script's path is checked as the App's entry is (R-A4: no '..', no absolute path)
    comp["entry"] = {"anyOf": [{"type": "string", "pattern": _INSIDE}, {"type": "null"}], "default": None,
                     "title": "Entry"}
    # warm = true applies to Tool Apps only (R-P2), as the loader says
    app["allOf"] = [*app.get("allOf", []), {"if": {"properties": {"warm": {"const": True}}, "required": ["warm"]},
                                            "then": {"properties": {"kind": {"const": "tool"}},
                                                     "required": ["kind"]}}]
    kinds = ["entry", "http", "sms", "email", "update_data", "url"]
    defs["CompensationSpec"]["oneOf"] = [{"required": [k]} for k in kinds]
    defs["CompensationSpec"]["description"] = (
        "An App's compensation (R-A4, R-C7, R-H6, SPEC §19): a script `entry`, or one reverse action: `http = "
        "{…}`, a request written in place (`method`, `url`, optional `connector`, `headers`, `body`), `sms`, "
        "`email` or `update_data`. `timeout` is seconds per attempt; at most `max_retries + 1` attempts.")
    return {
        "$schema": DRAFT,
        "$id": "https://workrun.invalid/schema/tool-workrun.json",
        "title": "[tool.workrun] of an App project",
        "type": "object",
        "additionalProperties": False,
        "required": ["apps"],
        "properties": {"apps": {"type": "object", "minProperties": 1,  # a name is printable text, not blank
                                "propertyNames": {"pattern": _PRINTABLE_NAME},
                                "additionalProperties": {"$ref": "#/$defs/App"}}},
        "$defs": defs,
    }
