"""An HTTP request as a side effect (R-H1, R-H2, R-H6, R-H7): an http node's call and an HTTP reverse action's
attempt (an http node's ``compensation`` table, or an App's ``compensation = { http = … }``).

A reverse action attempt is journaled as ``attempt.intent`` -> ``attempt.started`` (the guard let it
through, just before it is sent) -> ``attempt.finished``; its Idempotency-Key is the compensation id, and
its ledger row records ``http_status`` and ``response_tail`` (the first 2 KiB of the response body,
secrets redacted, R-X2) instead of an exit code and stderr (R-H7). Templates are filled once, when the
attempt prepares its request (R-X1); an empty value in the URL is never sent, final (R-X3).

Requests go out through the runner's transport (``svc.runner.send_request``): from this process, or
from any worker's executor on a shared journal (R-S2); the same transport settles one a dead runner left
in flight (``svc.runner.settle_request``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from workrun import metrics, tracing
from workrun.backoff import backoff_delay
from workrun.effects.app_call import knobs
from workrun.effects.base import Planned, begin_attempt
from workrun.errors import ConfigError
from workrun.models import AppSpec, HttpNode, HttpRequestSpec
from workrun.operations import Attempted
from workrun.outbound import (
    PreparedRequest,
    RequestError,
    SendResult,
    UnsafeRequestError,
    UrlTemplate,
    allow_from_env,
    connector_of,
    parse_allow,
    parse_url,
    prepare,
    whole_reference,
)
from workrun.outcomes import Failure
from workrun.services import Services
from workrun.templates import missing_value

__all__ = ["KIND", "HttpRequest", "finish_http_attempt", "finish_request_operation", "recover_http_attempt",
           "reverse_action_of", "run_http_attempt"]

KIND = "http"  # the kind of an http node's operations


def _walk(value: Any, parts: list[str], ref: str) -> Any:
    for part in parts:
        if not isinstance(value, dict) or part not in value:
            raise KeyError(ref)
        value = value[part]
    return value


def finish_request_operation(svc: Services, op_id: str, got: SendResult) -> dict[str, Any]:
    """Journal an http node's request outcome (``op.finished``): 2xx ``succeeded`` with ``{status, headers,
    body}``; sent and unanswered ``unknown``; anything else ``failed``. Returns the operation row."""
    if got.succeeded:
        svc.journal.finish_operation(op_id, status="succeeded", result=got.result(), at=svc.now())
    else:
        svc.journal.finish_operation(op_id, status="unknown" if got.failure is Failure.UNKNOWN else "failed",
                                     failure=got.failure, error=got.error, at=svc.now())
    row = svc.journal.operation(op_id)
    begun = row.get("started_at") or row.get("created_at")
    metrics.count_call(KIND, str(row["status"]), (row["ended_at"] - begun) if begun and row.get("ended_at") else None)
    if tracing.enabled():
        tracing.operation_span(row)
    return row


class HttpRequest:
    """HTTP requests: sent through the runner's transport, settled from what the transport knows (see
    :class:`~workrun.effects.base.Effect`)."""

    name = KIND

    def settle_operation(self, svc: Services, op: dict[str, Any], *, claim_wait: float) -> dict[str, Any]:
        """``starting``: the guard had not let it out, nothing was sent -> ``failed`` (not started: it may be
        sent). ``running``: it may have been sent -> ``unknown`` (never re-sent unless the node is idempotent).
        On a shared journal the request's claim decides instead (R-S2, R-R3)."""
        del claim_wait
        got = svc.runner.settle_request(op["operation_id"], op["status"])
        return finish_request_operation(svc, op["operation_id"], got)

    def end_operation(self, svc: Services, op: dict[str, Any]) -> dict[str, Any]:
        """No process to end: its request was sent or not (as :meth:`settle_operation`)."""
        return self.settle_operation(svc, op, claim_wait=0.0)

    def describe(self, op: dict[str, Any]) -> str:
        return f"http node {op['node_key']}"

    def plan(self, op: dict[str, Any]) -> Planned | None:
        """An http node's ``compensation`` table or an App's ``compensation = { http = … }`` (R-H6)."""
        action, settings = reverse_action_of(op)
        if action is None:
            return None
        return Planned(self.name, {"reverse_action": action.model_dump(mode="json")}, settings)

    def no_compensation(self, op: dict[str, Any]) -> str:
        return f"http node {op['node_key']!r} has no reverse action (compensation table)"

    def run_attempt(self, svc: Services, comp: dict[str, Any], op: dict[str, Any], trigger: str) -> Attempted:
        return run_http_attempt(svc, comp, op, trigger)

    def recover_attempt(self, svc: Services, comp: dict[str, Any], attempt: dict[str, Any], *,
                        claim_wait: float) -> dict[str, Any]:
        del claim_wait
        return recover_http_attempt(svc, comp, attempt)

    def run_again(self, svc: Services, comp: dict[str, Any], op: dict[str, Any]) -> str | None:
        """Send the reverse action once more, prepared afresh with the same Idempotency-Key (the compensation
        id), outside the journal; None on a 2xx answer."""
        action = HttpRequestSpec.model_validate(comp["context"]["reverse_action"])
        run = svc.journal.run(comp["run_id"])
        spec_allow = list((run["spec"] or {}).get("http_allow") or [])
        try:
            request = _prepare_action(svc, action, comp, op, run["spec"] or {})
        except KeyError as exc:
            return missing_value(exc)
        except (RequestError, ConfigError) as exc:
            return str(exc)
        got = svc.runner.send_request(f"{comp['compensation_id']}.again", request, spec_allow, {},
                                      before_send=lambda: None)
        return None if got.succeeded else (got.error or "failed")


# -- reverse actions --------------------------------------------------------------------------------------------------


def reverse_action_of(op: dict[str, Any]) -> tuple[HttpRequestSpec | None, dict[str, Any]]:
    """The reverse action of an operation's config snapshot, and its attempt settings (R-H6, R-C7).

    Returns:
        ``(action or None, {"max_attempts", "timeout", "backoff", "idempotent"})``: an http node's
        ``compensation`` table, or an App's ``compensation = { http = {...} }`` (the App's compensation
        settings apply); ``(None, {})`` when the operation has no reverse action.
    """
    if op["kind"] == KIND:
        node = HttpNode.model_validate(op["config"])
        action = node.compensation
        if action is None:
            return None, {}
        written = action.model_dump(include={"kind", "method", "url", "headers", "body", "connector", "email",
                                              "update_data"})
        return HttpRequestSpec.model_validate(written), \
            knobs(action.max_retries, action.timeout, action.backoff, action.idempotent)
    app = AppSpec.model_validate(op["config"])
    comp = app.compensation
    if comp is None or comp.http is None:
        return None, {}
    return comp.http, knobs(comp.max_retries, comp.timeout, comp.backoff, comp.idempotent)




def is_reverse_action(comp: dict[str, Any]) -> bool:
    """True when the compensation is an HTTP reverse action (its record carries the action)."""
    return bool((comp.get("context") or {}).get("reverse_action"))


def _action_lookup(svc: Services, comp: dict[str, Any], op: dict[str, Any]) -> Callable[[str], Any]:
    run = svc.journal.run(comp["run_id"])

    def error_line() -> str:
        reason = run["reason"] or f"run {run['status']}"
        failed = [n["node_key"] for n in svc.journal.nodes(run["run_id"]) if n["status"] == "failed"]
        for key in failed:
            errs = [o["error"] for o in svc.journal.operations(run["run_id"], key) if o["error"]]
            if errs:
                return f"{reason}: {errs[-1]}"
        return reason

    def lookup(ref: str) -> Any:
        parts = ref.split(".")
        if parts[0] == "original" and len(parts) >= 2:
            base = op["input"] if parts[1] == "input" else op["result"]
            return _walk(base, parts[2:], ref)
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


def _prepare_action(svc: Services, action: HttpRequestSpec, comp: dict[str, Any], op: dict[str, Any],
                    run_spec: dict[str, Any]) -> PreparedRequest:
    """A reverse action's request, filled once (R-X1): through its connector (R-K1); a whole-template URL
    resolved against the original request's origin (or the connector's base URL, R-K6).

    Raises:
        KeyError: a template has no value. RequestError: it cannot be sent (UnsafeRequestError: R-X3, R-K6).
        ConfigError: an unknown connector or a bad URL.
    """
    connector = connector_of(run_spec.get("connectors"), action.connector)
    original = (op.get("input") or {}).get("url") if op.get("kind") == KIND else None
    origin = parse_url(original) if isinstance(original, str) and "://" in original else None
    if whole_reference(action.url) is not None:
        url = UrlTemplate.reference(action.url)
    else:
        url = connector.url(action.url) if connector is not None else parse_url(action.url)
    number = len(svc.journal.attempts(comp["compensation_id"]))  # the attempt being made (its intent is journaled)
    parent = tracing.traceparent(comp["run_id"], f"{comp['compensation_id']}.{number}")
    headers = {**action.headers, "traceparent": parent} if parent else action.headers
    return prepare(method=action.method, url=url, headers=headers, body=action.body,
                   timeout=float(comp["timeout"]), lookup=_action_lookup(svc, comp, op),
                   idempotency_key=comp["compensation_id"], environ=svc.runner.request_environ,
                   connector=connector, origin=origin)


def run_http_attempt(svc: Services, comp: dict[str, Any], op: dict[str, Any], trigger: str) -> Attempted:
    """Run one attempt of an HTTP reverse action; return the compensation row afterwards and the failure kind
    (R-H6, R-H7, R-C7).

    The attempt's intent is committed with the compensation ``running`` (conditional on the status read);
    ``attempt.started`` is committed after the guard let the request through and before it is sent.

    Raises:
        JournalError: the journal cannot be written (nothing unrecorded is marked done).
    """
    cid = comp["compensation_id"]
    attempt = begin_attempt(svc, comp, trigger)
    if attempt is None:  # an operator changed it meanwhile: nothing was written, send nothing
        return Attempted(svc.journal.compensation(cid), None)
    number = attempt["number"]
    action = HttpRequestSpec.model_validate(comp["context"]["reverse_action"])
    run = svc.journal.run(comp["run_id"])
    try:
        spec_allow = list((run["spec"] or {}).get("http_allow") or [])
        parse_allow(spec_allow) + allow_from_env()  # a bad WORKRUN_HTTP_ALLOW: not sent
        request = _prepare_action(svc, action, comp, op, run["spec"] or {})
    except KeyError as exc:
        return not_sent(svc, comp, attempt, missing_value(exc))
    except UnsafeRequestError as exc:  # R-X3: final, a dead letter at once
        return not_sent(svc, comp, attempt, f"not sent: {exc}", Failure.UNSAFE_REQUEST)
    except (RequestError, ConfigError) as exc:
        return not_sent(svc, comp, attempt, str(exc))

    def about_to_send() -> None:
        svc.journal.attempt_running(cid, number, pid=None, proc_start=None, deadline=svc.now() + request.timeout)

    svc.say(comp["run_id"], comp["node_key"], "info",
            f"compensation {cid} of {comp['node_key']}: attempt {number}: {action.method} {request.full_url}")
    got = svc.runner.send_request(f"{cid}.{number}", request, spec_allow, {"compensation_id": cid, "number": number},
                                  before_send=about_to_send)
    return Attempted(finish_http_attempt(svc, comp, attempt, got), got.failure)


def not_sent(svc: Services, comp: dict[str, Any], attempt: dict[str, Any], error: str,
             failure: Failure = Failure.NOT_SENT) -> Attempted:
    """Journal an attempt that sent nothing (a template without a value, a refused request) as
    :func:`finish_http_attempt` does; the compensation row afterwards and ``failure``."""
    return Attempted(finish_http_attempt(svc, comp, attempt, SendResult(False, failure=failure, error=error)), failure)


def finish_http_attempt(svc: Services, comp: dict[str, Any], attempt: dict[str, Any],
                        got: SendResult, run_data: tuple[str, dict[str, Any]] | None = None) -> dict[str, Any]:
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
    metrics.count_attempt("email" if got.smtp_code is not None else KIND, status)
    metrics.count_compensation(comp_status)
    after = svc.journal.compensation(cid)
    if tracing.enabled():
        tracing.attempt_span(after, svc.journal.attempts(cid)[-1])
    return after


def recover_http_attempt(svc: Services, comp: dict[str, Any], attempt: dict[str, Any]) -> dict[str, Any]:
    """Settle a reverse action attempt left in flight by a runner that died (R-R3, R-R4).

    ``starting``: nothing was sent -> ``not_started``, the compensation ``pending`` again (not counted).
    ``running``: it may have been sent -> ``unknown`` (re-sent only when the action is idempotent).
    The runner's transport decides (on a shared journal, the request's claim).
    """
    cid = comp["compensation_id"]
    number = attempt["number"]
    got = svc.runner.settle_request(f"{cid}.{number}", attempt["status"])
    if got.failure is not Failure.NOT_STARTED:
        return finish_http_attempt(svc, comp, attempt, got)
    svc.journal.finish_attempt(cid, number, status="not_started", failure=Failure.NOT_STARTED,
                               error="not started: the runner stopped before it was sent", result=None, at=svc.now(),
                               compensation_status="pending",
                               reason=f"attempt {number} was never sent; it will run on resume")
    return svc.journal.compensation(cid)
