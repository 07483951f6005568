"""The state machine of runs, nodes, operations (calls), compensations and attempts (issue 3).

One implementation: :data:`TRANSITIONS` below is checked by the journal on
every status write (``Journal.update``/``Journal.write`` refuse any other
transition), so no code path can move a record in a way not written here.

Durability rule: every transition that precedes a side effect is committed
before the side effect starts (intent before a process, ``pending`` records
before any compensation). Marked (D) below: the state is committed *before*
the side effect it announces.

Runs (``runs.status``)::

    running -> succeeded | failed | stopped | terminated
    running -> waiting                      (a node waits for a person and nothing else can run, R-M1)
    waiting -> running                      (an operator resumed past the waiting node)
    waiting -> failed | terminated | stopped   (tickets terminate; ``workrun stop``, R-M6, R-M7)
    (a failed run's compensations continue separately; the run stays failed)

Nodes::

    pending -> running (D) -> succeeded | failed | stopped
    pending -> skipped                      (the run ended first)
    running -> running                      (resumed after a restart)
    running -> waiting (D: same transaction as its ticket, R-M1)
    waiting -> succeeded (an operator resumed past it) | failed (terminate) | stopped (stop)

Tickets (manual repair, SPEC §12)::

    pending -> resolved | terminated        (operator, or fallback_action at once; terminate policy)

Ticket actions (one job per ticket, R-M3, R-M4) follow compensations::

    pending (D) -> running (D: with its attempt's intent) -> succeeded | pending (backoff) | failed | unknown
    failed -> pending (operator retry); unknown -> succeeded | failed (operator confirm)

Ticket attempts (one HTTP request)::

    starting (D) -> sending (D: just before the request) -> succeeded | failed | unknown
    starting -> not_started (settled by recovery: nothing was sent); sending -> unknown (recovery)

Notifications (R-M8)::

    pending (D: intent) -> sending (D) -> sent | failed; pending -> failed (refused before sending);
    sending -> unknown (recovery: never sent twice)

Operations (one App call)::

    starting (D: intent, before the process exists)
      -> running (D: pid recorded)          -> succeeded | failed | unknown
      -> failed                             (environment unavailable; not started)
      -> succeeded | failed | unknown       (settled by recovery from the exit record)

Compensations::

    pending (D: planned at final failure, same transaction as run failed)
      -> running (D: with its attempt's intent) -> succeeded | pending (retry after backoff;
                                                    stopped; never started) | failed | unknown
      -> blocked   (held back by a downstream one, or its code changed)
      -> pending   (reason changes, e.g. environment unavailable)
      -> succeeded (operator: resolve)
    blocked -> pending (released; operator retry) | blocked | succeeded (resolve) | running
    failed  -> pending (operator retry) | succeeded (resolve)
    unknown -> succeeded | failed (operator confirm --done / --not-done) | succeeded (resolve)
    skipped    (final: the call's App had no compensation entry)

Attempts (one compensation process)::

    starting (D) -> running (D) -> succeeded | failed | stopped | unknown
    starting -> not_started | stopped | unknown | succeeded | failed   (settled by recovery)
"""

from __future__ import annotations

from workrun.core.errors import InvalidTransitionError

__all__ = ["ACTIVE_OPERATION", "COMPENSATION_DONE", "COMPENSATION_HOLDING", "COMPENSATION_STATUSES", "NODE_ENDED",
           "OPERATION_ENDED", "TERMINAL_REMOTE_STATES", "TICKET_STATUSES", "TRANSITIONS", "allowed", "check"]

#: statuses a node never leaves (see the state machine above)
NODE_ENDED = frozenset({"succeeded", "failed", "stopped", "skipped"})

#: statuses in which a compensation is done (nothing is owed any more)
COMPENSATION_DONE = frozenset({"succeeded", "skipped"})
#: statuses in which a compensation holds back those upstream of it (R-C4)
COMPENSATION_HOLDING = frozenset({"failed", "unknown", "blocked"})
#: every compensation status, in the order the CLI lists them
COMPENSATION_STATUSES = ("pending", "running", "succeeded", "failed", "blocked", "unknown", "skipped")
#: every ticket status (R-M6), in the order the CLI lists them
TICKET_STATUSES = ("pending", "resolved", "terminated")
#: operation statuses whose outcome is recorded
OPERATION_ENDED = frozenset({"succeeded", "failed", "unknown"})
#: operation / attempt statuses still in flight
ACTIVE_OPERATION = frozenset({"starting", "running"})
#: A2A task states after which there is nothing to cancel (R-C10)
TERMINAL_REMOTE_STATES = frozenset({"completed", "failed", "canceled", "rejected"})

TRANSITIONS: dict[str, dict[str, frozenset[str]]] = {
    "runs": {
        "running": frozenset({"succeeded", "failed", "stopped", "waiting", "terminated"}),
        "waiting": frozenset({"running", "failed", "terminated", "stopped"}),
    },
    "nodes": {
        "pending": frozenset({"running", "skipped"}),
        "running": frozenset({"running", "succeeded", "failed", "stopped", "waiting"}),
        "waiting": frozenset({"succeeded", "failed", "stopped"}),
    },
    "tickets": {
        "pending": frozenset({"resolved", "terminated"}),
    },
    "ticket_actions": {
        "pending": frozenset({"pending", "running"}),
        "running": frozenset({"succeeded", "pending", "failed", "unknown"}),
        "failed": frozenset({"pending"}),
        "unknown": frozenset({"succeeded", "failed"}),
    },
    "ticket_attempts": {
        # starting -> succeeded: an update_data action, a local write committed with its success (R-K4)
        "starting": frozenset({"sending", "not_started", "failed", "succeeded"}),
        "sending": frozenset({"succeeded", "failed", "unknown"}),
    },
    "notifications": {
        "pending": frozenset({"sending", "failed"}),
        "sending": frozenset({"sent", "failed", "unknown"}),
    },
    "operations": {
        "starting": frozenset({"running", "succeeded", "failed", "unknown"}),
        "running": frozenset({"succeeded", "failed", "unknown"}),
    },
    "compensations": {
        "pending": frozenset({"pending", "running", "blocked", "succeeded"}),
        "running": frozenset({"succeeded", "pending", "failed", "unknown", "blocked"}),
        "blocked": frozenset({"pending", "blocked", "succeeded", "running"}),
        "failed": frozenset({"pending", "succeeded"}),
        "unknown": frozenset({"succeeded", "failed"}),
    },
    "attempts": {
        "starting": frozenset({"running", "succeeded", "failed", "stopped", "unknown", "not_started"}),
        "running": frozenset({"succeeded", "failed", "stopped", "unknown"}),
    },
}


def allowed(table: str, old: str, new: str) -> bool:
    """True when ``table``'s status may move from ``old`` to ``new`` (tables without a machine: always)."""
    machine = TRANSITIONS.get(table)
    if machine is None:
        return True
    return new in machine.get(old, frozenset())


def check(table: str, key: tuple[object, ...], old: str, new: str) -> None:
    """Refuse a status change the machine does not allow; shared by every journal backend.

    Args:
        table: ``runs``, ``nodes``, ``operations``, ``compensations`` or ``attempts``.
        key: the row's primary key (for the message).
        old / new: the current and the requested status.

    Raises:
        InvalidTransitionError: ``old -> new`` is not in :data:`TRANSITIONS`; the caller writes nothing.
    """
    if not allowed(table, old, new):
        raise InvalidTransitionError(
            f"{table} {'/'.join(map(str, key))}: {old} -> {new} is not a transition "
            "of the state machine (workrun/core/states.py); nothing was written")
