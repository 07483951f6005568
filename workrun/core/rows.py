"""Typed rows: what crosses the journal boundary (issue 27), one :class:`~typing.TypedDict` per table.

Every read of a :class:`~workrun.journal.base.Journal` role returns these: the columns of its table, JSON
columns already decoded (typed ``Any``: they hold what the workflow file or the App gave), and each
status as a ``Literal`` of the statuses :mod:`workrun.core.states` allows there, so mypy (with
``strict_equality``) refuses a comparison with a status that does not exist. They are plain dicts at run
time: reading a row costs nothing more (SPEC §24), and ``--json`` prints them as before.

Rows are ``total=False``: a read model may select some columns only (``node_states``,
``operation_statuses``); reads of whole rows return every column.
"""

from __future__ import annotations

from typing import Any, Literal

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import TypedDict as _Row
else:
    class _Row(dict):  # type: ignore[type-arg]
        """At run time a row class is only a name (for ``cast`` and the docs): building 18 real TypedDicts
        compiles each of their ~200 annotations, ~4 ms of every command's start-up (issue 33). mypy sees
        TypedDicts."""

        def __init_subclass__(cls, total: bool = True) -> None:
            super().__init_subclass__()

        def __new__(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:  # type: ignore[misc]
            return dict(*args, **kwargs)  # as a TypedDict's call: a plain dict

__all__ = ["AppCallRow", "AttemptRow", "AttemptStatus", "CompensationRow", "CompensationStatus", "DispatchedCallRow",
           "EventRow", "JsonObject", "MessageRow", "NodeRow", "NodeStatus", "NotificationRow", "NotificationStatus",
           "OperationRow", "OperationStatus", "RemoteTaskRow", "RunClaimRow", "RunRow", "RunStatus",
           "TicketActionRow", "TicketActionStatus", "TicketAttemptRow", "TicketAttemptStatus", "TicketEventRow",
           "TicketRow", "TicketStatus", "WorkerRow"]

#: a JSON document kept in one column (a call handed to workers, its outcome, a snapshot manifest, an App's
#: resources): not a row, so not typed by column
JsonObject = dict[str, Any]

RunStatus = Literal["running", "succeeded", "failed", "stopped", "waiting", "terminated"]
NodeStatus = Literal["pending", "running", "succeeded", "failed", "stopped", "skipped", "waiting"]
OperationStatus = Literal["starting", "running", "succeeded", "failed", "unknown"]
CompensationStatus = Literal["pending", "running", "succeeded", "failed", "blocked", "unknown", "skipped"]
AttemptStatus = Literal["starting", "running", "succeeded", "failed", "stopped", "unknown", "not_started"]
TicketStatus = Literal["pending", "resolved", "terminated"]
TicketActionStatus = Literal["pending", "running", "succeeded", "failed", "unknown"]
TicketAttemptStatus = Literal["starting", "sending", "succeeded", "failed", "unknown", "not_started"]
NotificationStatus = Literal["pending", "sending", "sent", "failed", "unknown"]


class RunRow(_Row, total=False):
    """A row of ``runs``."""

    run_id: str
    workflow: str
    workflow_path: str
    spec: Any
    inputs: Any
    status: RunStatus
    eval: int
    rerun_of: str | None
    reason: str | None
    stop_requested: int
    compensate_requested: int
    created_at: float
    ended_at: float | None
    verify: int
    data: Any


class NodeRow(_Row, total=False):
    """A row of ``nodes``."""

    run_id: str
    node_key: str
    position: int
    status: NodeStatus
    handled: int
    result: Any
    started_at: float | None
    ended_at: float | None


class OperationRow(_Row, total=False):
    """A row of ``operations``."""

    operation_id: str
    run_id: str | None
    node_key: str | None
    tool_call_index: int | None
    app: str
    project: str
    kind: str
    tool_name: str | None
    config: Any
    input: Any
    result: Any
    resources: Any
    fingerprint: str
    fingerprint_files: Any
    snapshot: str | None
    depends_on: Any
    status: OperationStatus
    error: str | None
    call_dir: str
    pid: int | None
    proc_start: str | None
    deadline: float | None
    created_at: float
    started_at: float | None
    ended_at: float | None
    exit_code: int | None
    signal: int | None
    stdout_tail: str | None
    stderr_tail: str | None
    standalone: int
    failure: str | None
    owner_pid: int | None
    owner_start: str | None


class CompensationRow(_Row, total=False):
    """A row of ``compensations``."""

    compensation_id: str
    operation_id: str
    run_id: str
    node_key: str | None
    status: CompensationStatus
    reason: str | None
    result: Any
    context: Any
    max_attempts: int
    timeout: float
    backoff: float
    idempotent: int
    accept_code_change: int
    held_back_by: Any
    next_attempt_at: float | None
    created_at: float
    updated_at: float


class AttemptRow(_Row, total=False):
    """A row of ``attempts``."""

    compensation_id: str
    number: int
    trigger: str
    status: AttemptStatus
    call_dir: str
    pid: int | None
    proc_start: str | None
    deadline: float | None
    started_at: float
    ended_at: float | None
    exit_code: int | None
    signal: int | None
    stdout_tail: str | None
    stderr_tail: str | None
    result: Any
    error: str | None
    failure: str | None
    http_status: int | None
    response_tail: str | None
    smtp_code: int | None


class TicketRow(_Row, total=False):
    """A row of ``tickets``."""

    ticket_id: str
    run_id: str
    node_key: str
    policy: str
    status: TicketStatus
    error: str | None
    result: Any
    created_at: float
    updated_at: float


class TicketActionRow(_Row, total=False):
    """A row of ``ticket_actions``."""

    ticket_id: str
    run_id: str
    status: TicketActionStatus
    request: Any
    result: Any
    reason: str | None
    max_attempts: int
    timeout: float
    backoff: float
    idempotent: int
    next_attempt_at: float | None
    created_at: float
    updated_at: float


class TicketAttemptRow(_Row, total=False):
    """A row of ``ticket_attempts``."""

    ticket_id: str
    number: int
    trigger: str
    status: TicketAttemptStatus
    started_at: float
    ended_at: float | None
    http_status: int | None
    response_tail: str | None
    failure: str | None
    error: str | None
    smtp_code: int | None


class _AuditEvent(_Row, total=False):
    """What an audit event of a compensation or a ticket holds: who did what, when, why (R-O2, R-M6)."""

    id: int
    at: float
    actor: str
    action: str
    args: Any
    text: str | None
    attachment: str | None


class TicketEventRow(_AuditEvent, total=False):
    """A row of ``ticket_events``."""

    ticket_id: str
    run_id: str


class NotificationRow(_Row, total=False):
    """A row of ``notifications``."""

    notification_id: str
    subject: str
    run_id: str
    ticket_id: str | None
    compensation_id: str | None
    message: str
    request: Any
    status: NotificationStatus
    http_status: int | None
    error: str | None
    created_at: float
    updated_at: float


class EventRow(_AuditEvent, total=False):
    """A row of ``events`` (a compensation's)."""

    compensation_id: str | None
    run_id: str | None


class MessageRow(_Row, total=False):
    """A row of ``messages``."""

    id: int
    run_id: str
    node_key: str | None
    at: float
    level: str
    text: str


class RemoteTaskRow(_Row, total=False):
    """A row of ``remote_tasks``."""

    run_id: str
    node_key: str
    url: str
    task_id: str | None
    context_id: str | None
    state: str | None
    cancel_status: str | None
    cancel_answer: str | None
    cancel_at: float | None
    updated_at: float


class RunClaimRow(_Row, total=False):
    """A row of ``run_claims``; ``run_claim`` adds the holder's ``host`` and ``pid`` (from ``workers``) and
    ``claim_run`` adds ``previous_worker``, ``previous_host`` and ``takeover`` (True when it took the run over)."""

    run_id: str
    worker_id: str
    lease_until: float
    claimed_at: float
    takeovers: int
    epoch: int
    host: str | None
    pid: int | None
    previous_worker: str | None
    previous_host: str | None
    takeover: bool


class DispatchedCallRow(_Row, total=False):
    """A row of ``dispatched_calls``. ``worker_id``, ``host``, ``lease_until`` and ``exec_dir`` are NULL while
    the call is queued and set by its claim; the scheduler reads them from claimed rows only."""

    call_id: str
    run_id: str | None
    status: str
    call: Any
    timeout: float | None
    queued_at: float
    claims: int
    worker_id: str
    host: str
    lease_until: float
    claimed_at: float | None
    exec_dir: str
    pid: int | None
    proc_start: str | None
    deadline: float | None
    stop_requested: int
    outcome: Any
    collected: Any
    decided_by: str | None
    done_at: float | None


class WorkerRow(_Row, total=False):
    """A row of ``workers``."""

    worker_id: str
    host: str
    pid: int
    lease: float
    started_at: float
    heartbeat_at: float
    stopped_at: float | None


class AppCallRow(_Row, total=False):
    """``latest_app_calls``: each App's newest call (its project, name, kind, config and fingerprint) and how many
    calls it had."""

    project: str
    app: str
    kind: str
    config: Any
    fingerprint: str
    fingerprint_files: Any
    created_at: float
    calls: int

