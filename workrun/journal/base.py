"""The journal's contract: what the engine, recovery and operator actions ask of durable storage.

Two backends implement :class:`Journal` (``sqlite.py``; ``postgres.py``, which also implements
:class:`SharedJournal`), both dialects of the portable statements in ``portable.py``. Methods are named for
what they record, never for tables, and grouped in roles — :class:`RunRecords`, :class:`CallRecords`,
:class:`CompensationRecords`, :class:`TicketRecords`, :class:`RemoteTaskRecords`, :class:`Listings`, and for
a shared journal :class:`RunClaims`, :class:`CallClaims`, :class:`SnapshotStore` — so that a module types
what it uses by the roles it needs (``snapshots`` takes a :class:`SnapshotStore`, the heartbeat a
:class:`RunClaims`).

Rules every backend keeps:

- Each write is one transaction, committed before the method returns (and so
  before any side effect it precedes, R-J1); after the commit the write's
  fault point (:data:`FAULT_POINTS`) is passed to :func:`workrun.core.faults.hit`.
- Every status change is checked with :func:`workrun.core.states.check` against the
  state machine, inside the transaction, before anything is written.
- Rows are plain ``dict``s keyed by column name; JSON columns come back decoded.
  Times are epoch seconds (``float``).
- Errors are storage errors only: :class:`~workrun.core.errors.JournalError` (cannot
  read/write), :class:`~workrun.core.errors.StaleStatusError` (a conditional write
  found another status), :class:`~workrun.core.errors.InvalidTransitionError` (a bug),
  :class:`~workrun.core.errors.NotFoundError` from lookups by id.

Column sets of the rows are those of ``workrun/journal/migrations.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

from workrun.core.fault_points import FAULT_POINTS
from workrun.core.rows import (
    AppCallRow,
    AttemptRow,
    CompensationRow,
    DispatchedCallRow,
    EventRow,
    JsonObject,
    MessageRow,
    NodeRow,
    NotificationRow,
    OperationRow,
    RemoteTaskRow,
    RunClaimRow,
    RunRow,
    TicketActionRow,
    TicketAttemptRow,
    TicketEventRow,
    TicketRow,
)

__all__ = ["FAULT_POINTS", "CallClaims", "CallRecords", "CompensationRecords", "Journal", "Listings",
           "RemoteTaskRecords", "RunClaims", "RunRecords", "SharedJournal", "SnapshotStore", "TicketRecords"]


class RunRecords(Protocol):
    """Runs, their nodes and messages (R-W2, R-W3, R-C9): what the engine writes as a run goes, and reads back."""

    def create_run(self, run: RunRow, node_keys: Sequence[str]) -> None:
        """Record a new run (status ``running``) and its nodes (``pending``, in order) at once (R-W2).

        Args:
            run: ``{run_id, workflow, workflow_path, spec, inputs, status, eval, rerun_of, created_at}``.
            node_keys: the workflow's node keys in file order.

        Fault point: ``run.created``.
        """

    def request_stop(self, run_id: str) -> None:
        """Set the run's ``stop_requested`` flag (``workrun stop`` from another terminal, R-C9)."""

    def request_compensation(self, run_id: str, event: EventRow) -> None:
        """Set a stopped run's ``compensate_requested`` flag and record the operator's event, at once (R-C9, R-O2).

        Args:
            event: ``{run_id, at, actor, action, args}``.
        """

    def start_node(self, run_id: str, node_key: str, *, at: float) -> None:
        """Mark a pending node ``running`` (``started_at`` = ``at``, epoch seconds). Held for this process's next
        write (its first call's intent, its end, or a message): a node's start precedes nothing outside the
        journal, so batching it is the journal's business, not its callers'. Fault point ``node.running``, hit
        after the commit that carries it."""

    def finish_node(self, run_id: str, node_key: str, *, status: str, handled: bool, result: Any,
                    at: float) -> None:
        """Record a node's end: ``succeeded`` | ``failed`` | ``stopped``; ``handled`` when its policy absorbed a
        failure. A success this process already wrote with the node's last call's outcome
        (:meth:`CallRecords.finish_operation` with ``node_succeeded``) is not written twice. Fault point:
        ``node.finished``."""

    def end_run(self, run_id: str, status: str, *, at: float, reason: str | None = None,
                compensations: Sequence[CompensationRow] = ()) -> None:
        """End a run in one transaction (SPEC §10).

        Pending nodes become ``skipped``; for ``stopped`` also running nodes become ``stopped``;
        ``compensations`` (from :func:`workrun.compensation.records.plan_records`) are inserted with
        the run's ``failed`` status, so every succeeded call has its record before anything is undone.

        Args:
            status: ``succeeded`` | ``failed`` | ``stopped``.
            at: epoch seconds (``ended_at``).

        Fault point: ``run.<status>``.
        """

    def add_message(self, run_id: str, node_key: str | None, level: str, text: str) -> None:
        """Append a progress message to a node (or to the run when ``node_key`` is None)."""

    def run(self, run_id: str) -> RunRow:
        """One run by exact id or unique prefix.

        Raises:
            NotFoundError: no run, or the prefix matches several.
        """

    def runs(self, limit: int | None = None) -> list[RunRow]:
        """All runs, newest first (at most ``limit``)."""

    def runs_with_status(self, *statuses: str) -> list[RunRow]:
        """Runs whose status is one of ``statuses``, oldest first."""

    def nodes(self, run_id: str, keys: Sequence[str] | None = None) -> list[NodeRow]:
        """The run's nodes in workflow order (only those named in ``keys`` when given)."""

    def node_states(self, run_id: str) -> list[NodeRow]:
        """``{node_key, status, handled}`` of the run's nodes in workflow order: the scheduler's cheap look
        (no result to decode, issue 14)."""

    def stop_requested(self, run_id: str) -> bool:
        """True when ``workrun stop`` flagged the run (R-C9; exact id, False for an unknown one)."""

    def change_token(self) -> object | None:
        """A value that changes whenever another connection (another process) commits to the journal, and only
        then: this connection's own writes leave it as it was. None when the backend cannot tell (the caller
        then reads afresh every time). The scheduler reads only the rows its own threads changed while the
        token holds (issue 14)."""

    def messages(self, run_id: str) -> list[MessageRow]:
        """All messages of a run, oldest first."""


class CallRecords(Protocol):
    """Operations, one per App call or HTTP request (R-J1, R-R3): intent before the call, outcome after it."""

    def start_operation(self, row: OperationRow) -> None:
        """Record a call's intent (status ``starting``) before its process exists (R-J1); a held node start
        (:meth:`start_node`) goes in with it, one write fewer per node (issue 14).

        Args:
            row: the operations columns (``operation_id``, ``run_id``, ``node_key``, ``app``, ``project``,
                ``config``, ``input``, ``fingerprint``, ``call_dir``, ``created_at``, ``deadline``...).

        Fault points: ``node.running`` (when one was held), then ``op.intent``.
        """

    def operation_running(self, operation_id: str, *, pid: int | None, proc_start: str | None, started_at: float,
                          deadline: float) -> None:
        """Record the process of a call (status ``running``); for an HTTP request (``pid`` None): the guard let it
        through and it is about to be sent. Fault point: ``op.started``."""

    def finish_operation(self, operation_id: str, *, status: str, at: float, failure: str | None = None,
                         error: str | None = None, result: Any = None, exit_code: int | None = None,
                         signal: int | None = None, stdout_tail: str | None = None, stderr_tail: str | None = None,
                         resources: list[JsonObject] | None = None, depends_on: list[str] | None = None,
                         process: OperationRow | None = None, node_succeeded: tuple[str, str] | None = None) -> None:
        """Record a call's outcome: ``succeeded`` | ``failed`` | ``unknown``, with a
        :class:`~workrun.core.outcomes.Failure` kind when it did not succeed. ``resources`` and ``depends_on``
        are left as they were when None.

        Args:
            process: ``{pid, proc_start, started_at, deadline}`` of a call whose ``running`` status was never
                written (it ended before :data:`workrun.runner.base.RUNNING_AFTER`): written now with the outcome.
            node_succeeded: ``(run_id, node_key)`` of the call's node when the call ``succeeded`` and so did
                that node, with the call's result: the node's end is written in the same transaction
                (:meth:`finish_node` folded in, one write fewer per node, issue 14).

        Fault points: ``op.finished``, then ``node.finished`` (with ``node_succeeded``)."""

    def operation(self, operation_id: str) -> OperationRow:
        """One operation by id.

        Raises:
            NotFoundError: unknown id.
        """

    def operations(self, run_id: str, node_key: str | None = None) -> list[OperationRow]:
        """The run's operations (of one node when ``node_key`` is given), in the order they were recorded."""

    def operation_views(self, run_id: str) -> list[OperationRow]:
        """The run's operations in the order they were recorded, with the columns a run's view shows (SPEC §9:
        ``operation_id, node_key, tool_call_index, app, kind, tool_name, status, input, result, resources,
        depends_on, fingerprint, error, exit_code, signal, created_at, started_at, ended_at, stdout_tail,
        stderr_tail``), not its config snapshot or fingerprint files: a run's view decodes no JSON it does not
        show (issue 33)."""

    def operation_statuses(self, run_id: str, node_key: str | None = None) -> list[OperationRow]:
        """``{operation_id, node_key, status}`` of the run's operations (of one node when ``node_key`` is
        given), in order (cheap: no JSON to decode; one node's costs the same at any run length, issue 14)."""

    def operations_in_flight(self, run_id: str | None = None) -> list[OperationRow]:
        """Operations ``starting`` or ``running`` of a run (of standalone calls when ``run_id`` is None)."""

    def adopt_operation(self, operation_id: str, *, owner_pid: int, owner_start: str | None,
                        seen_pid: int | None, seen_start: str | None) -> bool:
        """Make this process the owner of an in-flight call whose owner is gone, before settling it.

        Conditional: only while the call is still in flight and still owned by ``seen_pid``/``seen_start``
        (the owner the caller found dead; None for calls journaled before owners were recorded).

        Returns:
            True when adopted; False when the call ended or another process adopted it meanwhile
            (then the caller leaves it alone).
        """

    def count_operations(self) -> int:
        """Number of operations in the journal."""


class CompensationRecords(Protocol):
    """Compensations, their attempts and operator events (R-C1..R-C9, R-O1..R-O6)."""

    def plan_compensations(self, records: Sequence[CompensationRow]) -> None:
        """Insert compensation records (of a failed run found without them). Fault point: ``run.failed``."""

    def set_compensation_status(self, compensation_id: str, status: str, *, reason: str | None, at: float,
                                held_back_by: list[str] | None = None, seen: str | None = None,
                                clear_schedule: bool = False, accept_code_change: bool = False,
                                event: EventRow | None = None) -> None:
        """Change a compensation's status (hold-back, release, blocked, an operator's action) (R-C4, R-O3).

        Args:
            held_back_by: compensation ids holding it back (written as given; None clears it).
            seen: when given, write only if the status is still ``seen``.
            clear_schedule: also clear ``next_attempt_at`` (run now rather than after backoff).
            accept_code_change: set its ``accept_code_change`` flag (R-C8).
            event: an operator event row ``{compensation_id, run_id, at, actor, action, args, text}``
                recorded in the same transaction (R-O2).

        Raises:
            StaleStatusError: the status is no longer ``seen``; nothing was written.

        Fault point: ``comp.status``.
        """

    def record_event(self, event: EventRow) -> None:
        """Record an operator event that changes no status (a note, R-O2). Fault point: ``comp.status``."""

    def start_attempt(self, compensation_id: str, number: int, *, trigger: str, call_dir: str, seen: str,
                      at: float) -> None:
        """Record an attempt's intent (``starting``) and mark its compensation ``running``, at once (R-C7).

        Args:
            trigger: ``auto`` | ``operator``.
            seen: the compensation status the caller read.
            at: epoch seconds.

        Raises:
            StaleStatusError: the compensation left ``seen`` meanwhile; nothing was written.

        Fault points: ``attempt.intent``, then ``comp.status`` (one commit: the compensation's status changes).
        """

    def attempt_running(self, compensation_id: str, number: int, *, pid: int | None, proc_start: str | None,
                        deadline: float) -> None:
        """Record an attempt's process (status ``running``); for a reverse action (``pid`` None): its request is
        about to be sent. Fault point: ``attempt.started``."""

    def finish_attempt(self, compensation_id: str, number: int, *, status: str, failure: str | None,
                       error: str | None, result: Any, at: float, exit_code: int | None = None,
                       signal: int | None = None, stdout_tail: str | None = None, stderr_tail: str | None = None,
                       compensation_status: str, reason: str | None, next_attempt_at: float | None = None,
                       http_status: int | None = None, response_tail: str | None = None,
                       smtp_code: int | None = None, run_data: tuple[str, JsonObject] | None = None) -> None:
        """Record an attempt's outcome and its compensation's new status in one transaction (R-C7).

        The compensation's ``result`` is set to ``result`` when ``compensation_status`` is ``succeeded``;
        its ``held_back_by`` is cleared. Fault points: ``attempt.finished``, then ``comp.status`` (one commit: the
        compensation's status changes).
        ``http_status`` and ``response_tail`` (first 2 KiB of the body) record a reverse action's answer (R-H7).
        """

    def compensations(self, run_id: str) -> list[CompensationRow]:
        """The run's compensations in the order they were planned."""

    def compensation(self, compensation_id: str) -> CompensationRow:
        """One compensation by exact id or unique prefix.

        Raises:
            NotFoundError: no compensation, or the prefix matches several.
        """

    def list_compensations(self, status: str | None = None, run_id: str | None = None,
                           workflow: str | None = None, *, verify: bool = True) -> list[CompensationRow]:
        """Compensations filtered by status, run and workflow name (None: any), oldest first; ``verify`` False:
        none of the runs of ``workrun verify``."""

    def attempts(self, compensation_id: str) -> list[AttemptRow]:
        """Attempts of a compensation, by number."""

    def attempts_of_run(self, run_id: str) -> list[AttemptRow]:
        """All attempts of a run's compensations."""

    def attempts_in_flight(self, run_id: str) -> list[AttemptRow]:
        """Attempts of the run whose outcome is not recorded yet."""

    def events(self, compensation_id: str) -> list[EventRow]:
        """Operator events of a compensation, oldest first."""

    def runs_with_open_compensation(self) -> list[str]:
        """Ids of runs with a compensation ``pending`` or ``running``, or with succeeded calls whose
        compensation is owed (failed run, or stopped with compensation requested) but not yet planned."""


class TicketRecords(Protocol):
    """Manual repair (SPEC §12): tickets, their actions and attempts, notifications."""

    def open_ticket(self, ticket: TicketRow, *, node_status: str, handled: bool, at: float,
                    events: Sequence[TicketEventRow], action: TicketActionRow | None = None,
                    notification: NotificationRow | None = None, run_data: JsonObject | None = None,
                    attempt: TicketAttemptRow | None = None) -> None:
        """Open a ticket and move its node (``running`` -> ``waiting``, or ``failed`` for fallback_action /
        terminate, ``handled`` for fallback_action) with its events, its action job (and ``attempt``, an action
        done with it: a fallback ``update_data``) and its notification intent, in one transaction (R-M1,
        R-M3..R-M5, R-M8, R-K4). Fault point: ``ticket.opened``."""

    def pause_run(self, run_id: str, *, reason: str, at: float) -> None:
        """Mark a running run ``waiting``; its pending nodes stay pending (R-M1). Fault point: ``run.waiting``."""

    def resume_ticket(self, ticket_id: str, result: Any, event: TicketEventRow, *, at: float) -> None:
        """Operator resume (R-M6): node ``waiting`` -> ``succeeded`` (handled, ``result``), ticket ``pending`` ->
        ``resolved``, a ``waiting`` run -> ``running``, and the event, at once.

        Raises:
            StaleStatusError: the ticket or node is no longer as seen; nothing was written.
        """

    def end_run_by_ticket(self, ticket_id: str, event: TicketEventRow, status: str, *, at: float, reason: str | None,
                          compensations: Sequence[CompensationRow] = ()) -> None:
        """Operator terminate (R-M6): the ticket ``terminated``, its node ``failed``, then as :meth:`end_run`
        (``failed`` with compensation records, or ``terminated``) and the event, in one transaction."""

    def resolve_ticket(self, ticket_id: str, event: TicketEventRow, *, at: float) -> None:
        """Close a pending ticket by hand with its event; the run is not advanced (R-M6)."""

    def set_ticket_action(self, ticket_id: str, status: str, *, reason: str | None, at: float, seen: str,
                          event: TicketEventRow | None = None) -> None:
        """Move a ticket's action job to ``status`` (operator retry / confirm, recovery) with its event.

        Raises:
            StaleStatusError: the action is no longer ``seen``.
        """

    def record_ticket_event(self, event: TicketEventRow) -> None:
        """Add a note (or attachment) to a ticket's history (R-M6, R-O2)."""

    def start_action_attempt(self, ticket_id: str, number: int, *, trigger: str, seen: str, at: float) -> None:
        """Record an action attempt's intent (``starting``) and the action ``running`` at once (R-M3).
        Fault point: ``action.intent``."""

    def action_sending(self, ticket_id: str, number: int) -> None:
        """The attempt's request is about to leave (``sending``). Fault point: ``action.sending``."""

    def finish_action_attempt(self, ticket_id: str, number: int, attempt: TicketAttemptRow, action: TicketActionRow,
                              run_data: tuple[str, JsonObject] | None = None) -> None:
        """Record an attempt's outcome and the action's next state at once. Fault point: ``action.finished``."""

    def add_notification(self, row: NotificationRow) -> bool:
        """Record a notification's intent unless its ``subject`` exists (never twice, R-M8); True when written.
        Fault point: ``notify.intent``."""

    def notification_sending(self, notification_id: str, *, at: float) -> None:
        """The notification is about to leave (``sending``). Fault point: ``notify.sending``."""

    def finish_notification(self, notification_id: str, status: str, *, at: float, http_status: int | None,
                            error: str | None, event: TicketEventRow | None = None) -> None:
        """Record a notification's outcome, and on its ticket the event when it did not go out (R-M8)."""

    def ticket(self, ticket_id: str) -> TicketRow:
        """One ticket by id or unique prefix.

        Raises:
            NotFoundError: no ticket, or the prefix matches several.
        """

    def tickets(self, run_id: str) -> list[TicketRow]:
        """The run's tickets, oldest first."""

    def list_tickets(self, status: str | None = None, run_id: str | None = None,
                     workflow: str | None = None) -> list[TicketRow]:
        """Tickets by status, run and workflow name (None: any), oldest first."""

    def ticket_action(self, ticket_id: str) -> TicketActionRow | None:
        """The ticket's action job, or None."""

    def ticket_attempts(self, ticket_id: str) -> list[TicketAttemptRow]:
        """Attempts of a ticket's action, by number."""

    def ticket_events(self, ticket_id: str) -> list[TicketEventRow]:
        """A ticket's history, oldest first."""

    def open_ticket_actions(self, run_id: str | None = None) -> list[TicketActionRow]:
        """Action jobs ``pending`` or ``running`` (of one run, or all), oldest first."""

    def runs_with_open_tickets_work(self) -> list[str]:
        """Ids of runs with an action job or a notification still owed (R-M7, R-M8)."""

    def notifications(self, run_id: str | None = None, statuses: tuple[str, ...] = ()) -> list[NotificationRow]:
        """Notifications (of one run, with one of ``statuses``), oldest first."""


class RemoteTaskRecords(Protocol):
    """Remote A2A tasks (R-C10): the task's state and its one cancel."""

    def start_remote_task(self, run_id: str, node_key: str, url: str, *, at: float) -> None:
        """Record that a message is about to be sent (``state = sending``), replacing any earlier row.
        Fault point: ``remote.intent``."""

    def remote_task_state(self, run_id: str, node_key: str, *, state: str, at: float, task_id: str | None = None,
                          context_id: str | None = None) -> None:
        """Record a remote task's state (and its ids once known; None keeps them). Fault point: ``remote.task``."""

    def remote_cancel(self, run_id: str, node_key: str, *, status: str, at: float, answer: str | None = None,
                      state: str | None = None) -> None:
        """Record the one cancel of a remote task: ``sending`` (before the request; sets ``cancel_at``),
        then ``sent`` | ``error`` | ``unknown`` with the answer. ``state`` (when given) is the task's state
        from the answer. Fault point: ``remote.cancel`` for ``sending``."""

    def remote_tasks(self, run_id: str) -> list[RemoteTaskRow]:
        """Remote A2A tasks of a run."""

    def runs_with_open_remote_tasks(self) -> list[str]:
        """Ids of failed or stopped runs with a remote task still owed its one cancel (R-C10), oldest first."""


class Listings(Protocol):
    """Reads for lists and the dashboard (R-U2, R-U8, R-D1): one short read each, paged and filtered."""

    def run_summaries(self, *, status: str | None = None, workflow: str | None = None, limit: int | None = None,
                      offset: int = 0, verify: bool | None = None, text: str | None = None,
                      since: float | None = None, until: float | None = None, sort: str = "started",
                      descending: bool = True) -> list[RunRow]:
        """Runs (summary columns: run_id, workflow, workflow_path, status, eval, verify, rerun_of, created_at,
        ended_at; ``verify`` filters verify runs in or out, None: both),
        newest first, filtered by exact status and workflow name; ``limit`` None: all."""

    def count_runs(self, *, status: str | None = None, workflow: str | None = None, text: str | None = None,
                   since: float | None = None, until: float | None = None, verify: bool | None = None) -> int:
        """Number of runs matching the filters of :meth:`run_summaries`."""

    def workflow_names(self) -> list[str]:
        """Distinct workflow names of all runs, sorted."""

    def compensation_counts(self, run_ids: Sequence[str] | None = None, *,
                            verify: bool = True) -> dict[str, dict[str, int]]:
        """``{run_id: {status: count}}`` of compensations of the given runs (None: every run, those of
        ``workrun verify`` only with ``verify``)."""

    def latest_app_calls(self) -> list[AppCallRow]:
        """The newest operation of each (project, App): project, app, kind, config, fingerprint,
        fingerprint_files, created_at, calls (their number); by project then App."""

    def events_of_run(self, run_id: str) -> list[EventRow]:
        """Every operator event of a run (run-level and per compensation), oldest first."""

    def compensation_queue(self, *, status: str | None = None, run_id: str | None = None,
                           workflow: str | None = None, limit: int = 100, offset: int = 0,
                           verify: bool = True) -> tuple[list[CompensationRow], int]:
        """The operator's queue: compensations failed, blocked, unknown, pending first (then running, done),
        oldest first within a status, filtered by status, run and workflow name (None: any); at most ``limit``
        rows from ``offset``, and how many match in all (R-D1)."""


class Journal(RunRecords, CallRecords, CompensationRecords, TicketRecords, RemoteTaskRecords, Listings, Protocol):
    """The durable record of runs, nodes, operations, compensations, attempts, operator events, remote tasks.

    The roles it plays, each a protocol of its own so that a caller can ask for only the one it uses:
    :class:`RunRecords`, :class:`CallRecords`, :class:`CompensationRecords`, :class:`TicketRecords`,
    :class:`RemoteTaskRecords`, :class:`Listings`.
    """

    @property
    def schema_version(self) -> int:
        """The number of migrations applied."""

    def write_back(self) -> None:
        """Say that no write is expected soon (a run was driven to its end): the journal may settle its files in
        the background meanwhile (SQLite: copy its write-ahead log into the database file, with that copy's
        syncs off the caller's path, issue 33). Later writes are still taken; :meth:`close` waits for what
        was started here. Best effort: never raises."""

    def close(self) -> None:
        """Release the connection."""


class RunClaims(Protocol):
    """Run claims with leases (R-S2, R-F2): one scheduler per run, an epoch per claim, takeover after the lease."""

    supports_workers: bool

    def register_worker(self, worker_id: str, host: str, pid: int, lease: float, now: float) -> None:
        """Record a worker before it claims anything."""

    def heartbeat(self, worker_id: str, now: float, lease: float, run_ids: Iterable[str]) -> set[str]:
        """Renew the worker's heartbeat and its claims on ``run_ids``; return those still its own."""

    def worker_stopped(self, worker_id: str, now: float) -> None:
        """Mark a worker gone and free its claims."""

    def claim_run(self, worker_id: str, now: float, lease: float, run_id: str | None = None,
                  exclude: Iterable[str] = ()) -> RunClaimRow | None:
        """Claim a run that needs work (or ``run_id``), not one of ``exclude``; None when there is none."""

    def run_needs_work(self, run_id: str) -> bool:
        """True when the run has nodes to run, compensations to attempt or plan, or a remote cancel owed."""

    def release_run(self, run_id: str, worker_id: str, not_before: float) -> None:
        """Give a run back; nobody claims it before ``not_before``."""

    def fenced(self, run_id: str, worker_id: str, epoch: int) -> AbstractContextManager[None]:
        """While inside, every write is conditional on ``worker_id`` holding ``run_id``'s claim at ``epoch``;
        a refused write raises :class:`~workrun.core.errors.ClaimLostError` (R-F2)."""

    def run_claim(self, run_id: str) -> RunClaimRow | None:
        """The run's claim (``worker_id``, ``lease_until``, ``takeovers``, the worker's ``host`` and ``pid``)."""

    def held_runs_needing_work(self, now: float) -> list[RunClaimRow]:
        """Runs needing work under a live, unreleased claim (``run_id``, ``worker_id``, ``lease_until``,
        the worker's ``host`` and ``pid``)."""


class CallClaims(Protocol):
    """Claims of single calls (``dispatched_calls``, see :mod:`workrun.cluster.dispatch`): executors run a run's App
    processes."""

    def dispatch_call(self, call_id: str, run_id: str | None, call: JsonObject, now: float) -> bool:
        """Queue one App process (node call or compensation attempt); False when ``call_id`` exists (fenced)."""

    def set_call_timeout(self, call_id: str, timeout: float) -> None:
        """Give a queued call its timeout in seconds; executors claim only calls that have one."""

    def claim_calls(self, worker_id: str, host: str, now: float, lease: float, limit: int, exec_root: str,
                    run_ids: list[str] | None = None) -> list[DispatchedCallRow]:
        """Claim up to ``limit`` queued calls, oldest first (``SKIP LOCKED``); each goes to exactly one claimer."""

    def call_started(self, call_id: str, worker_id: str, pid: int, proc_start: str | None, deadline: float) -> bool:
        """Record a claimed call's process; False when the claim is no longer ``worker_id``'s."""

    def finish_call(self, call_id: str, worker_id: str, outcome: JsonObject, collected: JsonObject, now: float) -> bool:
        """Store an executor's outcome, only while it holds the claim; True when stored."""

    def settle_call(self, call_id: str, worker_id: str, outcome: JsonObject, collected: JsonObject, now: float) -> bool:
        """Store a scheduler's R-R3 decision on ``worker_id``'s expired claim; True when stored."""

    def requeue_call(self, call_id: str, worker_id: str, now: float, *, unsent: bool = False) -> bool:
        """Queue again an expired claim whose process provably never started; True when done. ``unsent``:
        only while the claim has no "about to send" mark (an HTTP request, :meth:`http_sending`)."""

    def http_sending(self, call_id: str, worker_id: str, mark: JsonObject, now: float, deadline: float) -> bool:
        """Commit "about to send" for a claimed HTTP request (R-H1, R-H2) in one transaction: the claim's mark
        and the operation's or attempt's ``running``; False (nothing written) when ``worker_id`` no longer
        holds the claim or the operation/attempt is no longer ``starting``."""

    def fence_call(self, call_id: str, run_id: str | None, now: float) -> bool:
        """Make an unclaimed (or never queued) call unable to ever start; True when it is fenced."""

    def request_call_stop(self, call_ids: Iterable[str]) -> None:
        """Ask the executors of these calls to end their processes (R-C9)."""

    def renew_calls(self, worker_id: str, now: float, lease: float, call_ids: Iterable[str]) -> dict[str, bool]:
        """Renew call claims; ``{call_id: stop_requested}`` for those still ``worker_id``'s."""

    def dispatched_call(self, call_id: str) -> DispatchedCallRow | None:
        """One dispatched call's row, or None."""

    def dispatched_calls(self, run_id: str) -> list[DispatchedCallRow]:
        """A run's dispatched calls, in queue order."""

    def wait_for_calls(self, timeout: float) -> None:
        """Block up to ``timeout`` seconds until a call may have become claimable."""


class SnapshotStore(Protocol):
    """Code snapshots stored in the database (R-S4, R-F3)."""

    def put_snapshot(self, snapshot: str, manifest: JsonObject, read: Callable[[str], bytes], now: float) -> None:
        """Store a code snapshot's manifest and missing objects (``read(digest) -> bytes``) at once (R-S4)."""

    def has_snapshot(self, snapshot: str) -> bool:
        """True when the database holds the snapshot."""

    def snapshot_manifest(self, snapshot: str) -> JsonObject | None:
        """The snapshot's manifest ``{files: {path: sha256}, project}``, or None."""

    def snapshot_object(self, digest: str) -> bytes:
        """One stored file's bytes; raises KeyError when missing."""

    def gc_lock(self) -> AbstractContextManager[None]:
        """Held by one ``workrun gc`` at a time on the database (an advisory lock, R-F3)."""

    def prune_snapshots(self, needed: set[str], *, dry_run: bool = False) -> tuple[int, int]:
        """Delete the stored snapshots not in ``needed`` and the objects no remaining one names; ``(removed,
        kept)``."""


class SharedJournal(Journal, RunClaims, CallClaims, SnapshotStore, Protocol):
    """A journal many workers share (PostgreSQL, R-S1..R-S4): run and call claims with leases, code snapshots.

    A claim is one run: ``claim_run`` picks, with ``SELECT … FOR UPDATE SKIP LOCKED``, the oldest run that
    needs work and has no live claim (or the given run), records ``(worker_id, lease_until, epoch)`` and
    returns ``{run_id, worker_id, epoch, previous_worker, previous_host, takeover}``; of racing claimers
    exactly one wins. A live claim is never claimed again, not even by its holder. Times are epoch seconds;
    ``lease`` is seconds.

    Roles beyond :class:`Journal`'s: :class:`RunClaims`, :class:`CallClaims`, :class:`SnapshotStore`.
    """
