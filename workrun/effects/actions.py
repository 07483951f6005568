"""What every reverse action (HTTP request, e-mail, SMS, run data) shares: its attempt settings, the values
its templates may name, and journaling an attempt's :class:`~workrun.outbound.http.SendResult` (R-H7, R-C7,
R-R3, R-R4). Each kind's module prepares and sends; this one decides what the outcome means for the
compensation, so the kinds never import each other.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from workrun.core import metrics, tracing
from workrun.core.backoff import backoff_delay
from workrun.core.outcomes import Failure
from workrun.core.rows import AttemptRow, CompensationRow, OperationRow
from workrun.effects.operations import Attempted
from workrun.outbound.http import SendResult
from workrun.runner.context import Context

__all__ = ["action_lookup", "walk", "finish_http_attempt", "knobs", "not_sent", "recover_http_attempt"]


def knobs(max_retries: int, timeout: float, backoff: float, idempotent: bool) -> dict[str, Any]:
    """Attempt settings as the compensation record stores them (R-C7)."""
    return {"max_attempts": max_retries + 1, "timeout": timeout, "backoff": backoff, "idempotent": int(idempotent)}


def walk(value: Any, parts: list[str], ref: str) -> Any:
    """``value[parts[0]][parts[1]]…``, for a template reference ``ref`` such as ``original.result.id``.

    Raises:
        KeyError: ``ref``, when a part is missing or a value on the way is not an object.
    """
    for part in parts:
        if not isinstance(value, dict) or part not in value:
            raise KeyError(ref)
        value = value[part]
    return value


def action_lookup(svc: Context, comp: CompensationRow, op: OperationRow) -> Callable[[str], Any]:
    """The values a reverse action's templates may name (R-X1, R-K4): ``original.input…``/``original.result…``
    (the compensated call), ``operation_id``, ``compensation_id``, ``run_id``, ``node_key``, ``data.NAME`` (the
    run's data now), ``inputs.NAME`` and ``error`` (the run's reason and the last failed node's error).
    The lookup raises ``KeyError(ref)`` for anything else."""
    run = svc.journal.run(comp["run_id"])

    def error_line() -> str:
        reason = run["reason"] or f"run {run['status']}"
        # the node that failed the run first: one whose failure no policy handled (a handled one, e.g. by a
        # fallback_action, did not fail the run: adversarial review), earliest first; then the handled ones
        nodes = sorted((n for n in svc.journal.nodes(run["run_id"]) if n["status"] == "failed"),
                       key=lambda n: (bool(n["handled"]), n["ended_at"] or 0.0, n["position"]))
        for key in [n["node_key"] for n in nodes]:
            errs = [o["error"] for o in svc.journal.operations(run["run_id"], key) if o["error"]]
            if errs:
                return f"{reason}: {errs[-1]}"
        return reason

    def lookup(ref: str) -> Any:
        parts = ref.split(".")
        if parts[0] == "original" and len(parts) >= 2:
            base = op["input"] if parts[1] == "input" else op["result"]
            return walk(base, parts[2:], ref)
        if ref == "operation_id":
            return op["operation_id"]
        if ref == "compensation_id":
            return comp["compensation_id"]
        if ref == "run_id":
            return comp["run_id"]
        if ref == "node_key":
            return comp["node_key"]
        if parts[0] == "data" and len(parts) == 2:  # the run's data now (R-K4)
            return (svc.journal.run(comp["run_id"]).get("data") or run["inputs"] or {}).get(parts[1])
        if ref == "error":
            return error_line()
        if parts[0] == "inputs" and len(parts) == 2 and parts[1] in (run["inputs"] or {}):
            return run["inputs"][parts[1]]
        raise KeyError(ref)

    return lookup


def not_sent(svc: Context, comp: CompensationRow, attempt: AttemptRow, error: str,
             failure: Failure = Failure.NOT_SENT) -> Attempted:
    """Journal an attempt that sent nothing (a template without a value, a refused request) as
    :func:`finish_http_attempt` does; the compensation row afterwards and ``failure``."""
    return Attempted(finish_http_attempt(svc, comp, attempt, SendResult(False, failure=failure, error=error)), failure)


def finish_http_attempt(svc: Context, comp: CompensationRow, attempt: AttemptRow,
                        got: SendResult, run_data: tuple[str, dict[str, Any]] | None = None) -> CompensationRow:
    """Journal a reverse action attempt and the compensation's new status in one transaction (``attempt.finished``).

    - 2xx: ``succeeded`` (result ``{status, headers, body}`` saved; never sent again, R-R2)
    - failed (guard, connection, non-2xx, bounds) with attempts left: ``pending`` after backoff; none left, or
      an operator's retry: ``failed`` (dead letter)
    - sent and unanswered: ``unknown`` (verify outside); when the action is idempotent it is re-sent with
      the same Idempotency-Key while attempts are left, and ends ``unknown`` when none are

    Returns:
        The compensation row afterwards.
    """
    cid = comp["compensation_id"]
    number = attempt["number"]
    now = svc.now()
    previous = [x for x in svc.journal.attempts(cid) if x["number"] != number]
    used = sum(1 for x in previous if x["status"] in ("failed", "unknown"))
    exhausted = used + 1 >= int(comp["max_attempts"]) or (got.failure is not None and got.failure.final)
    next_at: float | None = None
    result = None
    if got.succeeded:
        status, comp_status, reason, result = "succeeded", "succeeded", None, got.result()
    elif got.failure is Failure.UNKNOWN:
        status = "unknown"
        if comp["idempotent"] and not exhausted and attempt["trigger"] != "operator":
            delay = backoff_delay(float(comp["backoff"]), used + 1)
            next_at = now + delay
            comp_status, reason = "pending", (f"attempt {number}: {got.error}; re-sent in {delay:.2g} s with the same "
                                              "Idempotency-Key because the action is idempotent")
        else:
            comp_status, reason = "unknown", (f"attempt {number} was sent but not answered ({got.error}): verify "
                                              f"outside, then `workrun compensations confirm {cid} --done` or "
                                              "`--not-done`")
    else:
        status = "failed"
        what = got.error or "failed"
        if attempt["trigger"] == "operator":
            comp_status, reason = "failed", (f"attempt {number} (operator retry) failed ({what}): needs an operator "
                                             f"(`workrun compensations show {cid}`)")
        elif exhausted and got.failure is not None and got.failure.final and used + 1 < int(comp["max_attempts"]):
            comp_status, reason = "failed", (f"attempt {number} failed ({what}); not retried (a failure no new "
                                             f"attempt can change): needs an operator (`workrun compensations show "
                                             f"{cid}`)")
        elif exhausted:
            comp_status, reason = "failed", (f"attempt {number} failed ({what}); all {comp['max_attempts']} "
                                             f"attempt(s) failed: needs an operator (`workrun compensations show "
                                             f"{cid}`)")
        else:
            delay = backoff_delay(float(comp["backoff"]), used + 1)
            next_at = now + delay
            comp_status, reason = "pending", f"attempt {number} failed ({what}); retrying in {delay:.2g} s"
    svc.journal.finish_attempt(cid, number, status=status, failure=got.failure, error=got.error, result=result, at=now,
                               compensation_status=comp_status, reason=reason, next_attempt_at=next_at,
                               http_status=got.status, response_tail=got.response_tail, smtp_code=got.smtp_code,
                               run_data=run_data if got.succeeded else None)
    # by the action's kind as the workflow wrote it (R-F4): an email with no SMTP reply, or an update_data that
    # sends nothing, is no http attempt
    kind = ((comp.get("context") or {}).get("reverse_action") or {}).get("kind") or "http"
    metrics.count_attempt(str(kind), status)
    metrics.count_compensation(comp_status)
    after = svc.journal.compensation(cid)
    if tracing.enabled():  # an HTTP request (http, sms) is an http.request span under its attempt (R-F5)
        action = (comp.get("context") or {}).get("reverse_action") or {}
        sent = got.sent or got.status is not None
        method = action.get("method") if action.get("kind") in (None, "http", "sms") and sent else None
        tracing.attempt_span(after, svc.journal.attempts(cid)[-1], request_method=method)
    return after


def recover_http_attempt(svc: Context, comp: CompensationRow, attempt: AttemptRow, *,
                         dispatched: bool = True) -> CompensationRow:
    """Settle a reverse action attempt left in flight by a runner that died (R-R3, R-R4).

    ``starting``: nothing was sent -> ``not_started``, the compensation ``pending`` again (not counted).
    ``running``: it may have been sent -> ``unknown`` (re-sent only when the action is idempotent).
    The runner's transport decides (on a shared journal, the request's claim); for an action the scheduler
    sends itself (``dispatched=False``: an email), which no claim records, the attempt's own status does.
    """
    cid = comp["compensation_id"]
    number = attempt["number"]
    got = svc.runner.settle_request(f"{cid}.{number}", attempt["status"]) if dispatched \
        else SendResult.left_in_flight(attempt["status"])
    if got.failure is not Failure.NOT_STARTED:
        return finish_http_attempt(svc, comp, attempt, got)
    svc.journal.finish_attempt(cid, number, status="not_started", failure=Failure.NOT_STARTED,
                               error="not started: the runner stopped before it was sent", result=None, at=svc.now(),
                               compensation_status="pending",
                               reason=f"attempt {number} was never sent; it will run on resume")
    return svc.journal.compensation(cid)
