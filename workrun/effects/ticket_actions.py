"""Ticket actions and notifications as durable jobs (R-M3, R-M4, R-M8; attempts as R-C7, R-H6, R-H7).

An action attempt is journaled in three steps, each committed before the next:
``action.intent`` (attempt ``starting``, action ``running``) -> ``action.sending`` (just
before the request leaves) -> ``action.finished``. After a kill -9 recovery settles an
attempt by the last step it reached: ``starting`` -> ``not_started`` (nothing was sent; the
action is ``pending`` again, the attempt does not count); ``sending`` -> ``unknown``: never
re-sent automatically unless the action says ``idempotent = true`` (its Idempotency-Key,
the ticket id, makes that safe, R-R3).

A notification has the same shape with one attempt: ``pending`` (intent, unique subject:
one per ticket opened and per dead letter) -> ``sending`` -> ``sent`` | ``failed``; one left
``sending`` is ``unknown`` and never sent twice. A failed notification is recorded on its
ticket and never blocks the run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from workrun.core import faults
from workrun.core.backoff import backoff_delay
from workrun.core.errors import ActionRefusedError, ConfigError
from workrun.core.models import HttpAction, SmtpSpec, WorkflowSpec
from workrun.core.outcomes import Failure
from workrun.core.rows import NotificationRow, TicketActionRow, TicketAttemptRow, TicketRow
from workrun.core.templates import missing_value
from workrun.effects.ticket_records import SYSTEM_ACTOR, event_row, notification_row, one_line, run_data
from workrun.outbound.http import (
    RequestError,
    SendResult,
    allow_from_env,
    from_queued,
    parse_allow,
    remember_declared,
    send,
)
from workrun.outbound.mail import send_mail
from workrun.runner.context import Context, new_id

__all__ = [
    "notify_dead_letters",
    "recover_actions",
    "run_action",
    "run_actions",
    "send_notifications",
    "send_request",
]



def send_request(svc: Context, run_id: str, request: dict[str, Any], *, timeout: float, idempotency_key: str,
                 before_send: Callable[[], None] | None = None) -> SendResult:
    """Send a stored request through the outbound guard of the run's workflow (R-H3..R-H5, R-X1).

    Args:
        request: as :func:`~workrun.effects.ticket_records.render_request` stored it: ``prepared`` holds the values
            filled once at registration, with ``{{ env.NAME }}`` in header values as typed references, read
            now; no template is filled here. ``unsendable`` (R-X3) fails it at once, not sent, final.

    Never raises for network trouble or a request that cannot be prepared: it is in the result.
    """
    if request.get("unsendable"):
        return SendResult(False, failure=Failure.UNSAFE_REQUEST, error=f"not sent: {request['unsendable']}")
    remember_declared(svc.journal.run(run_id)["spec"])  # the run's secrets, redacted in this answer too (R-X2)
    stored = request.get("prepared")
    if stored and stored.get("kind") == "update_data":  # R-K4: a local write, made with the attempt's success
        return SendResult(True, status=None, body={"data": stored["updates"]})
    if stored and stored.get("kind") == "email":  # R-K2: through the workflow's [smtp]
        spec = svc.journal.run(run_id)["spec"] or {}
        if not spec.get("smtp"):
            return SendResult(False, failure=Failure.NOT_SENT, error="not sent: the workflow has no [smtp]")
        allow = parse_allow(list(spec.get("http_allow") or [])) + allow_from_env()
        return send_mail(stored, SmtpSpec.model_validate(spec["smtp"]), allow, before_send=before_send,
                         timeout=timeout)
    if not stored:  # a journal written before requests were stored prepared: it cannot be sent safely now
        return SendResult(False, failure=Failure.NOT_SENT, error="not sent: the stored request predates prepared "
                          "requests; register the action again")
    spec = svc.journal.run(run_id)["spec"] or {}
    try:
        allow = parse_allow(list(spec.get("http_allow") or [])) + allow_from_env()
        prepared = from_queued({**stored, "timeout": timeout})
    except (RequestError, ConfigError) as exc:
        return SendResult(False, failure=Failure.NOT_SENT, error=f"not sent: {exc}")
    result = send(prepared, allow, before_send=before_send)
    if result.status is not None:
        faults.hit("http.answered")  # test-only crash point: answered, the answer not yet journaled
    return result


def _spec(svc: Context, run_id: str) -> WorkflowSpec:
    return WorkflowSpec.model_validate(svc.journal.run(run_id)["spec"])


def _dead_letter(svc: Context, ticket: TicketRow, action: TicketActionRow, number: int,
                 error: str | None = None) -> None:
    """Record the notification intent of an action that ended ``failed`` (R-M8).

    Args:
        number: how many attempts it made.
        error: its last attempt's error line (default: read from the journal).
    """
    notify = _spec(svc, ticket["run_id"]).notify
    if notify is None:
        return
    if error is None:
        attempts = svc.journal.ticket_attempts(ticket["ticket_id"])
        error = (attempts[-1]["error"] if attempts else None) or action["reason"]
    error = error or "failed"
    message = one_line(f"workrun: run {ticket['run_id']}: node {ticket['node_key']}: ticket {ticket['ticket_id']}: "
                       f"its action failed after {number} attempt(s): {error}")
    _notify(svc, notify, f"action:{ticket['ticket_id']}:{number}", ticket["run_id"], message,
            {"run_id": ticket["run_id"], "node_key": ticket["node_key"], "ticket_id": ticket["ticket_id"],
             "error": error}, ticket_id=ticket["ticket_id"])


def _notify(svc: Context, notify: HttpAction, subject: str, run_id: str, message: str,
            values: dict[str, Any], *, ticket_id: str | None = None, compensation_id: str | None = None) -> None:
    run = svc.journal.run(run_id)
    values = {"inputs": run["inputs"], "nodes": {}, "ticket_id": ticket_id or "",
              "compensation_id": compensation_id or "", **values}
    try:
        row = notification_row(new_id("ntf"), subject, run_id, message, notify, values, svc.now(),
                               ticket_id=ticket_id, compensation_id=compensation_id,
                               connectors=(run["spec"] or {}).get("connectors"))
    except KeyError as exc:
        svc.say(run_id, None, "warning", f"notification not sent ({subject}): {missing_value(exc)}")
        return
    svc.journal.add_notification(row)


def notify_dead_letters(svc: Context, run_id: str) -> None:
    """Record one notification intent per compensation and per ticket action of the run that ended
    ``failed`` (R-M8). The subject names the attempt that ended it, so a dead letter is notified once,
    also when the runner died between the failure and its notification (this sweep finds it)."""
    run = svc.journal.run(run_id)
    notify = WorkflowSpec.model_validate(run["spec"]).notify
    if notify is None:
        return
    for t in svc.journal.tickets(run_id):
        action = svc.journal.ticket_action(t["ticket_id"])
        if action is not None and action["status"] == "failed" and svc.journal.ticket_attempts(t["ticket_id"]):
            _dead_letter(svc, t, action, len(svc.journal.ticket_attempts(t["ticket_id"])))
    for c in svc.journal.compensations(run_id):
        if c["status"] != "failed":
            continue
        n = len(svc.journal.attempts(c["compensation_id"]))
        message = one_line(f"workrun: run {run_id}: node {c['node_key']}: compensation {c['compensation_id']} "
                           f"failed after {n} attempt(s): {c['reason'] or 'failed'}")
        _notify(svc, notify, f"compensation:{c['compensation_id']}:{n}", run_id, message,
                {"run_id": run_id, "node_key": c["node_key"] or "", "error": c["reason"] or ""},
                compensation_id=c["compensation_id"])


def recover_actions(svc: Context, run_id: str | None = None) -> None:
    """Settle action attempts and notifications a runner that died left in flight (R-R3, R-M8)."""
    for action in svc.journal.open_ticket_actions(run_id):
        if action["status"] != "running":
            continue
        tid = action["ticket_id"]
        ticket = svc.journal.ticket(tid)
        attempts = svc.journal.ticket_attempts(tid)
        last = attempts[-1] if attempts else None
        now = svc.now()
        if last is None or last["status"] not in ("starting", "sending"):
            svc.journal.set_ticket_action(tid, "pending", reason=action["reason"], at=now, seen="running")
            continue
        if last["status"] == "starting":
            svc.journal.finish_action_attempt(tid, last["number"], {
                "status": "not_started", "ended_at": now, "error": "the runner stopped before sending; nothing sent"},
                {"status": "pending", "updated_at": now})
            svc.say(ticket["run_id"], ticket["node_key"], "warning", f"ticket {tid}: action attempt {last['number']} "
                    "was not sent before the runner stopped; it will be sent")
            continue
        after: TicketActionRow
        if action["idempotent"]:
            after = {"status": "pending", "reason": "outcome of the last attempt unknown; re-sent (idempotent = true)",
                     "updated_at": now}
        else:
            after = {"status": "unknown", "updated_at": now,
                     "reason": "the request was sent when the runner stopped and its outcome is unknown: verify "
                               f"outside, then `workrun tickets confirm {tid} --done` or `--not-done`"}
        svc.journal.finish_action_attempt(tid, last["number"], {
            "status": "unknown", "ended_at": now, "error": "the runner stopped while the request was in flight"},
            after)
        svc.say(ticket["run_id"], ticket["node_key"], "warning", f"ticket {tid}: action {after['status']} "
                f"({after['reason']})")
    for n in svc.journal.notifications(run_id, ("sending",)):
        _finish_notification(svc, n, "unknown", None, "the runner stopped while it was being sent; not sent again")


def run_action(svc: Context, ticket_id: str, trigger: str = "auto") -> TicketActionRow:
    """Make one attempt of a ``pending`` action now; return the action row afterwards.

    Raises:
        ActionRefusedError: the action left ``pending`` meanwhile (nothing was written).
    """
    ticket = svc.journal.ticket(ticket_id)
    tid = ticket["ticket_id"]
    action = svc.journal.ticket_action(tid)
    assert action is not None
    attempts = svc.journal.ticket_attempts(tid)
    number = len(attempts) + 1
    svc.journal.start_action_attempt(tid, number, trigger=trigger, seen="pending", at=svc.now())
    svc.say(ticket["run_id"], ticket["node_key"], "info", f"ticket {tid}: action attempt {number} ({trigger}): "
            f"{action['request']['method']} {action['request']['url']}")
    answer = send_request(svc, ticket["run_id"], action["request"], timeout=action["timeout"], idempotency_key=tid,
                          before_send=lambda: svc.journal.action_sending(tid, number))
    now = svc.now()
    used = sum(1 for a in attempts if a["trigger"] == "auto" and a["status"] != "not_started") + (trigger == "auto")
    lost = answer.failure == Failure.UNKNOWN
    attempt: TicketAttemptRow = {"ended_at": now, "http_status": answer.status, "response_tail": answer.response_tail,
               "error": answer.error, "failure": answer.failure.value if answer.failure else None}
    if answer.smtp_code is not None:
        attempt["smtp_code"] = answer.smtp_code
    after: TicketActionRow
    if answer.succeeded:
        attempt["status"] = "succeeded"
        after = {"status": "succeeded", "result": answer.result(), "reason": None}
    elif lost and not action["idempotent"]:
        attempt["status"] = "unknown"
        after = {"status": "unknown", "reason": f"{answer.error}: verify outside, then `workrun tickets confirm "
                                                f"{tid} --done` or `--not-done`"}
    else:
        attempt["status"] = "failed"
        final = answer.failure is not None and answer.failure.final  # R-X3: trying again cannot help
        if trigger == "auto" and used < action["max_attempts"] and not final:
            delay = backoff_delay(action["backoff"], used)
            after = {"status": "pending", "next_attempt_at": now + delay,
                     "reason": f"attempt {number} failed ({answer.error}); next in {delay:.2g} s"}
        elif final:  # the stored request itself cannot be sent (R-X3): a retry would fail the same way
            after = {"status": "failed", "reason": f"{answer.error} (after {number} attempt(s)); sending it again "
                                                   f"cannot help: `workrun tickets resolve {tid}` or `terminate`"}
        else:
            after = {"status": "failed", "reason": f"{answer.error} (after {number} attempt(s)); `workrun tickets "
                                                   f"retry {tid}` sends it again"}
    stored = (action["request"] or {}).get("prepared") or {}
    write = None
    if stored.get("kind") == "update_data" and answer.succeeded:  # the write and its success: one transaction
        write = (ticket["run_id"], {**run_data(svc.journal.run(ticket["run_id"])), **stored["updates"]})
    svc.journal.finish_action_attempt(tid, number, attempt, after | {"updated_at": now}, run_data=write)
    level = "info" if after["status"] in ("succeeded", "pending") else "error"
    svc.say(ticket["run_id"], ticket["node_key"], level, f"ticket {tid}: action {after['status']}"
            + (f" ({after['reason']})" if after.get("reason") else ""))
    row = svc.journal.ticket_action(tid)
    assert row is not None
    if row["status"] == "failed":
        _dead_letter(svc, ticket, row, number, answer.error)
    return row


def run_actions(svc: Context, run_id: str) -> list[TicketActionRow]:
    """Run the run's pending actions until none is due any more (waiting out backoff); then send the
    run's pending notifications. Stops early when a stop is requested. Returns the actions afterwards."""
    recover_actions(svc, run_id)
    notify_dead_letters(svc, run_id)
    while not svc.stopping():
        due: list[TicketActionRow] = []
        later: list[TicketActionRow] = []
        for a in svc.journal.open_ticket_actions(run_id):
            if a["status"] != "pending":
                continue
            (later if a["next_attempt_at"] and a["next_attempt_at"] > svc.now() else due).append(a)
        for a in due:
            try:
                run_action(svc, a["ticket_id"])
            except ActionRefusedError:
                continue  # someone else moved it meanwhile
        send_notifications(svc, run_id)
        if not due and not later:
            break
        if not due:
            wait = min(a["next_attempt_at"] or 0.0 for a in later) - svc.now()
            if svc.stop_event.wait(max(0.0, min(wait, 1.0))):
                break
    send_notifications(svc, run_id)
    return [a for a in (svc.journal.ticket_action(t["ticket_id"]) for t in svc.journal.tickets(run_id)) if a]


def _finish_notification(svc: Context, n: NotificationRow, status: str, http_status: int | None,
                         error: str | None) -> None:
    now = svc.now()
    event = None
    if n["ticket_id"] and status != "sent":  # a notification that did not go out is recorded on its ticket (R-M8)
        event = event_row(n["ticket_id"], n["run_id"], SYSTEM_ACTOR, "notify",
                          {"status": status, "notification_id": n["notification_id"]}, now, error)
    svc.journal.finish_notification(n["notification_id"], status, at=now, http_status=http_status, error=error,
                                    event=event)
    if status != "sent":
        svc.say(n["run_id"], None, "warning", f"notification {n['notification_id']} {status}: {error}")


def send_notifications(svc: Context, run_id: str) -> None:
    """Send the run's notifications whose intent is journaled and not yet sent (R-M8). Never raises for
    a failed send: it is recorded (on the ticket when there is one)."""
    for n in svc.journal.notifications(run_id, ("pending",)):
        request = n["request"]
        nid = n["notification_id"]
        sending = False

        def about_to_send(nid: str = nid) -> None:
            nonlocal sending
            svc.journal.notification_sending(nid, at=svc.now())
            sending = True

        answer = send_request(svc, run_id, request, timeout=float(request.get("timeout") or 30),
                              idempotency_key=nid, before_send=about_to_send)
        row = cast(NotificationRow, {**n, "status": "sending" if sending else "pending"})
        if answer.succeeded:
            _finish_notification(svc, row, "sent", answer.status, None)
        else:
            lost = answer.failure == Failure.UNKNOWN
            _finish_notification(svc, row, "unknown" if lost else "failed", answer.status, answer.error)
