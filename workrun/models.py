"""Pydantic models of what users write: App configs (``[tool.workrun.apps.NAME]``) and workflows.

Journal rows are plain dicts (see ``journal/sqlite.py``); these models describe
*input* that must be validated before anything runs (R-I2).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = [
    "AppSpec",
    "CompensationSpec",
    "HttpAction",
    "HttpNode",
    "HttpRequestSpec",
    "NodeSpec",
    "OutputField",
    "RetryPolicy",
    "ToolPolicy",
    "ToolRef",
    "WorkflowSpec",
]

FieldType = Literal["string", "integer", "number", "boolean", "object", "array"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class OutputField(_Strict):
    """One field of an App's output contract (R-A3)."""

    type: FieldType
    required: bool = False


HttpMethod = Literal["GET", "POST", "PUT", "PATCH", "DELETE"]


class HttpRequestSpec(_Strict):
    """One HTTP request as written (R-H1, R-H6): templates are filled at send time.

    ``url``: scheme, host and port literal (R-H3); ``headers``: values may use ``{{ env.NAME }}`` (R-H5);
    ``body``: a table is sent as JSON, a string as text.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    method: HttpMethod
    url: str
    headers: dict[str, str] = Field(default_factory=dict)
    body: dict[str, Any] | str | None = None


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
    timeout: float = Field(default=120.0, gt=0, le=86400)
    max_retries: int = Field(default=3, ge=0, le=100)
    backoff: float = Field(default=1.0, ge=0, le=3600)
    code: Literal["live", "snapshot"] = "live"

    @model_validator(mode="after")
    def _one_kind(self) -> CompensationSpec:
        if (self.entry is None) == (self.http is None):
            raise ValueError("give exactly one of entry (a script) and http (a reverse action)")
        return self


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


class RetryPolicy(_Strict):
    """``on_failure = { retry = { attempts, backoff } }`` (R-W7): attempts in all, backoff seconds."""

    attempts: int = Field(default=3, ge=1, le=100)
    backoff: float = Field(default=0.5, ge=0, le=3600)


class ToolRef(_Strict):
    """One Tool App an agent node may call."""

    project: str
    app: str


class NodeSpec(_Strict):
    """One node of a workflow (SPEC §9). Paths are made absolute when the workflow is loaded."""

    key: str
    kind: Literal["process", "agent", "remote_agent"] = "process"
    project: str | None = None
    app: str | None = None
    input: dict[str, Any] = Field(default_factory=dict)
    needs: list[str] = Field(default_factory=list)
    on_failure: Any = "fail"
    # agent
    tools: list[ToolRef] = Field(default_factory=list)
    prompt: str = ""
    model: str = "scripted"
    script: list[dict[str, Any]] = Field(default_factory=list)
    answer: str | None = None
    fail_answer: bool = False
    max_steps: int = Field(default=50, ge=1, le=10000)
    base_url: str | None = None
    # remote_agent
    url: str | None = None
    message: str = ""
    timeout: float = Field(default=300.0, gt=0, le=86400)

    @field_validator("needs")
    @classmethod
    def _unique(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError("lists a node twice")
        return value


class HttpNode(_Strict):
    """A ``kind = "http"`` node: one HTTP request per operation (R-H1, R-H2), optionally with a reverse action.

    ``timeout`` is seconds for the whole exchange; ``idempotent`` lets an unknown outcome be re-sent with the
    same Idempotency-Key.
    """

    key: str
    kind: Literal["http"] = "http"
    needs: list[str] = Field(default_factory=list)
    on_failure: Any = "fail"
    method: HttpMethod
    url: str
    headers: dict[str, str] = Field(default_factory=dict)
    body: dict[str, Any] | str | None = None
    timeout: float = Field(default=30.0, gt=0, le=3600)
    idempotent: bool = False
    compensation: HttpAction | None = None

    @field_validator("needs")
    @classmethod
    def _unique(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError("lists a node twice")
        return value


class WorkflowSpec(_Strict):
    """A parsed workflow file: ``name``, input defaults and nodes by key (R-W1)."""

    name: str
    path: str
    inputs: dict[str, Any] = Field(default_factory=dict)
    nodes: dict[str, NodeSpec | HttpNode]
    http_allow: list[str] = Field(default_factory=list)
    notify: HttpAction | None = None  # ``[notify] http = {...}``: one message per ticket / dead letter (R-M8)
