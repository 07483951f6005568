"""Pydantic models of what users write: App configs (``[tool.workrun.apps.NAME]``) and workflows.

Journal rows are plain dicts (see ``journal/sqlite.py``); these models describe
*input* that must be validated before anything runs (R-I2).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, field_serializer, field_validator

__all__ = [
    "NODE_MODELS",
    "AgentNode",
    "AppSpec",
    "CompensationSpec",
    "FailurePolicy",
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


class FailurePolicy(_Strict):
    """A node's ``on_failure`` (R-W7), parsed once when the workflow is loaded.

    Written as ``"fail"``, ``"continue"``, ``{ retry = { attempts, backoff } }`` or
    ``{ fallback = "NODE" }``; kept (and journaled) in that written form.
    """

    kind: Literal["fail", "continue", "retry", "fallback"] = "fail"
    retry: RetryPolicy | None = None
    fallback: str | None = None

    def attempts(self) -> int:
        """Calls allowed for the node in all (1 unless ``retry``)."""
        return self.retry.attempts if self.retry else 1

    @classmethod
    def parse(cls, value: Any) -> FailurePolicy:
        """Parse the written form.

        Raises:
            PolicyError: naming the sub-field (``""`` or ``"retry"``) and what is wrong.
        """
        if isinstance(value, FailurePolicy):
            return value
        if value in ("fail", "continue"):
            return cls(kind=value)
        if isinstance(value, dict) and len(value) == 1:
            ((kind, arg),) = value.items()
            if kind == "retry":
                if not isinstance(arg, dict):
                    raise PolicyError("retry", "must be a table: { retry = { attempts = 3, backoff = 0.5 } }")
                return cls(kind="retry", retry=RetryPolicy.model_validate(arg))
            if kind == "fallback" and isinstance(arg, str):
                return cls(kind="fallback", fallback=arg)
        raise PolicyError("", 'must be "fail", "continue", { retry = { attempts, backoff } } or { fallback = "NODE" }')

    def written(self) -> Any:
        """The form a user writes (and the journal keeps)."""
        if self.kind == "retry" and self.retry is not None:
            return {"retry": self.retry.model_dump()}
        if self.kind == "fallback":
            return {"fallback": self.fallback}
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


class _Node(_Strict):
    """What every node has (SPEC §9). Paths are made absolute when the workflow is loaded."""

    key: str
    needs: list[str] = Field(default_factory=list)
    on_failure: FailurePolicy = Field(default_factory=FailurePolicy)

    @field_validator("needs")
    @classmethod
    def _unique(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError("lists a node twice")
        return value

    @field_validator("on_failure", mode="before")
    @classmethod
    def _policy(cls, value: Any) -> Any:
        return FailurePolicy.parse(value) if not isinstance(value, dict) or "kind" not in value else value

    @field_serializer("on_failure")
    def _written(self, policy: FailurePolicy) -> Any:
        return policy.written()

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


#: node spec class per ``kind``; a new kind adds its class here and to :data:`NodeSpec`
NODE_MODELS: dict[str, type[_Node]] = {"process": ProcessNode, "agent": AgentNode, "remote_agent": RemoteAgentNode}


def _node_kind(value: Any) -> str:
    if isinstance(value, dict):
        return str(value.get("kind", "process"))
    return str(getattr(value, "kind", "process"))


NodeSpec = Annotated[
    Annotated[ProcessNode, Tag("process")] | Annotated[AgentNode, Tag("agent")]
    | Annotated[RemoteAgentNode, Tag("remote_agent")],
    Discriminator(_node_kind),
]
"""One node of a workflow: a union discriminated by ``kind`` (default ``process``)."""


class WorkflowSpec(_Strict):
    """A parsed workflow file: ``name``, input defaults and nodes by key (R-W1)."""

    name: str
    path: str
    inputs: dict[str, Any] = Field(default_factory=dict)
    nodes: dict[str, NodeSpec]
