"""Models of what users write: App configs (``[tool.workrun.apps.NAME]``) and workflows.

Journal rows are typed dicts (:mod:`workrun.core.rows`); these models describe
*input* that must be validated before anything runs (R-I2).
"""

from __future__ import annotations

import re
from typing import Any, Literal

from workrun.core.shape import Field, Shape, ShapeError, typo_hints

__all__ = [
    "NODE_MODELS",
    "AgentNode",
    "AppSpec",
    "CompensationSpec",
    "FailurePolicy",
    "HttpAction",
    "HttpNode",
    "HttpRequestSpec",
    "NodeSpec",
    "OutputField",
    "PolicyError",
    "ProcessNode",
    "RemoteAgentNode",
    "RetryPolicy",
    "ToolPolicy",
    "ToolRef",
    "WorkflowSpec",
]

FieldType = Literal["string", "integer", "number", "boolean", "object", "array"]


class _Strict(Shape):
    """Base of every config model: unknown keys refused, values typed as TOML types them (SPEC §17).

    Strict: a string where a number or boolean belongs is an error, never converted; an integer
    is a fine number; a boolean is never a number (:mod:`workrun.core.shape`). A model's checks are built
    when it is first validated, not at import, so a command pays only for the models it validates (SPEC §24).
    """


class OutputField(_Strict):
    """One field of an App's output contract (R-A3)."""

    type: FieldType
    required: bool = False


HttpMethod = Literal["GET", "POST", "PUT", "PATCH", "DELETE"]


class RateLimit(_Strict):
    """A connector's ``rate_limit = { requests, per }``: never more than ``requests`` sends in any ``per`` seconds."""

    requests: int = Field(ge=1, le=1_000_000)
    per: float = Field(gt=0, le=86400)


class CircuitBreaker(_Strict):
    """A connector's ``circuit_breaker = { failures, reset }``: open after ``failures`` failures in a row; one
    request is tried again ``reset`` seconds after it opened."""

    failures: int = Field(ge=1, le=10_000)
    reset: float = Field(gt=0, le=86400)


class ConnectorSpec(_Strict):
    """``[connectors.NAME]`` of a workflow (R-K1): a named service its requests share.

    ``base_url``: literal scheme, host, port and path prefix; ``headers`` come before a request's own (which
    override them) and may use ``{{ env.NAME }}``; ``timeout`` (seconds) is a request's unless it sets its own.
    """

    base_url: str
    headers: dict[str, str] = Field(default_factory=dict)
    timeout: float | None = Field(default=None, gt=0, le=3600)
    rate_limit: RateLimit | None = None
    circuit_breaker: CircuitBreaker | None = None


class SmtpSpec(_Strict):
    """``[smtp]`` of a workflow (R-K2): where ``email`` actions are sent from.

    ``host`` goes through the outbound guard; ``starttls`` upgrades a plain connection, ``tls`` is implicit TLS;
    ``username``/``password`` may use ``{{ env.NAME }}`` (read when a message is sent) and need ``starttls`` or
    ``tls`` unless the host is a loopback address; ``timeout`` is seconds for the whole exchange.
    """

    host: str = Field(min_length=1)
    port: int = Field(default=25, ge=1, le=65535)
    starttls: bool = False
    tls: bool = False
    username: str | None = None
    password: str | None = None
    sender: str = Field(alias="from", min_length=3)
    timeout: float = Field(default=30.0, gt=0, le=3600)


class UpdateDataSpec(_Strict):
    """An ``update_data`` action (R-K4): set each key of ``fields`` in the run's ``data`` to its rendered value from
    ``values`` (a template; a whole-value template keeps its JSON type), or to ``null`` when ``values`` has none."""

    fields: list[str] = Field(min_length=1)
    values: dict[str, Any] = Field(default_factory=dict)


class EmailSpec(_Strict):
    """An ``email`` action's message (R-K2): ``to`` and ``cc`` addresses, a plain-text UTF-8 ``body`` template."""

    to: list[str] = Field(min_length=1)
    cc: list[str] = Field(default_factory=list)
    body: str


def _problem(key: str, msg: str, sms: dict[str, Any]) -> dict[str, Any]:
    """One error of an ``sms`` table, at ``sms.KEY`` (the field a user fixes, R-K5)."""
    return {"type": "value_error", "loc": ("sms", key), "msg": msg, "input": sms.get(key)}


def _at(key: str, msg: str) -> ShapeError:
    """A :class:`ShapeError` at ``KEY`` of the table being read."""
    return ShapeError([{"type": "value_error", "loc": (key,), "msg": msg, "input": None}])


def _action_sugar(value: Any) -> Any:
    """An ACTION written as ``{ sms = { connector, template_id, recipients, fields }, <attempt settings> }`` (R-K3)
    as the HTTP request it is: ``POST /sms`` through the connector with that JSON body."""
    if not isinstance(value, dict) or value.get("kind") not in (None, "http"):  # a stored request: as it is
        return value
    kinds = [k for k in ("sms", "email", "update_data") if value.get(k) is not None]
    if "method" in value or "url" in value:
        kinds.insert(0, "http (method, url)")
    if len(kinds) > 1:  # R-K5: an action is one of the kinds
        raise ValueError(f"an action is one kind: give one of http (method, url), sms, email and update_data, "
                         f"not {' and '.join(kinds)}")
    if value.get("update_data") is not None and "method" not in value:
        rest = {k: v for k, v in value.items() if k != "update_data"}
        return {**rest, "kind": "update_data", "method": "POST", "url": "", "update_data": value["update_data"]}
    if value.get("email") is not None and "method" not in value:
        rest = {k: v for k, v in value.items() if k != "email"}
        return {**rest, "kind": "email", "method": "POST", "url": "", "email": value["email"]}
    if "sms" not in value:
        return value
    sms = value["sms"]
    if not isinstance(sms, dict):
        raise _at("sms", "must be a table: { connector = …, template_id = …, recipients = […], fields = {…} }")
    problems = [{"type": "extra_forbidden", "loc": ("sms", k), "msg": "unknown key (connector, template_id, "
                 "recipients, fields)", "input": sms[k]}
                for k in sms if k not in ("connector", "template_id", "recipients", "fields")]
    if not isinstance(sms.get("connector"), str) or not sms.get("connector"):
        problems.append(_problem("connector", 'is required: "NAME", a [connectors.NAME] of the workflow', sms))
    if not isinstance(sms.get("template_id"), str) or not sms.get("template_id"):
        problems.append(_problem("template_id", "is required: a string", sms))
    if not isinstance(sms.get("recipients"), list) or not all(isinstance(r, str) for r in sms["recipients"]):
        problems.append(_problem("recipients", 'is required: ["+15550100", …] (strings)', sms))
    if not isinstance(sms.get("fields", {}), dict):
        problems.append(_problem("fields", "must be a table", sms))
    if problems:
        raise ShapeError(problems)
    rest = {k: v for k, v in value.items() if k != "sms"}
    return {**rest, "kind": "sms", "method": "POST", "url": "/sms", "connector": sms["connector"],
            "body": {"template_id": sms["template_id"], "recipients": sms["recipients"],
                     "fields": sms.get("fields", {})}}


class HttpRequestSpec(_Strict):
    """One HTTP request as written (R-H1, R-H6): templates are filled at send time.

    ``url``: scheme, host and port literal (R-H3), or, with ``connector``, a path relative to the connector's
    ``base_url`` (R-K1); a ``url`` that is one whole template is a URL reference resolved against the
    original request's origin (R-K6). ``headers``: values may use ``{{ env.NAME }}`` (R-H5); ``body``: a
    table is sent as JSON, a string as text. ``kind``: ``sms`` when written as an ``sms`` action (R-K3).
    """

    kind: Literal["http", "sms", "email", "update_data"] = "http"
    method: HttpMethod
    url: str
    headers: dict[str, str] = Field(default_factory=dict)
    body: dict[str, Any] | str | None = None
    connector: str | None = None
    email: EmailSpec | None = None  # ``kind = "email"``: the message, sent through the workflow's [smtp] (R-K2)
    update_data: UpdateDataSpec | None = None  # ``kind = "update_data"``: a write to the run's data (R-K4)

    @classmethod
    def _before(cls, value: Any) -> Any:
        return _action_sugar(value)


class HttpAction(HttpRequestSpec):
    """An ``http`` node's reverse action, its ``compensation`` table (R-H6, R-C7).

    ``timeout`` is seconds per attempt (the whole exchange); at most ``max_retries + 1`` attempts with
    ``backoff`` seconds before the second, doubling, capped at 60 s. ``idempotent``: an attempt whose outcome
    is unknown may be re-sent (with the same Idempotency-Key).
    """

    timeout: float = Field(default=30.0, gt=0, le=3600)
    idempotent: bool = False
    max_retries: int = Field(default=3, ge=0, le=100)
    backoff: float = Field(default=1.0, ge=0, le=3600)


class CompensationSpec(_Strict):
    """An App's compensation: a script ``entry`` or an ``http`` reverse action, exactly one (R-A4, R-C7, R-C8, R-H6).

    ``timeout`` is seconds per attempt; at most ``max_retries + 1`` attempts,
    ``backoff`` seconds before the second, doubling, capped at 60 s.
    """

    entry: str | None = None
    http: HttpRequestSpec | None = None
    idempotent: bool = False

    @classmethod
    def _before(cls, value: Any) -> Any:
        """Every ACTION of SPEC §19 is a reverse action, kept as ``http``: ``compensation = { sms = {…} }`` is
        ``POST /sms`` through its connector (R-K3), ``email = {…}`` a message (R-K2), ``update_data = {…}`` a write
        to the run's data (R-K4), and ``{ method, url, headers, body, connector }`` written in place a request
        (R-K1); the attempt settings stay beside it."""
        if not isinstance(value, dict):
            return value
        written = value.get("http")
        if isinstance(written, dict) and written.get("kind") in (None, "http"):  # as written, not as stored
            for kind in ("sms", "email", "update_data"):
                if written.get(kind) is not None:  # the App schema's form (R-L4): one ACTION kind, not nested
                    raise ShapeError([{"type": "value_error", "loc": ("http", kind), "input": None,
                                       "msg": f"an {kind} action is written beside the attempt settings: "
                                              f"compensation = {{ {kind} = {{…}} }}, not inside http"}])
        if written is not None:
            return value
        for kind in ("sms", "email", "update_data"):
            if value.get(kind) is not None:
                rest = {k: v for k, v in value.items() if k != kind}
                return {**rest, "http": {kind: value[kind]}}
        request = {k: value[k] for k in ("method", "url", "headers", "body", "connector") if k in value}
        if "method" in request or "url" in request:
            return {**{k: v for k, v in value.items() if k not in request}, "http": request}
        return value
    timeout: float = Field(default=120.0, gt=0, le=86400)
    max_retries: int = Field(default=3, ge=0, le=100)
    backoff: float = Field(default=1.0, ge=0, le=3600)
    code: Literal["live", "snapshot"] = "live"

    def _after(self) -> None:
        if (self.entry is None) == (self.http is None):
            raise ValueError("give exactly one of entry (a script) and http (a reverse action)")


class ToolPolicy(_Strict):
    """Per-tool settings of a Tool App (issue 5): ``confirm`` before a normal call."""

    confirm: Literal["always", "never"] = "never"


class AppSpec(_Strict):
    """One App of a project: ``[tool.workrun.apps.NAME]`` (R-A1..R-A5).

    ``timeout`` is seconds per call. ``idempotent`` lets a call whose outcome is
    unknown after a crash be re-sent (R-R3).
    """

    name: str
    kind: Literal["process", "tool"] = "process"
    entry: str
    timeout: float = Field(default=600.0, gt=0, le=86400)
    idempotent: bool = False
    compensation: CompensationSpec | None = None
    output: dict[str, OutputField] = Field(default_factory=dict)
    tools: dict[str, ToolPolicy] = Field(default_factory=dict)
    description: str = ""
    warm: bool = False  # R-P2: a Tool App's module is imported once in its fork server

    def _after(self) -> None:
        if self.warm and self.kind != "tool":
            raise ValueError("warm = true applies to Tool Apps only (kind = \"tool\")")


class RetryPolicy(_Strict):
    """``on_failure = { retry = { attempts, backoff } }`` (R-W7): attempts in all, backoff seconds."""

    attempts: int = Field(default=3, ge=1, le=100)
    backoff: float = Field(default=0.5, ge=0, le=3600)


_POLICY_HELP = ('must be "fail", "continue", "notify", "terminate", { retry = { attempts, backoff }, then = '
                '"fail" | "notify" }, { fallback = "NODE" }, { compensate = ACTION } or { fallback_action = ACTION }')


class FailurePolicy(_Strict):
    """A node's ``on_failure`` (R-W7, R-M1..R-M5), parsed once when the workflow is loaded.

    Written as ``"fail"``, ``"continue"``, ``"notify"``, ``"terminate"``, ``{ retry = { attempts,
    backoff }, then = "fail" | "notify" }``, ``{ fallback = "NODE" }``, ``{ compensate = ACTION }`` or
    ``{ fallback_action = ACTION }`` (ACTION: an :class:`HttpAction` table); kept (and journaled) in
    that written form. ``then`` is what a spent retry budget leads to (R-M2).
    """

    kind: Literal["fail", "continue", "retry", "fallback", "notify", "compensate", "fallback_action",
                  "terminate"] = "fail"
    retry: RetryPolicy | None = None
    fallback: str | None = None
    then: Literal["fail", "notify"] = "fail"
    action: HttpAction | None = None

    def attempts(self) -> int:
        """Calls allowed for the node in all (1 unless ``retry``)."""
        return self.retry.attempts if self.retry else 1

    @property
    def exhausted(self) -> str:
        """What a failure not absorbed otherwise leads to: ``fail``, ``notify``, ``compensate``,
        ``fallback_action`` or ``terminate`` (a spent retry budget leads to ``then``)."""
        if self.kind == "retry":
            return self.then
        return self.kind if self.kind in ("notify", "compensate", "fallback_action", "terminate") else "fail"

    @property
    def opens_ticket(self) -> bool:
        """True when an unabsorbed failure opens a ticket (R-M1..R-M5)."""
        return self.exhausted != "fail"

    @classmethod
    def parse(cls, value: Any) -> FailurePolicy:
        """Parse the written form.

        Raises:
            PolicyError: naming the sub-field (``""``, ``"retry"``, ``"then"``, ``"compensate"`` …) and what
                is wrong.
            ShapeError: the retry or action table has a bad key or value.
        """
        if isinstance(value, FailurePolicy):
            return value
        if value in ("fail", "continue", "notify", "terminate"):
            return cls(kind=value)
        if isinstance(value, dict) and value:
            keys = set(value)
            if "retry" in keys and keys <= {"retry", "then"}:
                arg = value["retry"]
                if not isinstance(arg, dict):
                    raise PolicyError("retry", "must be a table: { retry = { attempts = 3, backoff = 0.5 } }")
                then = value.get("then", "fail")
                if then not in ("fail", "notify"):
                    raise PolicyError("then", 'must be "fail" or "notify"')
                return cls(kind="retry", retry=RetryPolicy.model_validate(arg), then=then)
            if len(value) == 1:
                ((kind, arg),) = value.items()
                if kind == "fallback" and isinstance(arg, str):
                    return cls(kind="fallback", fallback=arg)
                if kind in ("compensate", "fallback_action"):
                    if not isinstance(arg, dict):
                        raise PolicyError(kind, 'must be a table: { method = "POST", url = "http://…" }')
                    return cls(kind=kind, action=HttpAction.model_validate(arg))
            if "then" in keys and "retry" not in keys:
                raise PolicyError("then", "then = … goes with retry = { … }")
            unknown = sorted(keys - {"retry", "then", "fallback", "compensate", "fallback_action"})
            if unknown:
                hint = typo_hints(unknown[:1], [k for k in ("retry", "then", "fallback", "compensate",
                                                            "fallback_action") if k not in keys])
                raise PolicyError(unknown[0], f"unknown key (did you mean {hint[unknown[0]]!r}?)" if hint
                                  else "unknown key; " + _POLICY_HELP)
        raise PolicyError("", _POLICY_HELP)

    def written(self) -> Any:
        """The form a user writes (and the journal keeps)."""
        if self.kind == "retry" and self.retry is not None:
            return {"retry": self.retry.model_dump(), **({"then": self.then} if self.then != "fail" else {})}
        if self.kind == "fallback":
            return {"fallback": self.fallback}
        if self.kind in ("compensate", "fallback_action") and self.action is not None:
            return {self.kind: self.action.model_dump()}
        return self.kind


class PolicyError(ValueError):
    """Raised when ``on_failure`` is not one of its written forms; ``where`` is the sub-field (or "")."""

    def __init__(self, where: str, message: str) -> None:
        self.where = where
        self.message = message
        super().__init__(message)


class ToolRef(_Strict):
    """One Tool App an agent node may call."""

    project: str
    app: str


def _unique(value: list[str]) -> list[str]:
    if len(set(value)) != len(value):
        raise ValueError("lists a node twice")
    return value


def _policy(value: Any) -> Any:
    return FailurePolicy.parse(value) if not isinstance(value, dict) or "kind" not in value else value


def _written(policy: FailurePolicy) -> Any:
    return policy.written()


class _Node(_Strict):
    """What every node has (SPEC §9). Paths are made absolute when the workflow is loaded."""

    key: str
    needs: list[str] = Field(default_factory=list, after=_unique)
    on_failure: FailurePolicy = Field(default_factory=FailurePolicy, before=_policy, dump=_written)

    def templated(self) -> dict[str, Any]:
        """The fields that may hold ``{{ ... }}`` templates, by name."""
        return {}


class ProcessNode(_Node):
    """``kind = "process"``: one App call (with the node's failure policy)."""

    kind: Literal["process"] = "process"
    project: str | None = None
    app: str | None = None
    input: dict[str, Any] = Field(default_factory=dict)

    def templated(self) -> dict[str, Any]:
        """``input``."""
        return {"input": self.input}


class AgentNode(_Node):
    """``kind = "agent"``: a tool-calling loop over Tool Apps; each tool call is an operation (R-C5)."""

    kind: Literal["agent"]
    input: dict[str, Any] = Field(default_factory=dict)
    tools: list[ToolRef] = Field(default_factory=list)
    prompt: str = ""
    model: str = "scripted"
    script: list[dict[str, Any]] = Field(default_factory=list)
    answer: str | None = None
    fail_answer: bool = False
    max_steps: int = Field(default=50, ge=1, le=10000)
    base_url: str | None = None
    timeout: float = Field(default=300.0, gt=0, le=86400)

    def templated(self) -> dict[str, Any]:
        """``input``, ``prompt`` and ``script``."""
        return {"input": self.input, "prompt": self.prompt, "script": self.script}


class RemoteAgentNode(_Node):
    """``kind = "remote_agent"``: one message to an A2A agent, its task followed (R-C10)."""

    kind: Literal["remote_agent"]
    url: str | None = None
    message: str = ""
    timeout: float = Field(default=300.0, gt=0, le=86400)

    def templated(self) -> dict[str, Any]:
        """``message``."""
        return {"message": self.message}


class HttpNode(_Node):
    """``kind = "http"``: one HTTP request per operation (R-H1, R-H2), optionally with a reverse action (R-H6).

    ``timeout`` is seconds for the whole exchange; ``idempotent`` lets an unknown outcome be re-sent with the
    same Idempotency-Key. Typed strictly: a string where a number or boolean belongs is refused (SPEC §17).
    """

    kind: Literal["http"]
    method: HttpMethod
    url: str
    headers: dict[str, str] = Field(default_factory=dict)
    body: dict[str, Any] | str | None = None
    timeout: float = Field(default=30.0, gt=0, le=3600)
    idempotent: bool = False
    compensation: HttpAction | None = None
    connector: str | None = None  # R-K1: ``url`` is relative to its base_url

    def templated(self) -> dict[str, Any]:
        """``url``, ``headers`` (without their ``{{ env.NAME }}`` secrets, R-H5) and ``body``."""
        return {"url": self.url, "headers": {k: _ENV_TEMPLATE.sub("", v) for k, v in self.headers.items()},
                "body": self.body}


_ENV_TEMPLATE = re.compile(r"\{\{\s*env\.[A-Za-z_][A-Za-z0-9_]*\s*\}\}")

#: node spec class per ``kind``; a new kind adds its class here and to :data:`NodeSpec`
NODE_MODELS: dict[str, type[_Node]] = {"process": ProcessNode, "agent": AgentNode, "remote_agent": RemoteAgentNode,
                                      "http": HttpNode}


NodeSpec = ProcessNode | AgentNode | RemoteAgentNode | HttpNode
"""One node of a workflow: a union told apart by ``kind`` (default ``process``)."""


class WorkflowSpec(_Strict):
    """A parsed workflow file: ``name``, input defaults and nodes by key (R-W1)."""

    name: str
    path: str
    inputs: dict[str, Any] = Field(default_factory=dict)
    nodes: dict[str, NodeSpec]
    http_allow: list[str] = Field(default_factory=list)
    notify: HttpAction | None = None  # ``[notify] http = {...}``: one message per ticket / dead letter (R-M8)
    connectors: dict[str, ConnectorSpec] = Field(default_factory=dict)  # ``[connectors.NAME]`` (R-K1)
    smtp: SmtpSpec | None = None  # ``[smtp]``: where email actions are sent from (R-K2)
    # set on a run's copy only, never from a file (R-V1, R-V3): fail the run right after this node succeeds
    fail_after: str | None = None
    verify: bool = False  # a run of ``workrun verify`` (left out of ``runs list`` unless --all)
