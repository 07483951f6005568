"""Manual repair (seed 000, SPEC §12): the operator's actions on tickets (R-M6, R-M7).

Allowed (anything else is refused with the reason, exit 2, nothing changed):

============ ==================================================================
action       allowed when
============ ==================================================================
resume       ticket ``pending`` and its run ``waiting`` or ``running``
retry        an action is configured and its status is ``failed``
note         always
resolve      ticket ``pending`` (the run is not advanced)
terminate    ticket ``pending``
confirm      the action's status is ``unknown``
============ ==================================================================

Every action writes a ``ticket_events`` row (OS user, time, action, arguments) in the
same transaction as the change it makes (R-O2). ``check_*`` functions only read: the
CLI calls them before taking the scheduler lock so that a refusal changes nothing.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from workrun.core.errors import ActionRefusedError, StaleStatusError, UsageError
from workrun.core.models import WorkflowSpec
from workrun.core.paths import keep_copy
from workrun.core.rows import TicketActionRow, TicketRow
from workrun.core.templates import template_refs
from workrun.effects.ticket_actions import run_action, send_notifications
from workrun.effects.ticket_records import event_row
from workrun.engine.driver import Engine
from workrun.engine.recovery import compensate_now, drive
from workrun.nodes import default_executors
from workrun.repair.operator import actor
from workrun.runner.context import Context
from workrun_sdk import _wire

__all__ = [
    "check",
    "check_result",
    "confirm",
    "note",
    "parse_result",
    "resolve",
    "resume",
    "retry",
    "terminate",
]

@contextmanager
def _as_refusal() -> Iterator[None]:
    """A ticket, node or action that changed between the check and the write is a refusal (exit 2), not a
    journal error: nothing was written."""
    try:
        yield
    except StaleStatusError as exc:
        raise ActionRefusedError(exc.detail, field="TICKET") from None


def _refuse(t: TicketRow, action: str, why: str) -> ActionRefusedError:
    return ActionRefusedError(f"cannot {action} {t['ticket_id']} ({t['status']}): {why}", field="TICKET")


def parse_result(text: str | None) -> Any:
    """The ``--result`` of ``tickets resume``: JSON text (default ``{}``).

    Raises:
        UsageError: not JSON.
    """
    if text is None:
        return {}
    try:
        return _wire.loads_strict(text)
    except ValueError as exc:
        raise UsageError(f"not JSON: {exc}", field="--result") from None


def _used_fields(spec: WorkflowSpec, key: str) -> list[tuple[str, list[str]]]:
    """``[(field of a downstream node, path into KEY's result)]`` for every template reading node ``key``."""
    out = []
    for other, node in spec.nodes.items():
        refs = [r for name, value in node.templated().items() for r in template_refs(value, f"nodes.{other}.{name}")]
        for field, ref in refs:
            parts = ref.split(".")
            if parts[0] == "nodes" and len(parts) >= 3 and parts[1] == key:
                out.append((field, parts[3:]))
    return out


def check_result(spec: WorkflowSpec, key: str, result: Any) -> None:
    """Check an operator's RESULT against the fields downstream templates read from node ``key`` (R-M6).

    Raises:
        UsageError: naming the downstream field and the missing path.
    """
    for field, path in _used_fields(spec, key):
        value = result
        for i, part in enumerate(path):
            if not isinstance(value, dict) or part not in value:
                missing = ".".join(path[: i + 1])
                raise UsageError(f"RESULT has no field {missing!r}, which {field} uses "
                                 f"({{{{ nodes.{key}.result.{'.'.join(path)} }}}})", field="--result")
            value = value[part]


def check(svc: Context, ticket_id: str, action: str, *, result: Any = None) -> TicketRow:
    """Refuse ``action`` on the ticket unless the table in the module doc allows it; read only.

    Returns:
        The ticket row.

    Raises:
        NotFoundError: unknown ticket id or ambiguous prefix.
        ActionRefusedError: not allowed now (the reason names what to do instead).
        UsageError: RESULT lacks a field a downstream template uses.
    """
    t = svc.journal.ticket(ticket_id)
    tid = t["ticket_id"]
    act = svc.journal.ticket_action(tid)
    if action in ("resume", "resolve", "terminate") and t["status"] != "pending":
        raise _refuse(t, action, f"only a pending ticket can be {'resumed' if action == 'resume' else action + 'd'}")
    if action == "resume":
        run = svc.journal.run(t["run_id"])
        if run["status"] not in ("waiting", "running"):
            raise _refuse(t, action, f"its run {run['run_id']} is {run['status']}")
        check_result(WorkflowSpec.model_validate(run["spec"]), t["node_key"], result)
    if action == "retry":
        if act is None:
            raise _refuse(t, action, f"no action is configured (on_failure = {t['policy']})")
        if act["status"] == "unknown":
            raise _refuse(t, action, f"its action's outcome is unknown: verify outside, then `workrun tickets confirm "
                          f"{tid} --done` or `--not-done` first")
        if act["status"] != "failed":
            raise _refuse(t, action, f"its action is {act['status']}; only a failed action can be retried")
        if not act["request"]:
            raise _refuse(t, action, f"its action cannot be sent: {act['reason']}")
    if action == "confirm":
        if act is None or act["status"] != "unknown":
            raise _refuse(t, action, "only an action whose outcome is unknown can be confirmed (its action is "
                          f"{act['status'] if act else 'not configured'})")
    return t


def resume(svc: Context, ticket_id: str, result: Any) -> str:
    """Mark the waiting node succeeded by an operator with ``result`` and continue its run now (R-M6).

    One transaction: the node ``succeeded`` (``handled``), the ticket ``resolved``, the run
    ``running`` again, the audit row. Then the run is driven like ``workrun run`` drives it.

    Returns:
        The run's status afterwards.

    Raises:
        ActionRefusedError, UsageError: see :func:`check`.
    """
    t = check(svc, ticket_id, "resume", result=result)
    tid, run_id, key = t["ticket_id"], t["run_id"], t["node_key"]
    who = actor()
    now = svc.now()
    with _as_refusal():
        svc.journal.resume_ticket(tid, result, event_row(tid, run_id, who, "resume", {"result": result}, now), at=now)
    svc.say(run_id, key, "info", f"{key}: succeeded: resumed past by operator {who} (ticket {tid}) with result "
            f"{json.dumps(result, ensure_ascii=False)}")
    return drive(svc, run_id)


def resolve(svc: Context, ticket_id: str, text: str | None = None) -> TicketRow:
    """Close a pending ticket by hand; the run is NOT advanced (seed 000: closing is not resuming).

    Returns:
        The ticket row afterwards.
    """
    t = check(svc, ticket_id, "resolve")
    tid = t["ticket_id"]
    who = actor()
    with _as_refusal():
        svc.journal.resolve_ticket(tid, event_row(tid, t["run_id"], who, "resolve", {}, svc.now(), text),
                                   at=svc.now())
    svc.say(t["run_id"], t["node_key"], "info", f"ticket {tid} resolved by {who}; node {t['node_key']} still waits "
            f"(resolving is not resuming): `workrun stop {t['run_id']}` ends the run, `workrun compensate "
            f"{t['run_id']}` then undoes it")
    return svc.journal.ticket(tid)


def terminate(svc: Context, ticket_id: str, *, compensate: bool = True, reason: str | None = None) -> str:
    """End the ticket's run: final failure with its calls compensated (R-C1), or ``terminated`` when
    ``compensate`` is False (R-M6). One transaction ends ticket, node and run; compensation follows.

    Returns:
        The run's status afterwards (``failed`` or ``terminated``).
    """
    t = check(svc, ticket_id, "terminate")
    tid, run_id, key = t["ticket_id"], t["run_id"], t["node_key"]
    who = actor()
    now = svc.now()
    args: dict[str, Any] = {"compensate": compensate, **({"reason": reason} if reason else {})}
    event = event_row(tid, run_id, who, "terminate", args, now, reason)
    engine = Engine(svc, default_executors())
    svc.say(run_id, key, "error", f"{key}: failed: ticket {tid} terminated by {who}"
            + ("" if compensate else " without compensation"))
    with _as_refusal():
        status = engine.finish(run_id, key, by_ticket=(tid, event), terminated_by=None if compensate else t)
    if compensate:
        compensate_now(svc, run_id)
    send_notifications(svc, run_id)
    return status


def retry(svc: Context, ticket_id: str) -> TicketActionRow:
    """Send the ticket's failed action again now (trigger ``operator``); earlier attempts are kept.

    Returns:
        The action row afterwards.
    """
    t = check(svc, ticket_id, "retry")
    tid = t["ticket_id"]
    who = actor()
    with _as_refusal():
        svc.journal.set_ticket_action(tid, "pending", reason=f"retry requested by {who}", at=svc.now(),
                                      seen="failed", event=event_row(tid, t["run_id"], who, "retry", {}, svc.now()))
    row = run_action(svc, tid, "operator")
    send_notifications(svc, t["run_id"])
    return row


def confirm(svc: Context, ticket_id: str, *, done: bool, text: str | None = None) -> TicketActionRow:
    """Settle an action whose outcome is unknown: ``done`` -> ``succeeded``; else ``failed`` (retryable).

    Returns:
        The action row afterwards.
    """
    t = check(svc, ticket_id, "confirm")
    tid = t["ticket_id"]
    who = actor()
    fields = {"status": "succeeded", "reason": f"confirmed done by {who}"} if done else \
        {"status": "failed", "reason": f"confirmed not done by {who}; `workrun tickets retry {tid}` sends it again"}
    with _as_refusal():
        svc.journal.set_ticket_action(tid, fields["status"], reason=fields["reason"], at=svc.now(), seen="unknown",
                                      event=event_row(tid, t["run_id"], who, "confirm", {"done": done}, svc.now(),
                                                      text))
    svc.say(t["run_id"], t["node_key"], "info", f"ticket {tid}: action {fields['status']} ({fields['reason']})")
    row = svc.journal.ticket_action(tid)
    assert row is not None
    return row


def note(svc: Context, ticket_id: str, text: str, attach: Path | None = None) -> TicketRow:
    """Add a note (and optionally a copy of a file, kept in the data dir) to a ticket's history.

    Raises:
        UsageError: the attachment is not a readable file.
    """
    t = svc.journal.ticket(ticket_id)
    tid = t["ticket_id"]
    stored = None
    if attach is not None:
        attach = Path(attach).absolute()
        if not attach.is_file():
            raise UsageError("attachment is not a readable file", file=str(attach), field="--attach")
        stored = str(keep_copy(attach, svc.data_dir / "attachments" / tid,
                               f"{len(svc.journal.ticket_events(tid)) + 1:03d}-{attach.name}"))
    svc.journal.record_ticket_event(event_row(tid, t["run_id"], actor(), "note",
                                              {"attach": str(attach) if attach else None}, svc.now(), text, stored))
    return svc.journal.ticket(tid)
