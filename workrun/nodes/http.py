"""``kind = "http"`` nodes, journaled around :mod:`workrun.outbound.http` (R-H1, R-H2, R-W7).

An http node's request is an *operation* like an App call (R-J1). Order of writes, each committed
before the next step::

    op.intent   (status ``starting``: nothing sent yet)
    op.started  (status ``running``: the guard let it through; the request is about to go out)
    op.finished (``succeeded`` 2xx | ``failed`` | ``unknown``: sent, no answer)

A runner killed in ``starting`` sent nothing (settled as not started, free to send); killed in
``running`` the outcome is ``unknown`` (never re-sent, unless the node says ``idempotent = true``); see
:class:`workrun.effects.http_request.HttpRequest`, which also runs HTTP reverse actions.
Every request carries ``Idempotency-Key: <operation_id>``; a re-send after an unknown outcome keeps the
key of the request it repeats.

The request goes out through the runner's transport (``svc.runner.send_request``): from this process, or,
on a shared journal, from any worker's executor, which commits ``op.started`` itself before sending (R-S2).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from workrun.core import tracing
from workrun.core.backoff import backoff_delay
from workrun.core.errors import ConfigError
from workrun.core.models import HttpNode, NodeSpec, OutputField
from workrun.core.outcomes import Failure, NodeOutcome, brief
from workrun.core.rows import OperationRow
from workrun.core.templates import missing_value
from workrun.effects.actions import walk
from workrun.effects.http_request import KIND, finish_request_operation
from workrun.effects.operations import current_owner
from workrun.nodes.base import NodeJob, Where
from workrun.outbound.http import (
    PreparedRequest,
    RequestError,
    SendResult,
    UnsafeRequestError,
    UrlTemplate,
    allow_from_env,
    check_request,
    connector_of,
    parse_allow,
    parse_url,
    prepare,
    whole_reference,
)
from workrun.runner.context import Context, new_id

__all__ = [
    "KIND",
    "RESULT_FIELDS",
    "HttpExecutor",
]

#: what an http node's result has (R-H1): a template may read these and what is under them
RESULT_FIELDS: dict[str, OutputField] = {"status": OutputField(type="integer", required=True),
                                         "headers": OutputField(type="object", required=True),
                                         "body": OutputField(type="object")}


# -- http nodes -------------------------------------------------------------------------------------------------------


def _node_lookup(context: dict[str, Any]) -> Callable[[str], Any]:
    def lookup(ref: str) -> Any:
        parts = ref.split(".")
        if parts[0] == "inputs":
            if parts[1] not in context["inputs"]:
                raise KeyError(ref)
            return context["inputs"][parts[1]]
        if parts[0] == "data" and len(parts) == 2:  # the run's data when the node started (R-K4)
            return (context.get("data") or {}).get(parts[1])
        if parts[0] == "nodes" and len(parts) >= 3 and parts[1] in context["nodes"]:
            return walk(context["nodes"][parts[1]]["result"], parts[3:], ref)
        raise KeyError(ref)

    return lookup


def _key_of(op: OperationRow) -> str:
    """The Idempotency-Key an operation was sent with."""
    headers = (op.get("input") or {}).get("headers") or {}
    return next((v for k, v in headers.items() if k.lower() == "idempotency-key"), op["operation_id"])


def _operation_row(svc: Context, *, run_id: str, node: HttpNode, op_id: str, shown: dict[str, Any],
                   depends_on: list[str]) -> OperationRow:
    owner_pid, owner_start = current_owner()
    return {
        "operation_id": op_id, "run_id": run_id, "node_key": node.key, "tool_call_index": None, "app": KIND,
        "project": "", "kind": KIND, "tool_name": None, "config": node.model_dump(mode="json"),
        "input": shown, "fingerprint": "", "fingerprint_files": {}, "snapshot": None,
        "depends_on": depends_on, "status": "starting", "call_dir": "", "created_at": svc.now(), "standalone": 0,
        "owner_pid": owner_pid, "owner_start": owner_start,
    }


def _unsent_operation(svc: Context, *, run_id: str, node: HttpNode, op_id: str, depends_on: list[str],
                      error: str, failure: Failure) -> OperationRow:
    """Journal a call that could not be prepared as ``failed``, nothing sent (R-X3: "empty value for {{ … }} in
    url", a dot segment; a bound): its ``input`` is the request as the file wrote it (headers, which may hold
    ``{{ env.NAME }}``, left out)."""
    shown: dict[str, Any] = {"method": node.method, "url": node.url, "headers": {}, "body": None,
             **({"connector": node.connector} if node.connector else {})}
    svc.journal.start_operation(_operation_row(svc, run_id=run_id, node=node, op_id=op_id, shown=shown,
                                               depends_on=depends_on))
    return finish_request_operation(svc, op_id, SendResult(False, failure=failure, error=error))


def _send_operation(svc: Context, *, run_id: str, node: HttpNode, op_id: str, request: PreparedRequest,
                    depends_on: list[str], spec_allow: list[str]) -> OperationRow:
    svc.journal.start_operation(_operation_row(svc, run_id=run_id, node=node, op_id=op_id, shown=request.shown(),
                                               depends_on=depends_on))

    def about_to_send() -> None:
        now = svc.now()
        svc.journal.operation_running(op_id, pid=None, proc_start=None, started_at=now, deadline=now + request.timeout)

    got = svc.runner.send_request(op_id, request, spec_allow, {"operation_id": op_id}, before_send=about_to_send)
    return finish_request_operation(svc, op_id, got)


class HttpExecutor:
    """Runs ``kind = "http"`` nodes: one request per operation, the node's ``on_failure`` applied (R-H1, R-H2, R-W7).

    Resuming after a restart: a succeeded request is reused (never re-sent, R-R2); one left ``unknown``
    fails the node unless it is idempotent (then it is re-sent with the same Idempotency-Key); one that was
    never sent is sent.
    """

    kind: ClassVar[str] = KIND

    def check(self, node: NodeSpec, where: Where) -> dict[str, OutputField]:
        """The request as written: literal scheme/host/port, templates only where allowed, ``{{ env.NAME }}`` only
        in header values and set now (R-H3, R-H5). Its reverse action is checked with the workflow's inputs by
        the loader (R-H6), as every node's is.

        Returns:
            The result's fields (``status``, ``headers``, ``body``) for template checks downstream.

        Raises:
            ConfigError: naming the field.
        """
        assert isinstance(node, HttpNode)
        if node.connector is None and whole_reference(node.url) is not None:
            raise ConfigError("a url that is one whole template needs a connector (its base_url is the origin the "
                              "value is resolved against, R-K6)", file=where.file, field=where.at("url"))
        check_request(node, file=where.file, field=where.field, check_ref=lambda field, ref: None,
                      connectors=where.connectors)
        return dict(RESULT_FIELDS)

    def run(self, job: NodeJob) -> NodeOutcome:
        """Send the node's request (again, as its failure policy and ``idempotent`` allow); see the class doc."""
        node = job.node
        assert isinstance(node, HttpNode)
        return _run_http_node(job, node)

    def after_run(self, svc: Context, run_id: str) -> None:
        """Nothing: an http node's request is undone by its reverse action, with the run's compensation."""


def _run_http_node(job: NodeJob, node: HttpNode) -> NodeOutcome:
    """Run one http node to its end (R-H1, R-H2, R-W7).

    An ``unknown`` outcome is re-sent (with the same Idempotency-Key) only when the node is idempotent,
    within the retry budget (one re-send without a ``retry`` policy); otherwise the node fails.
    """
    svc, run_id, policy = job.svc, job.run_id, node.on_failure
    prior = svc.journal.operations(run_id, node.key)
    used = sum(1 for o in prior if o["status"] in ("failed", "unknown")
               and (o["failure"] is None or Failure(o["failure"]).counts))
    resend_key: str | None = None
    if prior:
        last = prior[-1]
        if last["status"] == "succeeded":
            return NodeOutcome("succeeded", last["result"])
        if last["status"] == "unknown":
            if not node.idempotent:
                return NodeOutcome("failed", error=f"operation {last['operation_id']}: {last['error']}")
            resend_key = _key_of(last)
        if last["status"] in ("starting", "running"):  # its owner lives on: never sent a second time (R-R3)
            return NodeOutcome("failed", error=f"operation {last['operation_id']} is still in flight in "
                               f"process {last.get('owner_pid')}; not sent again (R-R3)")
    budget = policy.attempts() if policy.retry else (2 if node.idempotent else 1)
    try:
        run_spec = svc.journal.run(run_id)["spec"] or {}
        spec_allow = list(run_spec.get("http_allow") or [])
        parse_allow(spec_allow) + allow_from_env()  # a bad WORKRUN_HTTP_ALLOW fails the node before anything
        connector = connector_of(run_spec.get("connectors"), node.connector)
        if whole_reference(node.url) is not None:
            url = UrlTemplate.reference(node.url)
        else:
            url = connector.url(node.url) if connector is not None else parse_url(node.url)
    except ConfigError as exc:
        return NodeOutcome("failed", error=exc.line())
    error: str | None = None
    if used and used < budget and policy.retry is not None and prior and prior[-1]["status"] == "failed":
        # resumed between two requests of on_failure = retry: the backoff still applies (R-W7)
        if job.wait_left_backoff(prior[-1]["ended_at"], backoff_delay(policy.retry.backoff, used),
                                 f"request {used + 1} of {budget}"):
            return NodeOutcome("stopped", error="stopped by the user")
    while used < budget:
        if job.should_stop():
            return NodeOutcome("stopped", error="stopped by the user")
        op_id = new_id("op")
        try:
            parent = tracing.traceparent(run_id, op_id)
            headers = {**node.headers, "traceparent": parent} if parent else node.headers
            request = prepare(method=node.method, url=url, headers=headers, body=node.body, timeout=node.timeout,
                              lookup=_node_lookup(job.context), idempotency_key=resend_key or op_id,
                              connector=connector,
                              environ=svc.runner.request_environ)
        except (KeyError, RequestError) as exc:  # nothing sent; the call is journaled failed (R-X3: final)
            error = missing_value(exc) if isinstance(exc, KeyError) else str(exc)
            op = _unsent_operation(svc, run_id=run_id, node=node, op_id=op_id, depends_on=job.depends_on,
                                   error=error, failure=Failure.UNSAFE_REQUEST
                                   if isinstance(exc, UnsafeRequestError) else Failure.NOT_SENT)
            job.say("error", f"operation {op_id} ({node.method} {node.url}): failed: {error}")
            return NodeOutcome("failed", error=error)
        op = _send_operation(svc, run_id=run_id, node=node, op_id=op_id, request=request,
                             depends_on=job.depends_on, spec_allow=spec_allow)
        job.say("info" if op["status"] == "succeeded" else "error",
                f"operation {op_id} ({node.method} {request.full_url}): {op['status']}"
                + (f": {op['error']}" if op["error"] else "")
                + (f" -> {brief(op['result'])}" if op["status"] == "succeeded" else ""))
        if op["status"] == "succeeded":
            return NodeOutcome("succeeded", op["result"])
        error = op["error"]
        used += 1
        if op["status"] == "unknown":
            if not node.idempotent:
                return NodeOutcome("failed", error=error)
            resend_key = _key_of(op)
            if used < budget:
                job.say("warning", f"re-sending (request {used + 1} of {budget}) with the same Idempotency-Key "
                        f"{resend_key}: the node is idempotent")
        else:
            resend_key = None
        if used < budget and policy.retry is not None and op["status"] == "failed":
            delay = backoff_delay(policy.retry.backoff, used)
            job.say("warning", f"retrying (request {used + 1} of {budget}) in {delay:.2g} s (on_failure = retry)")
            if svc.stop_event.wait(delay):
                return NodeOutcome("stopped", error="stopped by the user")
    return NodeOutcome("failed", error=error)


