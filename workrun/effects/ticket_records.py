"""The rows of manual repair (SPEC §12): a ticket, its action job, its opening event, a notification.

Pure functions of their arguments (no journal, no clock): the engine writes what
they build in the one transaction that makes a node ``waiting`` or handled
(R-M1, R-M3, R-M4), and :mod:`workrun.effects.ticket_actions` and :mod:`workrun.repair.tickets`
reuse them. An action's request is prepared here, once, when it is registered (R-X1):
its templates are filled from the file's text by :func:`workrun.outbound.http.prepare` and
the journal keeps the prepared values (:meth:`~workrun.outbound.http.PreparedRequest.queued`)
with ``{{ env.NAME }}`` in header values as typed references, read only when the
request is sent (R-H5). Nothing that sends a stored request fills a template again, so
a value from outside (an input, a result, an answer, an error line) that contains
``{{ … }}`` is sent literally.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, cast

from workrun.core.models import HttpAction
from workrun.core.rows import NotificationRow, RunRow, TicketActionRow, TicketEventRow, TicketRow, TicketStatus
from workrun.outbound.http import (
    EnvLater,
    RequestError,
    UnsafeRequestError,
    UrlTemplate,
    connector_of,
    fill_value,
    parse_url,
    prepare,
    whole_reference,
)
from workrun.outbound.mail import prepare_mail

__all__ = [
    "SYSTEM_ACTOR",
    "action_row",
    "data_updates",
    "run_data",
    "event_row",
    "new_ticket_id",
    "notification_row",
    "one_line",
    "render_request",
    "ticket_message",
    "ticket_row",
]

SYSTEM_ACTOR = "workrun"  # the actor of events Workrun itself records (opening, policy decisions)


def new_ticket_id() -> str:
    """A new ticket id: ``tkt_`` + 12 hex digits (a unique prefix is accepted by every command, R-M6)."""
    return f"tkt_{os.urandom(6).hex()}"


def one_line(text: str | None, limit: int = 300) -> str:
    """``text`` on one line (whitespace runs collapsed), cut to ``limit`` characters."""
    flat = " ".join((text or "").split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _lookup(ref: str, values: dict[str, Any]) -> Any:
    parts = ref.split(".")
    if parts[0] == "data" and len(parts) == 2:  # the run's data when the action is prepared (R-K4)
        return (values.get("data") or {}).get(parts[1])
    if parts[0] == "inputs":
        return values["inputs"][parts[1]]
    if parts[0] == "nodes":
        value: Any = values["nodes"][parts[1]]["result"]
        for part in parts[3:]:
            if not isinstance(value, dict) or part not in value:
                raise KeyError(ref)
            value = value[part]
        return value
    return values[ref]


def run_data(run: RunRow) -> dict[str, Any]:
    """A run's ``data`` (R-K4): its current value, or its inputs for a run journaled before data existed."""
    data = run.get("data")
    return dict(data) if isinstance(data, dict) else dict(run.get("inputs") or {})


def data_updates(action: HttpAction, values: dict[str, Any]) -> dict[str, Any]:
    """What an ``update_data`` action sets (R-K4): each of its ``fields`` to its value from ``values`` filled once
    (a whole-value template keeps its JSON type), or ``null`` when it gives none. Keys outside ``fields`` are
    untouched by the caller's merge.

    Raises:
        KeyError: a template has no value.
    """
    spec = action.update_data
    assert spec is not None
    return {f: fill_value(spec.values[f], lambda ref: _lookup(ref, values)) if f in spec.values else None
            for f in spec.fields}


def render_request(action: HttpAction, values: dict[str, Any], *, idempotency_key: str,
                   connectors: Mapping[str, Any] | None = None, subject: str = "",
                   message_id: str | None = None) -> dict[str, Any]:
    """Prepare the request an action sends, once (R-X1, R-X3): what the journal stores for it.

    Args:
        action: the action as the file wrote it.
        values: ``inputs``, ``nodes`` (``{key: {"result": …}}``) and plain names (``run_id``, ``error``, …).
        idempotency_key: its ``Idempotency-Key`` (the ticket or notification id).
        connectors: the workflow's ``[connectors]``, for an action that names one (R-K1, R-K3).
        subject, message_id: an email action's subject and ``Message-ID`` (R-K2; default ``<KEY@workrun>``).

    Returns:
        ``{method, url, headers, body, timeout, prepared}``: the request as shown (``{{ env.NAME }}`` as text)
        and ``prepared``, its :meth:`~workrun.outbound.http.PreparedRequest.queued` form that is sent; or, when a
        filled value makes it unsafe (an empty value in the URL, a dot segment), ``unsendable`` (the reason,
        final) and ``prepared`` None.

    Raises:
        KeyError: a referenced value is missing.
        RequestError: a filled header value holds a line break or a character that is not ASCII, or a bound.
    """
    if action.kind == "update_data":  # R-K4: the values, filled once; written when the action runs
        updates = data_updates(action, values)
        return {"method": "DATA", "url": "data:", "headers": {}, "body": updates, "timeout": action.timeout,
                "prepared": {"kind": "update_data", "updates": updates}}
    if action.kind == "email" and action.email is not None:  # R-K2: the message, filled once
        mail = prepare_mail(action.email, subject=subject, message_id=message_id or f"<{idempotency_key}@workrun>",
                            lookup=lambda ref: _lookup(ref, values))
        return {"method": "EMAIL", "url": "mailto:" + ",".join(mail["to"] + mail["cc"]), "headers": {},
                "body": mail["body"], "timeout": action.timeout, "prepared": mail}
    connector = connector_of(connectors, action.connector)
    try:
        if whole_reference(action.url) is not None:  # R-K6: a URL reference, resolved against the connector's
            url = UrlTemplate.reference(action.url)   # base URL (with none, it has no origin: not sent)
        else:
            url = connector.url(action.url) if connector is not None else parse_url(action.url)
        prepared = prepare(method=action.method, url=url, headers=action.headers, body=action.body,
                           timeout=action.timeout, lookup=lambda ref: _lookup(ref, values),
                           idempotency_key=idempotency_key, environ=EnvLater(), connector=connector)
    except UnsafeRequestError as exc:
        return {"method": action.method, "url": action.url, "headers": {}, "body": None, "timeout": action.timeout,
                "prepared": None, "unsendable": str(exc)}
    return {**prepared.shown(), "timeout": action.timeout, "prepared": prepared.queued()}


def ticket_row(ticket_id: str, run_id: str, node_key: str, policy: str, status: str, error: str | None,
               now: float) -> TicketRow:
    """A ticket row (R-M1): ``status`` pending | resolved | terminated; ``now`` epoch seconds."""
    return {"ticket_id": ticket_id, "run_id": run_id, "node_key": node_key, "policy": policy,
            "status": cast(TicketStatus, status),
            "error": error, "result": None, "created_at": now, "updated_at": now}


def action_row(ticket_id: str, run_id: str, action: HttpAction, request: dict[str, Any],
               now: float) -> TicketActionRow:
    """The action job of a ticket (R-M3, R-M4): ``pending``, at most ``max_retries + 1`` attempts."""
    return {"ticket_id": ticket_id, "run_id": run_id, "status": "pending", "request": request, "result": None,
            "reason": None, "max_attempts": action.max_retries + 1, "timeout": action.timeout,
            "backoff": action.backoff, "idempotent": int(action.idempotent), "next_attempt_at": None,
            "created_at": now, "updated_at": now}


def event_row(ticket_id: str, run_id: str, actor: str, action: str, args: dict[str, Any], now: float,
              text: str | None = None, attachment: str | None = None) -> TicketEventRow:
    """One line of a ticket's history (R-M6, R-O2): who, when, what, with which arguments."""
    return {"ticket_id": ticket_id, "run_id": run_id, "at": now, "actor": actor, "action": action, "args": args,
            "text": text, "attachment": attachment}


_OPENED_AS = {"pending": "waits for a person", "resolved": "failed and was handled by its fallback action",
              "terminated": "failed and ended the run terminated"}


def ticket_message(run_id: str, node_key: str, ticket_id: str, error: str | None, status: str = "pending") -> str:
    """The one-line ``{{ message }}`` of a ticket's notification (R-M8).

    ``status`` is the ticket's status when it opens: ``pending`` (notify, compensate: the node waits for a
    person), ``resolved`` (fallback_action) or ``terminated`` (terminate); the line says which.
    """
    return one_line(f"workrun: run {run_id}: node {node_key} {_OPENED_AS.get(status, status)}: ticket {ticket_id}: "
                    f"{error or 'failed'}")


def notification_row(notification_id: str, subject: str, run_id: str, message: str, notify: HttpAction,
                     values: dict[str, Any], now: float, *, ticket_id: str | None = None,
                     compensation_id: str | None = None, connectors: Mapping[str, Any] | None = None
                     ) -> NotificationRow:
    """A notification's intent (R-M8): ``subject`` is unique (one message per ticket / dead letter).

    Raises:
        KeyError: a template of ``[notify]`` names a value that is missing.
    """
    run_id_text, node = values.get("run_id", run_id), values.get("node_key", "")
    kind, _, key = subject.partition(":")
    key = key.split(":", 1)[0]
    message_id = {"ticket": f"<{key}.notify@workrun>", "compensation": f"<{key}.dead-letter@workrun>",
                  "action": f"<{key}.dead-letter@workrun>"}.get(kind)
    try:
        request = render_request(notify, {**values, "message": message}, idempotency_key=notification_id,
                                 connectors=connectors, message_id=message_id,
                                 subject=f"Workrun: compensation needs attention — {run_id_text} {node}".rstrip())
    except RequestError as exc:
        request = {"method": notify.method, "url": notify.url, "headers": {}, "body": None, "timeout": notify.timeout,
                   "prepared": None, "unsendable": str(exc)}
    return {"notification_id": notification_id, "subject": subject, "run_id": run_id, "ticket_id": ticket_id,
            "compensation_id": compensation_id, "message": message, "request": request, "status": "pending",
            "http_status": None, "error": None, "created_at": now, "updated_at": now}
