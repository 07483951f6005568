"""``kind = "http"`` nodes and HTTP reverse actions, journaled around :mod:`workrun.outbound` (R-H1, R-H2, R-H6, R-H7).

An http node's request is an *operation* like an App call (R-J1). Order of writes, each committed
before the next step::

    op.intent   (status ``starting``: nothing sent yet)
    op.started  (status ``running``: the guard let it through; the request is about to go out)
    op.finished (``succeeded`` 2xx | ``failed`` | ``unknown``: sent, no answer)

A runner killed in ``starting`` sent nothing (settled as not started, free to send); killed in
``running`` the outcome is ``unknown`` (never re-sent, unless the node says ``idempotent = true``); see
:func:`workrun.operations.settle_request`.
Every request carries ``Idempotency-Key: <operation_id>``; a re-send after an unknown outcome keeps the
key of the request it repeats.

A reverse action attempt follows the same shape with ``attempt.intent`` -> ``attempt.started`` ->
``attempt.finished``; its key is the compensation id, and its ledger row records ``http_status`` and
``response_tail`` (the first 2 KiB of the response body) instead of an exit code and stderr (R-H7).

On a shared journal (the run's runner is a :class:`~workrun.dispatch.DispatchRunner`) the request is
queued instead of sent here: any worker's executor claims it, commits ``op.started``/``attempt.started``
itself before sending, and stores the result this scheduler journals (R-S2; see :mod:`workrun.dispatch`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from workrun.backoff import backoff_delay
from workrun.dispatch import DispatchRunner
from workrun.errors import ConfigError, StaleStatusError
from workrun.models import AppSpec, HttpNode, HttpRequestSpec, NodeSpec, OutputField
from workrun.nodes.base import NodeJob, Where
from workrun.operations import Attempted, current_owner
from workrun.outbound import (
    AllowList,
    EnvLater,
    PreparedRequest,
    RequestError,
    SendResult,
    UnsafeRequestError,
    allow_from_env,
    check_action,
    check_request,
    parse_allow,
    parse_url,
    prepare,
    send,
)
from workrun.outcomes import Failure, NodeOutcome, brief
from workrun.services import Services, new_id

__all__ = [
    "KIND",
    "RESULT_FIELDS",
    "HttpExecutor",
    "action_knobs",
    "finish_http_attempt",
    "is_reverse_action",
    "recover_http_attempt",
    "reverse_action_of",
    "run_http_attempt",
]

KIND = "http"
#: what an http node's result has (R-H1): a template may read these and what is under them
RESULT_FIELDS: dict[str, OutputField] = {"status": OutputField(type="integer", required=True),
                                         "headers": OutputField(type="object", required=True),
                                         "body": OutputField(type="object")}


def _env_of(svc: Services) -> Mapping[str, str] | None:
    """Where ``env.NAME`` is read: here (None: ``os.environ``), or by the sending worker when dispatched."""
    return EnvLater() if isinstance(svc.runner, DispatchRunner) else None


def _allow(spec_allow: list[str] | None) -> AllowList:
    return parse_allow(list(spec_allow or [])) + allow_from_env()


def _walk(value: Any, parts: list[str], ref: str) -> Any:
    for part in parts:
        if not isinstance(value, dict) or part not in value:
            raise KeyError(ref)
        value = value[part]
    return value


# -- http nodes -------------------------------------------------------------------------------------------------------


def _node_lookup(context: dict[str, Any]) -> Callable[[str], Any]:
    def lookup(ref: str) -> Any:
        parts = ref.split(".")
        if parts[0] == "inputs":
            if parts[1] not in context["inputs"]:
                raise KeyError(ref)
            return context["inputs"][parts[1]]
        if parts[0] == "nodes" and len(parts) >= 3 and parts[1] in context["nodes"]:
            return _walk(context["nodes"][parts[1]]["result"], parts[3:], ref)
        raise KeyError(ref)

    return lookup


def _key_of(op: dict[str, Any]) -> str:
    """The Idempotency-Key an operation was sent with."""
    headers = (op.get("input") or {}).get("headers") or {}
    return next((v for k, v in headers.items() if k.lower() == "idempotency-key"), op["operation_id"])


def _send_operation(svc: Services, *, run_id: str, node: HttpNode, op_id: str, request: PreparedRequest,
                    depends_on: list[str], allow: AllowList, spec_allow: list[str]) -> dict[str, Any]:
    row = {
        "operation_id": op_id, "run_id": run_id, "node_key": node.key, "tool_call_index": None, "app": KIND,
        "project": "", "kind": KIND, "tool_name": None, "config": node.model_dump(mode="json"),
        "input": request.shown(), "fingerprint": "", "fingerprint_files": {}, "snapshot": None,
        "depends_on": depends_on, "status": "starting", "call_dir": "", "created_at": svc.now(), "standalone": 0,
        **dict(zip(("owner_pid", "owner_start"), current_owner(), strict=True)),
    }
    svc.journal.start_operation(row)

    def about_to_send() -> None:
        now = svc.now()
        svc.journal.operation_running(op_id, pid=None, proc_start=None, started_at=now, deadline=now + request.timeout)

    if isinstance(svc.runner, DispatchRunner):  # a shared journal: any worker's executor sends it (R-S2)
        got = svc.runner.send_request(op_id, request, spec_allow, {"operation_id": op_id})
    else:
        got = send(request, allow, before_send=about_to_send)
    return _finish_operation(svc, op_id, got)


def _finish_operation(svc: Services, op_id: str, got: SendResult) -> dict[str, Any]:
    if got.succeeded:
        svc.journal.finish_operation(op_id, status="succeeded", result=got.result(), at=svc.now())
    else:
        svc.journal.finish_operation(op_id, status="unknown" if got.failure is Failure.UNKNOWN else "failed",
                                     failure=got.failure, error=got.error, at=svc.now())
    return svc.journal.operation(op_id)


class HttpExecutor:
    """Runs ``kind = "http"`` nodes: one request per operation, the node's ``on_failure`` applied (R-H1, R-H2, R-W7).

    Resuming after a restart: a succeeded request is reused (never re-sent, R-R2); one left ``unknown``
    fails the node unless it is idempotent (then it is re-sent with the same Idempotency-Key); one that was
    never sent is sent.
    """

    kind: ClassVar[str] = KIND

    def check(self, node: NodeSpec, where: Where) -> dict[str, OutputField]:
        """The request and its reverse action as written: literal scheme/host/port, templates only where allowed,
        ``{{ env.NAME }}`` only in header values and set now (R-H3, R-H5, R-H6).

        Returns:
            The result's fields (``status``, ``headers``, ``body``) for template checks downstream.

        Raises:
            ConfigError: naming the field.
        """
        assert isinstance(node, HttpNode)
        check_request(node, file=where.file, field=where.field, check_ref=lambda field, ref: None)
        if node.compensation is not None:
            check_action(node.compensation, file=where.file, field=where.at("compensation"))
        return dict(RESULT_FIELDS)

    def run(self, job: NodeJob) -> NodeOutcome:
        """Send the node's request (again, as its failure policy and ``idempotent`` allow); see the class doc."""
        node = job.node
        assert isinstance(node, HttpNode)
        return _run_http_node(job, node)

    def after_run(self, svc: Services, run_id: str) -> None:
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
        spec_allow = list((svc.journal.run(run_id)["spec"] or {}).get("http_allow") or [])
        allow = _allow(spec_allow)  # WORKRUN_HTTP_ALLOW read now
        url = parse_url(node.url)
    except ConfigError as exc:
        return NodeOutcome("failed", error=exc.line())
    error: str | None = None
    while used < budget:
        if job.should_stop():
            return NodeOutcome("stopped", error="stopped by the user")
        op_id = new_id("op")
        try:
            request = prepare(method=node.method, url=url, headers=node.headers, body=node.body, timeout=node.timeout,
                              lookup=_node_lookup(job.context), idempotency_key=resend_key or op_id,
                              environ=_env_of(svc))
        except KeyError as exc:
            return NodeOutcome("failed", error=f"template {{{{ {exc.args[0]} }}}} has no value")
        except RequestError as exc:
            return NodeOutcome("failed", error=str(exc))
        op = _send_operation(svc, run_id=run_id, node=node, op_id=op_id, request=request,
                             depends_on=job.depends_on, allow=allow, spec_allow=spec_allow)
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
        return HttpRequestSpec.model_validate(action.model_dump(include={"method", "url", "headers", "body"})), \
            action_knobs(action.max_retries, action.timeout, action.backoff, action.idempotent)
    app = AppSpec.model_validate(op["config"])
    comp = app.compensation
    if comp is None or comp.http is None:
        return None, {}
    return comp.http, action_knobs(comp.max_retries, comp.timeout, comp.backoff, comp.idempotent)


def action_knobs(max_retries: int, timeout: float, backoff: float, idempotent: bool) -> dict[str, Any]:
    """Attempt settings as the compensation record stores them."""
    return {"max_attempts": max_retries + 1, "timeout": timeout, "backoff": backoff, "idempotent": int(idempotent)}


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
        if ref == "error":
            return error_line()
        if parts[0] == "inputs" and len(parts) == 2 and parts[1] in (run["inputs"] or {}):
            return run["inputs"][parts[1]]
        raise KeyError(ref)

    return lookup


def run_http_attempt(svc: Services, comp: dict[str, Any], op: dict[str, Any], trigger: str) -> Attempted:
    """Run one attempt of an HTTP reverse action; return the compensation row afterwards and the failure kind
    (R-H6, R-H7, R-C7).

    The attempt's intent is committed with the compensation ``running`` (conditional on the status read);
    ``attempt.started`` is committed after the guard let the request through and before it is sent.

    Raises:
        JournalError: the journal cannot be written (nothing unrecorded is marked done).
    """
    cid = comp["compensation_id"]
    number = len(svc.journal.attempts(cid)) + 1
    started = svc.now()
    try:
        svc.journal.start_attempt(cid, number, trigger=trigger, call_dir="", seen=comp["status"], at=started)
    except StaleStatusError:  # an operator changed it meanwhile: nothing was written, send nothing
        return Attempted(svc.journal.compensation(cid), None)
    attempt = {"compensation_id": cid, "number": number, "trigger": trigger}
    action = HttpRequestSpec.model_validate(comp["context"]["reverse_action"])
    run = svc.journal.run(comp["run_id"])
    try:
        spec_allow = list((run["spec"] or {}).get("http_allow") or [])
        allow = _allow(spec_allow)
        request = prepare(method=action.method, url=parse_url(action.url), headers=action.headers, body=action.body,
                          timeout=float(comp["timeout"]), lookup=_action_lookup(svc, comp, op), idempotency_key=cid,
                          environ=_env_of(svc))
    except KeyError as exc:
        got = SendResult(False, failure=Failure.NOT_SENT, error=f"template {{{{ {exc.args[0]} }}}} has no value")
        return Attempted(finish_http_attempt(svc, comp, attempt, got), got.failure)
    except UnsafeRequestError as exc:  # R-X3: final, a dead letter at once
        got = SendResult(False, failure=Failure.UNSAFE_REQUEST, error=f"not sent: {exc}")
        return Attempted(finish_http_attempt(svc, comp, attempt, got), got.failure)
    except (RequestError, ConfigError) as exc:
        got = SendResult(False, failure=Failure.NOT_SENT, error=str(exc))
        return Attempted(finish_http_attempt(svc, comp, attempt, got), got.failure)

    def about_to_send() -> None:
        svc.journal.attempt_running(cid, number, pid=None, proc_start=None, deadline=svc.now() + request.timeout)

    svc.say(comp["run_id"], comp["node_key"], "info",
            f"compensation {cid} of {comp['node_key']}: attempt {number}: {action.method} {request.full_url}")
    if isinstance(svc.runner, DispatchRunner):  # a shared journal: any worker's executor sends it (R-S2)
        got = svc.runner.send_request(f"{cid}.{number}", request, spec_allow,
                                      {"compensation_id": cid, "number": number})
    else:
        got = send(request, allow, before_send=about_to_send)
    return Attempted(finish_http_attempt(svc, comp, attempt, got), got.failure)


def finish_http_attempt(svc: Services, comp: dict[str, Any], attempt: dict[str, Any],
                        got: SendResult) -> dict[str, Any]:
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
                               http_status=got.status, response_tail=got.response_tail)
    return svc.journal.compensation(cid)


def recover_http_attempt(svc: Services, comp: dict[str, Any], attempt: dict[str, Any]) -> dict[str, Any]:
    """Settle a reverse action attempt left in flight by a runner that died (R-R3, R-R4).

    ``starting``: nothing was sent -> ``not_started``, the compensation ``pending`` again (not counted).
    ``running``: it may have been sent -> ``unknown`` (re-sent only when the action is idempotent).
    On a shared journal the request's claim decides (:meth:`DispatchRunner.settle_request`).
    """
    cid = comp["compensation_id"]
    number = attempt["number"]
    now = svc.now()
    if isinstance(svc.runner, DispatchRunner):  # a shared journal: a worker's executor may hold it (R-S2)
        got = svc.runner.settle_request(f"{cid}.{number}")
        if got.failure is not Failure.NOT_STARTED:
            return finish_http_attempt(svc, comp, attempt, got)
        attempt = {**attempt, "status": "starting"}  # fenced before any worker claimed it: never sent
    if attempt["status"] == "starting":
        svc.journal.finish_attempt(cid, number, status="not_started", failure=Failure.NOT_STARTED,
                                   error="not started: the runner stopped before it was sent", result=None, at=now,
                                   compensation_status="pending",
                                   reason=f"attempt {number} was never sent; it will run on resume")
        return svc.journal.compensation(cid)
    got = SendResult(True, failure=Failure.UNKNOWN,
                     error="outcome unknown: the runner stopped while the request was in flight")
    return finish_http_attempt(svc, comp, {**attempt, "trigger": attempt["trigger"]}, got)
