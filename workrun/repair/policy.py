"""The ticket policy (SPEC §12, R-M1..R-M5): what happens when a node fails and its ``on_failure`` hands it to
a person. The engine knows no ticket: every surface hands this function in with the context
(``Services(open_ticket=…)``), and the engine calls it through :class:`~workrun.runner.context.Context`.
"""

from __future__ import annotations

from typing import Any

from workrun.core.models import FailurePolicy, WorkflowSpec
from workrun.core.outcomes import NodeOutcome
from workrun.core.rows import TicketAttemptRow
from workrun.core.templates import missing_value, reads_data
from workrun.effects.ticket_records import (
    SYSTEM_ACTOR,
    action_row,
    data_updates,
    event_row,
    new_ticket_id,
    notification_row,
    one_line,
    render_request,
    run_data,
    ticket_message,
    ticket_row,
)
from workrun.outbound.http import RequestError
from workrun.runner.context import Context, new_id

__all__ = ["open_ticket"]


def open_ticket(svc: Context, run_id: str, spec: WorkflowSpec, key: str, policy: FailurePolicy,
                outcome: NodeOutcome, context: dict[str, Any]) -> NodeOutcome:
    """Hand a failed node to a person (R-M1..R-M5): one transaction holds the ticket, the node's new
    status (``waiting``; handled for ``fallback_action``; failed for ``terminate``), the action job
    when the policy has one, the opening event and the notification intent (R-M8)."""
    kind = policy.exhausted
    now = svc.now()
    tid = new_ticket_id()
    error = one_line(outcome.error) or "failed"
    values = {**context, "run_id": run_id, "node_key": key, "ticket_id": tid, "error": error}
    status = {"notify": "pending", "compensate": "pending", "fallback_action": "resolved"}.get(kind, "terminated")
    events = [event_row(tid, run_id, SYSTEM_ACTOR, "open", {"policy": kind, "status": status}, now, error)]
    action = None
    action_note = ""
    new_data: dict[str, Any] | None = None
    if policy.action is not None and policy.action.kind == "update_data" or reads_data(policy.written()) \
            or (spec.notify is not None and reads_data(spec.notify.model_dump())):
        values["data"] = run_data(svc.journal.run(run_id))
    attempt: TicketAttemptRow | None = None
    if policy.action is not None and policy.action.kind == "update_data" and kind == "fallback_action":
        # a local write: applied in the transaction that marks the node handled (R-K4); its action job is done
        # there too, with its one attempt, so the ticket shows it as any action (R-M4)
        action = action_row(tid, run_id, policy.action, {}, now)
        try:
            updates = data_updates(policy.action, values)
            new_data = {**values["data"], **updates}
            events.append(event_row(tid, run_id, SYSTEM_ACTOR, "update_data", {"fields": list(updates)}, now))
            action["status"], action["result"] = "succeeded", {"updated": updates}
            action["request"] = {"method": "DATA", "url": "data:", "headers": {}, "body": updates}
            attempt = {"ticket_id": tid, "number": 1, "trigger": "auto", "status": "succeeded", "started_at": now,
                       "ended_at": now}
            action_note = "; its data update is applied"
        except KeyError as exc:
            action["status"], action["reason"] = "failed", f"{missing_value(exc)}: the data update cannot be made"
            action_note = f"; its data update cannot be made ({missing_value(exc)})"
    elif policy.action is not None:
        action = action_row(tid, run_id, policy.action, {}, now)
        try:
            what = "compensation needs attention" if kind == "compensate" else "action"
            action["request"] = render_request(policy.action, values, idempotency_key=tid,
                                               connectors=spec.connectors,
                                               subject=f"Workrun: {what} — {run_id} {key}")
            action_note = "; its action is registered"
        except RequestError as exc:
            action["status"], action["reason"] = "failed", f"{exc}: the action cannot be sent"
            action_note = f"; its action cannot be sent ({action['reason']})"
        except KeyError as exc:
            action["status"], action["reason"] = "failed", f"{missing_value(exc)}: the action cannot be sent"
            action_note = f"; its action cannot be sent ({action['reason']})"
    notification = None
    if spec.notify is not None:
        try:
            notification = notification_row(new_id("ntf"), f"ticket:{tid}", run_id,
                                            ticket_message(run_id, key, tid, error, status), spec.notify,
                                            values, now, ticket_id=tid, connectors=spec.connectors)
        except KeyError as exc:
            events.append(event_row(tid, run_id, SYSTEM_ACTOR, "notify", {"status": "failed"}, now,
                                    f"notification not sent: {missing_value(exc)}"))
    svc.journal.open_ticket(ticket_row(tid, run_id, key, kind, status, error, now),
                            node_status="waiting" if status == "pending" else "failed",
                            handled=kind == "fallback_action", at=now, events=events, action=action,
                            notification=notification, run_data=new_data, attempt=attempt)
    if status == "pending":
        svc.say(run_id, key, "error", f"{key}: failed ({error}); waiting for a person: ticket {tid} "
                f"(on_failure = {kind}){action_note}. `workrun tickets resume {tid}` or "
                f"`workrun tickets terminate {tid}`")
        return NodeOutcome("waiting", error=outcome.error)
    if status == "resolved":
        svc.say(run_id, key, "warning", f"{key}: failed ({error}); handled by on_failure = fallback_action: "
                f"ticket {tid} resolved{action_note}; the run goes on")
        return NodeOutcome("succeeded", None, outcome.error)
    svc.say(run_id, key, "error", f"{key}: failed ({error}); on_failure = terminate: the run ends "
            f"terminated (ticket {tid}); nothing is compensated automatically")
    return NodeOutcome("terminated", error=outcome.error)
