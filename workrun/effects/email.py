"""An email reverse action as a side effect (SPEC §19, R-K2): ``compensation = { email = { to, cc, body } }``.

Journaled as an HTTP reverse action is (``attempt.intent`` -> ``attempt.started`` just before the SMTP
exchange -> ``attempt.finished``, with the reply code as ``smtp_code``); subject "Workrun: reverse action
— RUN_ID NODE_KEY", ``Message-ID: <COMPENSATION_ID@workrun>`` for every attempt. The message is sent by
the run's scheduler itself (as a remote A2A task is), through the workflow's ``[smtp]``.
"""

from __future__ import annotations

from typing import Any

from workrun.core.models import HttpRequestSpec, SmtpSpec
from workrun.core.outcomes import Failure
from workrun.core.rows import AttemptRow, CompensationRow, OperationRow
from workrun.core.templates import missing_value
from workrun.effects.actions import action_lookup, finish_http_attempt, not_sent, recover_http_attempt
from workrun.effects.base import ActionOnly
from workrun.effects.operations import Attempted
from workrun.outbound.http import RequestError, allow_from_env, parse_allow
from workrun.outbound.mail import prepare_mail, send_mail, wait_bound
from workrun.runner.context import Context

__all__ = ["Email", "message_of"]


def message_of(svc: Context, comp: CompensationRow, op: OperationRow) -> tuple[dict[str, Any], SmtpSpec, Any]:
    """The reverse action's message, filled once, the run's ``[smtp]`` and its guard's allow list.

    Raises:
        KeyError: a body template has no value. RequestError: the workflow has no ``[smtp]``.
    """
    action = HttpRequestSpec.model_validate(comp["context"]["reverse_action"])
    run = svc.journal.run(comp["run_id"])
    spec = run["spec"] or {}
    if not spec.get("smtp") or action.email is None:
        raise RequestError("an email action needs [smtp] in its workflow")
    smtp = SmtpSpec.model_validate(spec["smtp"])
    allow = parse_allow(list(spec.get("http_allow") or [])) + allow_from_env()
    mail = prepare_mail(action.email, subject=f"Workrun: reverse action — {comp['run_id']} {comp['node_key']}",
                        message_id=f"<{comp['compensation_id']}@workrun>", lookup=action_lookup(svc, comp, op))
    return mail, smtp, allow


class Email(ActionOnly):
    """Email reverse actions (see :class:`~workrun.effects.base.Effect`)."""

    name = "email"

    def run_attempt(self, svc: Context, comp: CompensationRow, op: OperationRow, trigger: str) -> Attempted:
        """One attempt: intent, then "about to send" once the guard let the SMTP host through, then the outcome."""
        cid = comp["compensation_id"]
        attempt = self.begin_attempt(svc, comp, trigger)
        if attempt is None:
            return Attempted(svc.journal.compensation(cid), None)
        number = attempt["number"]
        try:
            mail, smtp, allow = message_of(svc, comp, op)
        except KeyError as exc:
            return not_sent(svc, comp, attempt, missing_value(exc), Failure.MISSING_VALUE)
        except RequestError as exc:
            return not_sent(svc, comp, attempt, f"not sent: {exc}")

        timeout = wait_bound(smtp, comp["timeout"])  # the action's, or [smtp]'s

        def about_to_send() -> None:
            svc.journal.attempt_running(cid, number, pid=None, proc_start=None, deadline=svc.now() + timeout)

        svc.say(comp["run_id"], comp["node_key"], "info",
                f"compensation {cid} of {comp['node_key']}: attempt {number}: email to {', '.join(mail['to'])}")
        got = send_mail(mail, smtp, allow, before_send=about_to_send, timeout=timeout)
        return Attempted(finish_http_attempt(svc, comp, attempt, got), got.failure)

    def recover_attempt(self, svc: Context, comp: CompensationRow, attempt: AttemptRow, *,
                        claim_wait: float) -> CompensationRow:
        """``starting``: never sent (not started); ``running``: it may have been: ``unknown`` (R-R3). Decided by
        the attempt's status, also on a shared journal: the scheduler sends an email itself, no claim records
        it (a worker taking the run over once asked the claims, found none and tried ``running ->
        not_started``)."""
        return recover_http_attempt(svc, comp, attempt, dispatched=False)

    def run_again(self, svc: Context, comp: CompensationRow, op: OperationRow) -> str | None:
        """Send the message once more, the same Message-ID (a receiver de-duplicates), outside the journal."""
        try:
            mail, smtp, allow = message_of(svc, comp, op)
        except (KeyError, RequestError) as exc:
            return str(exc)
        got = send_mail(mail, smtp, allow)
        return None if got.succeeded else (got.error or "failed")
