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

from typing import Any

from workrun.core import metrics, tracing
from workrun.core.errors import ConfigError
from workrun.core.models import AppSpec, HttpNode, HttpRequestSpec
from workrun.core.outcomes import Failure
from workrun.core.rows import AttemptRow, CompensationRow, OperationRow
from workrun.core.templates import missing_value
from workrun.effects.actions import action_lookup, finish_http_attempt, knobs, not_sent, recover_http_attempt
from workrun.effects.base import Planned, begin_attempt
from workrun.effects.operations import Attempted
from workrun.outbound.http import (
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
from workrun.runner.context import Context

__all__ = ["KIND", "HttpRequest", "finish_request_operation", "reverse_action_of", "run_http_attempt"]

KIND = "http"  # the kind of an http node's operations


def finish_request_operation(svc: Context, op_id: str, got: SendResult) -> OperationRow:
    """Journal an http node's request outcome (``op.finished``): 2xx ``succeeded`` with ``{status, headers,
    body}``; sent and unanswered ``unknown``; anything else ``failed``. Returns the operation row."""
    if got.succeeded:
        svc.journal.finish_operation(op_id, status="succeeded", result=got.result(), at=svc.now())
    else:
        svc.journal.finish_operation(op_id, status="unknown" if got.failure is Failure.UNKNOWN else "failed",
                                     failure=got.failure, error=got.error, at=svc.now())
    row = svc.journal.operation(op_id)
    begun, ended = row.get("started_at") or row.get("created_at"), row.get("ended_at")
    metrics.count_call(KIND, str(row["status"]), (ended - begun) if begun and ended else None)
    if tracing.enabled():
        tracing.operation_span(row, request_method=str((row.get("input") or {}).get("method")))
    return row


class HttpRequest:
    """HTTP requests: sent through the runner's transport, settled from what the transport knows (see
    :class:`~workrun.effects.base.Effect`)."""

    name = KIND

    def settle_operation(self, svc: Context, op: OperationRow, *, claim_wait: float) -> OperationRow:
        """``starting``: the guard had not let it out, nothing was sent -> ``failed`` (not started: it may be
        sent). ``running``: it may have been sent -> ``unknown`` (never re-sent unless the node is idempotent).
        On a shared journal the request's claim decides instead (R-S2, R-R3)."""
        del claim_wait
        got = svc.runner.settle_request(op["operation_id"], op["status"])
        return finish_request_operation(svc, op["operation_id"], got)

    def end_operation(self, svc: Context, op: OperationRow) -> OperationRow:
        """No process to end: its request was sent or not (as :meth:`settle_operation`)."""
        return self.settle_operation(svc, op, claim_wait=0.0)

    def describe(self, op: OperationRow) -> str:
        return f"http node {op['node_key']}"

    def plan(self, op: OperationRow) -> Planned | None:
        """An http node's ``compensation`` table or an App's ``compensation = { http = … }`` (R-H6)."""
        action, settings = reverse_action_of(op)
        if action is None:
            return None
        return Planned(self.name, {"reverse_action": action.model_dump(mode="json")}, settings)

    def no_compensation(self, op: OperationRow) -> str:
        return f"http node {op['node_key']!r} has no reverse action (compensation table)"

    def run_attempt(self, svc: Context, comp: CompensationRow, op: OperationRow, trigger: str) -> Attempted:
        return run_http_attempt(svc, comp, op, trigger)

    def recover_attempt(self, svc: Context, comp: CompensationRow, attempt: AttemptRow, *,
                        claim_wait: float) -> CompensationRow:
        del claim_wait
        return recover_http_attempt(svc, comp, attempt)

    def run_again(self, svc: Context, comp: CompensationRow, op: OperationRow) -> str | None:
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


def reverse_action_of(op: OperationRow) -> tuple[HttpRequestSpec | None, dict[str, Any]]:
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




def is_reverse_action(comp: CompensationRow) -> bool:
    """True when the compensation is an HTTP reverse action (its record carries the action)."""
    return bool((comp.get("context") or {}).get("reverse_action"))


def _prepare_action(svc: Context, action: HttpRequestSpec, comp: CompensationRow, op: OperationRow,
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
                   timeout=float(comp["timeout"]), lookup=action_lookup(svc, comp, op),
                   idempotency_key=comp["compensation_id"], environ=svc.runner.request_environ,
                   connector=connector, origin=origin)


def run_http_attempt(svc: Context, comp: CompensationRow, op: OperationRow, trigger: str) -> Attempted:
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
        return not_sent(svc, comp, attempt, missing_value(exc), Failure.MISSING_VALUE)
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


