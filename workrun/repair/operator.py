"""Operator actions on compensations (R-O1..R-O3): retry, note, resolve, confirm. Each is audited.

Allowed statuses (anything else is refused with the reason, exit 2):

========== ===================================================================
action     allowed when the compensation is
========== ===================================================================
retry      ``failed``, ``blocked`` (not merely held back), ``pending``
note       any status
resolve    ``failed``, ``blocked``, ``unknown``, ``pending``
confirm    ``unknown`` only; ``--done`` -> ``succeeded``; ``--not-done`` -> ``failed`` (then retry)
========== ===================================================================

Status changes only through a real attempt's outcome or one of these explicit
actions (R-O3); every action is an ``events`` row with OS user, time, action
and arguments (R-O2), written in the same transaction as the change it makes.
"""

from __future__ import annotations

import getpass
from pathlib import Path
from typing import Any

from workrun.compensation import compensate_run, refresh_holds
from workrun.core import settings
from workrun.core.errors import ActionRefusedError, StaleStatusError, UsageError
from workrun.core.paths import keep_copy
from workrun.core.rows import CompensationRow, EventRow
from workrun.core.states import COMPENSATION_DONE
from workrun.runner.context import Context

__all__ = ["actor", "confirm", "note", "resolve", "retry", "retry_refusal"]


def actor() -> str:
    """Who performs an action (R-O2): the OS user, or ``WORKRUN_ACTOR`` when a front end sets it.

    The dashboard runs the CLI's own commands with ``WORKRUN_ACTOR=ui:<OS user>`` (R-U4).

    Raises:
        ConfigError: ``WORKRUN_ACTOR`` is empty, longer than 200 characters or has control characters.
    """
    given = settings.current().actor  # checked with every WORKRUN_* setting (SPEC §17)
    if given is not None:
        return given
    try:
        return getpass.getuser()
    except Exception:
        return "unknown"


def _event(svc: Context, comp: CompensationRow, action: str, args: dict[str, Any], text: str | None = None,
           attachment: str | None = None) -> EventRow:
    return {"compensation_id": comp["compensation_id"], "run_id": comp["run_id"], "at": svc.now(), "actor": actor(),
            "action": action, "args": args, "text": text, "attachment": attachment}


def _refuse(comp: CompensationRow, action: str, why: str) -> ActionRefusedError:
    return ActionRefusedError(f"cannot {action} {comp['compensation_id']} ({comp['status']}): {why}",
                              field="COMPENSATION_ID")


def _conditional(svc: Context, cid: str, status: str, *, reason: str, seen: str, event: EventRow,
                 held_back_by: list[str] | None = None, accept_code_change: bool = False,
                 clear_schedule: bool = True) -> None:
    """Write an operator's status change with its audit event, only if the status is still ``seen`` (R-O2, R-O3).

    Raises:
        ActionRefusedError: someone changed the compensation meanwhile; nothing was written.
    """
    try:
        svc.journal.set_compensation_status(cid, status, reason=reason, at=svc.now(), seen=seen,
                                            held_back_by=held_back_by, clear_schedule=clear_schedule,
                                            accept_code_change=accept_code_change, event=event)
    except StaleStatusError as exc:
        raise ActionRefusedError(exc.detail, field="COMPENSATION_ID") from None


def retry_refusal(comp: CompensationRow, *, lasting_only: bool = False) -> ActionRefusedError | None:
    """Why the compensation row ``comp`` cannot be retried now (done, running, unknown outcome, held back), or
    None.

    ``lasting_only``: only the refusals nothing but a person changes (done; an unknown outcome). ``compensations
    retry`` asks for those before it takes the scheduler lock, so they are an exit 2 at once, also for the
    dashboard, which reports a command that holds the lock as started (R-U4); ``running`` and held back may
    change when the command resumes what a dead runner left (after the lock), so they are asked only then."""
    cid, status = comp["compensation_id"], comp["status"]
    if status in COMPENSATION_DONE:
        return _refuse(comp, "retry", "it is already done; nothing to retry")
    if lasting_only and status != "unknown":
        return None
    if status == "running":
        return _refuse(comp, "retry", "an attempt is running now")
    if status == "unknown":
        return _refuse(comp, "retry", "its last attempt's outcome is unknown: verify outside, then "
                       f"`workrun compensations confirm {cid} --done` or `--not-done` first")
    if status == "blocked" and comp["held_back_by"]:
        return _refuse(comp, "retry", f"{comp['reason']}; retry or resolve those first")
    return None


def retry(svc: Context, compensation_id: str, *, accept_code_change: bool = False) -> CompensationRow:
    """Run a new attempt now (trigger ``operator``), then whatever it releases (SPEC §10).

    Returns:
        The compensation row afterwards.

    Raises:
        NotFoundError: unknown id or ambiguous prefix.
        ActionRefusedError: status does not allow a retry, or it is held back by others.
    """
    comp = svc.journal.compensation(compensation_id)
    cid = comp["compensation_id"]
    status = comp["status"]
    refusal = retry_refusal(comp)
    if refusal is not None:
        raise refusal
    _conditional(svc, cid, "pending", reason=f"retry requested by {actor()}", seen=status,
                 held_back_by=comp["held_back_by"], accept_code_change=accept_code_change,
                 event=_event(svc, comp, "retry", {"accept_code_change": accept_code_change}))
    svc.say(comp["run_id"], comp["node_key"], "info", f"compensation {cid} of {comp['node_key']}: retry requested by "
            f"{actor()}" + (" (accepting today's code)" if accept_code_change else ""))
    compensate_run(svc, comp["run_id"], only={cid})
    return svc.journal.compensation(cid)


def note(svc: Context, compensation_id: str, text: str, attach: Path | None = None) -> CompensationRow:
    """Add a note (and optionally a copy of a file) to a compensation's history.

    Raises:
        UsageError: the attachment is not a readable file.
    """
    comp = svc.journal.compensation(compensation_id)
    stored = None
    if attach is not None:
        attach = Path(attach).absolute()  # the audit row names the file unambiguously
        if not attach.is_file():
            raise UsageError("attachment is not a readable file", file=str(attach), field="--attach")
        stored = str(keep_copy(attach, svc.data_dir / "attachments" / comp["compensation_id"],
                               f"{len(svc.journal.events(comp['compensation_id'])) + 1:03d}-{attach.name}"))
    svc.journal.record_event(_event(svc, comp, "note", {"attach": str(attach) if attach else None}, text, stored))
    return svc.journal.compensation(comp["compensation_id"])


def resolve(svc: Context, compensation_id: str, text: str | None = None) -> dict[str, Any]:
    """Mark a compensation fixed by hand: it becomes ``succeeded`` and releases what it held back.

    Returns:
        The compensation row afterwards, plus ``released``: ids of held-back compensations now ``pending``.

    Raises:
        ActionRefusedError: already done, or an attempt is running.
    """
    comp = svc.journal.compensation(compensation_id)
    cid = comp["compensation_id"]
    if comp["status"] in COMPENSATION_DONE | {"running"}:
        raise _refuse(comp, "resolve", "it is already done" if comp["status"] != "running"
                      else "an attempt is running now")
    who = actor()
    reason = f"resolved by hand by {who}" + (f": {text}" if text else "")
    _conditional(svc, cid, "succeeded", reason=reason, seen=comp["status"],
                 event=_event(svc, comp, "resolve", {"previous_status": comp["status"]}, text))
    svc.say(comp["run_id"], comp["node_key"], "info", f"compensation {cid} of {comp['node_key']}: succeeded ({reason})")
    _, _, released = refresh_holds(svc, comp["run_id"])
    return {**svc.journal.compensation(cid), "released": sorted(released)}


def confirm(svc: Context, compensation_id: str, *, done: bool, text: str | None = None) -> dict[str, Any]:
    """Settle an ``unknown`` compensation after checking outside (R-R3).

    ``done`` -> ``succeeded`` (releases what it held back); not done -> ``failed``, retryable.

    Returns:
        The compensation row afterwards, plus ``released``: ids of held-back compensations now ``pending``.

    Raises:
        ActionRefusedError: the compensation is not ``unknown``.
    """
    comp = svc.journal.compensation(compensation_id)
    cid = comp["compensation_id"]
    if comp["status"] != "unknown":
        raise _refuse(comp, "confirm", "only a compensation whose outcome is unknown can be confirmed")
    who = actor()
    if done:
        fields = {"status": "succeeded", "reason": f"confirmed done by {who}"}
    else:
        fields = {"status": "failed", "reason": f"confirmed not done by {who}; `workrun compensations retry {cid}` "
                  "runs it again"}
    _conditional(svc, cid, fields["status"], reason=fields["reason"], seen="unknown", clear_schedule=False,
                 event=_event(svc, comp, "confirm", {"done": done}, text))
    svc.say(comp["run_id"], comp["node_key"], "info", f"compensation {cid} of {comp['node_key']}: {fields['status']} "
            f"({fields['reason']})")
    _, _, released = refresh_holds(svc, comp["run_id"])
    return {**svc.journal.compensation(cid), "released": sorted(released)}
