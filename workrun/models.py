"""Pydantic models of what users write: App configs (``[tool.workrun.apps.NAME]``) and workflows.

Journal rows are plain dicts (see ``journal/sqlite.py``); these models describe
*input* that must be validated before anything runs (R-I2).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = [
    "AppSpec",
    "CompensationSpec",
    "NodeSpec",
    "OutputField",
    "RetryPolicy",
    "TicketActionSpec",
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


class CompensationSpec(_Strict):
    """An App's compensation entry (R-A4, R-C7, R-C8).

    ``timeout`` is seconds per attempt; at most ``max_retries + 1`` attempts,
    ``backoff`` seconds before the second, doubling, capped at 60 s.
    """

    entry: str
    idempotent: bool = False
    timeout: float = Field(default=120.0, gt=0, le=86400)
    max_retries: int = Field(default=3, ge=0, le=100)
    backoff: float = Field(default=1.0, ge=0, le=3600)
    code: Literal["live", "snapshot"] = "live"


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


class TicketActionSpec(BaseModel):
    """An HTTP action of manual repair: ``on_failure = { compensate = ACTION }`` or
    ``{ fallback_action = ACTION }`` (R-M3, R-M4), and ``[notify] http`` (R-M8).

    ``timeout`` is seconds for the whole exchange; at most ``max_retries + 1`` attempts,
    ``backoff`` seconds before the second, doubling, capped at 60 s (as R-H6). Types are
    taken as TOML types them (SPEC §17: a string is never a number).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    method: Literal["GET", "POST", "PUT", "PATCH", "DELETE"] = "POST"
    url: str
    headers: dict[str, str] = Field(default_factory=dict)
    body: dict[str, Any] | list[Any] | str | None = None
    timeout: float = Field(default=30.0, gt=0, le=3600)
    max_retries: int = Field(default=3, ge=0, le=100)
    backoff: float = Field(default=1.0, ge=0, le=3600)
    idempotent: bool = False


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


class WorkflowSpec(_Strict):
    """A parsed workflow file: ``name``, input defaults and nodes by key (R-W1)."""

    name: str
    path: str
    inputs: dict[str, Any] = Field(default_factory=dict)
    nodes: dict[str, NodeSpec]
    notify: TicketActionSpec | None = None  # ``[notify] http = {...}``: one message per ticket / dead letter (R-M8)
