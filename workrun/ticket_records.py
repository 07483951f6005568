"""The rows of manual repair (SPEC §12): a ticket, its action job, its opening event, a notification.

Pure functions of their arguments (no journal, no clock): the engine writes what
they build in the one transaction that makes a node ``waiting`` or handled
(R-M1, R-M3, R-M4), and :mod:`workrun.ticket_actions` and :mod:`workrun.tickets`
reuse them. Templates of an action are filled here when it is registered, except
``{{ env.NAME }}`` in header values, which stays template text in the journal and
is read only when the request is sent (R-H5).
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any
from urllib.parse import quote

from workrun.models import HttpAction

__all__ = [
    "SYSTEM_ACTOR",
    "action_row",
    "event_row",
    "fill",
    "new_ticket_id",
    "notification_row",
    "one_line",
    "render_request",
    "ticket_message",
    "ticket_row",
]

SYSTEM_ACTOR = "workrun"  # the actor of events Workrun itself records (opening, policy decisions)
_TEMPLATE = re.compile(r"\{\{\s*([^{}]*?)\s*\}\}")


def new_ticket_id() -> str:
    """A new ticket id: ``tkt_`` + 12 hex digits (a unique prefix is accepted by every command, R-M6)."""
    return f"tkt_{uuid.uuid4().hex[:12]}"


def one_line(text: str | None, limit: int = 300) -> str:
    """``text`` on one line (whitespace runs collapsed), cut to ``limit`` characters."""
    flat = " ".join((text or "").split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _lookup(ref: str, values: dict[str, Any]) -> Any:
    parts = ref.split(".")
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


def fill(value: Any, values: dict[str, Any], *, in_url: bool = False) -> Any:
    """Fill ``{{ … }}`` templates from ``values`` (``inputs``, ``nodes``, and plain names such as ``run_id``).

    ``{{ env.NAME }}`` is left as written (read at send time, R-H5). A string that is exactly one
    template takes the value as is; otherwise values are interpolated as text (JSON for objects),
    percent-encoded when ``in_url`` (R-H3: a value never adds a ``/``, ``?``, ``#`` or ``&``).

    Raises:
        KeyError: naming the reference, when a value is missing.
    """
    if isinstance(value, dict):
        return {k: fill(v, values) for k, v in value.items()}
    if isinstance(value, list):
        return [fill(v, values) for v in value]
    if not isinstance(value, str):
        return value
    whole = _TEMPLATE.fullmatch(value.strip())
    if whole and not in_url and not whole.group(1).startswith("env."):
        return _lookup(whole.group(1), values)

    def sub(m: re.Match[str]) -> str:
        if m.group(1).startswith("env."):
            return m.group(0)
        v = _lookup(m.group(1), values)
        text = v if isinstance(v, str) else json.dumps(v)
        return quote(text, safe="") if in_url else text

    return _TEMPLATE.sub(sub, value)


def render_request(action: HttpAction, values: dict[str, Any]) -> dict[str, Any]:
    """The request an action sends: ``{method, url, headers, body}`` with templates filled (env kept).

    Raises:
        KeyError: a referenced value is missing.
    """
    return {"method": action.method, "url": fill(action.url, values, in_url=True),
            "headers": {k: fill(v, values) for k, v in action.headers.items()},
            "body": fill(action.body, values)}


def ticket_row(ticket_id: str, run_id: str, node_key: str, policy: str, status: str, error: str | None,
               now: float) -> dict[str, Any]:
    """A ticket row (R-M1): ``status`` pending | resolved | terminated; ``now`` epoch seconds."""
    return {"ticket_id": ticket_id, "run_id": run_id, "node_key": node_key, "policy": policy, "status": status,
            "error": error, "result": None, "created_at": now, "updated_at": now}


def action_row(ticket_id: str, run_id: str, action: HttpAction, request: dict[str, Any],
               now: float) -> dict[str, Any]:
    """The action job of a ticket (R-M3, R-M4): ``pending``, at most ``max_retries + 1`` attempts."""
    return {"ticket_id": ticket_id, "run_id": run_id, "status": "pending", "request": request, "result": None,
            "reason": None, "max_attempts": action.max_retries + 1, "timeout": action.timeout,
            "backoff": action.backoff, "idempotent": int(action.idempotent), "next_attempt_at": None,
            "created_at": now, "updated_at": now}


def event_row(ticket_id: str, run_id: str, actor: str, action: str, args: dict[str, Any], now: float,
              text: str | None = None, attachment: str | None = None) -> dict[str, Any]:
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
                     compensation_id: str | None = None) -> dict[str, Any]:
    """A notification's intent (R-M8): ``subject`` is unique (one message per ticket / dead letter).

    Raises:
        KeyError: a template of ``[notify]`` names a value that is missing.
    """
    request = {**render_request(notify, {**values, "message": message}), "timeout": notify.timeout}
    return {"notification_id": notification_id, "subject": subject, "run_id": run_id, "ticket_id": ticket_id,
            "compensation_id": compensation_id, "message": message, "request": request, "status": "pending",
            "http_status": None, "error": None, "created_at": now, "updated_at": now}
