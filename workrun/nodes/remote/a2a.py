"""Remote agent nodes over A2A (SPEC §9 ``kind = "remote_agent"``, R-C10). Requires ``workrun[a2a]``.

A remote node hands one message to an A2A agent and follows the task it
creates. Workrun cannot undo a remote agent's work; what it owes is one
best-effort cancel (R-C10).

Journal row (``remote_tasks``, one per run and node) and its states::

    state:  sending --answer--> submitted | working | input-required | ... --> completed | failed | canceled | rejected
            sending --error before any answer--> error            (no task id: nothing to cancel)
            sending --stop or timeout before any answer--> unknown (the agent may have a task; its id is unknown)
    cancel_status (only for a task with a task id, not in a terminal state, once the run failed or stopped):
            NULL --committed before the request--> sending --> sent (answer saved) | error (error saved)
            sending found by a later runner --> unknown           (never sent again)

Rules:

- The row is written (``state = sending``) before the message is sent, and the
  task id and state as soon as the agent answers, so a later runner knows them.
  A message is never sent twice: a node found with a row already (the runner
  died while following it) fails without contacting the agent, which makes the
  run fail finally and its task get its cancel.
- Following polls ``GetTask`` (0.5 s, growing to 2 s) until a terminal state,
  the node's ``timeout`` (seconds, counted from the send), a stop (R-C9), or the
  run failing through another node: a remote task's success cannot be
  compensated, so waiting for it gains nothing (R-W3 waits for App calls only).
- ``input-required`` / ``auth-required``: Workrun cannot answer; the node fails.
- Cancel: exactly one ``CancelTask`` request per task, no polling, no retries
  (:func:`cancel_open_tasks`).

Safety: ``url`` and every interface URL of the agent card must be http or
https; redirects are refused, not followed; each HTTP request is bounded
(``REQUEST_TIMEOUT`` s) and each HTTP answer (``MAX_RESPONSE`` bytes); an
answer kept in the journal is cut to ``MAX_ANSWER`` bytes; a node result over
1 MiB fails the node (as for Apps, SPEC §10).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable
from typing import Any
from urllib.parse import urlsplit

from workrun.core.errors import ConfigError
from workrun.core.models import RemoteAgentNode
from workrun.core.outcomes import NodeOutcome
from workrun.core.states import TERMINAL_REMOTE_STATES as TERMINAL_STATES
from workrun.core.templates import render
from workrun.runner.context import Context

__all__ = ["MAX_ANSWER", "MAX_RESPONSE", "MISSING_EXTRA", "REQUEST_TIMEOUT", "TERMINAL_STATES", "a2a_available",
           "cancel_open_tasks", "run_remote_node", "url_problem"]

INTERRUPTED_STATES = frozenset({"input-required", "auth-required"})
MAX_ANSWER = 64 * 1024
MAX_RESPONSE = 4 * 1024 * 1024
MAX_RESULT = 1024 * 1024
REQUEST_TIMEOUT = 30.0
CANCEL_TIMEOUT = 10.0
POLL_FIRST, POLL_MAX = 0.5, 2.0
MISSING_EXTRA = ("remote_agent nodes need the A2A client: pip install 'workrun[a2a]' "
                 "(from a checkout: pip install -e '.[a2a]')")

_cards: dict[str, Any] = {}  # node url -> agent card, so a cancel in the same process needs no second fetch


class RemoteError(Exception):
    """Raised when an agent cannot be reached or answers outside the rules above (message is one line)."""


class _Stopped(Exception):
    pass


def a2a_available() -> bool:
    """True when the optional A2A client (``workrun[a2a]``) can be imported."""
    try:
        import a2a.client  # noqa: F401
        import httpx  # noqa: F401
    except ImportError:
        return False
    return True


def _one_line(text: str, limit: int = MAX_ANSWER) -> str:
    text = " ".join(str(text).split())
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    return data[:limit - 20].decode("utf-8", "ignore") + " … (cut at 64 KiB)"


def _error_text(exc: BaseException) -> str:
    if isinstance(exc, RemoteError):
        return _one_line(str(exc), 2000)
    text = str(exc) or repr(exc)
    return _one_line(f"{type(exc).__name__}: {text}", 2000)


def _state_name(state: int) -> str:
    from a2a.types import TaskState

    # TASK_STATE_INPUT_REQUIRED -> input-required (the A2A JSON names)
    return TaskState.Name(state).removeprefix("TASK_STATE_").lower().replace("_", "-")


def url_problem(url: str) -> str | None:
    """Why ``url`` may not be contacted (not ``http://`` or ``https://`` with a host), or None."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return "is not an http:// or https:// URL"
    return None


def _check_url(url: str, what: str) -> None:
    problem = url_problem(url)
    if problem:
        raise RemoteError(f"{what} {url!r} {problem}; refused")


# -- HTTP ---------------------------------------------------------------------


def _http_client(timeout: float) -> Any:
    """An ``httpx.AsyncClient`` that refuses redirects and answers over ``MAX_RESPONSE`` bytes."""
    import httpx

    class _Bounded(httpx.AsyncByteStream):
        def __init__(self, inner: Any) -> None:
            self._inner = inner

        async def __aiter__(self) -> AsyncIterator[bytes]:
            seen = 0
            async for chunk in self._inner:
                seen += len(chunk)
                if seen > MAX_RESPONSE:
                    raise RemoteError(f"the agent's answer is larger than {MAX_RESPONSE} bytes; refused")
                yield chunk

        async def aclose(self) -> None:
            await self._inner.aclose()

    class _Transport(httpx.AsyncBaseTransport):
        def __init__(self) -> None:
            self._inner = httpx.AsyncHTTPTransport()

        async def handle_async_request(self, request: Any) -> Any:
            response = await self._inner.handle_async_request(request)
            if 300 <= response.status_code < 400:
                await response.aclose()
                raise RemoteError(f"{request.url} answered with a redirect ({response.status_code}); "
                                  "redirects are not followed")
            length = response.headers.get("content-length", "")
            if length.isdigit() and int(length) > MAX_RESPONSE:
                await response.aclose()
                raise RemoteError(f"the agent's answer is {length} bytes, over {MAX_RESPONSE}; refused")
            return httpx.Response(response.status_code, headers=response.headers, stream=_Bounded(response.stream),
                                  extensions=response.extensions, request=request)

        async def aclose(self) -> None:
            await self._inner.aclose()

    return httpx.AsyncClient(transport=_Transport(), follow_redirects=False,
                             timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)))


async def _client(http: Any, url: str) -> Any:
    """Resolve the agent card at ``url`` (cached per process) and build an SDK client on ``http``.

    Raises:
        RemoteError: an interface URL of the card is not http/https.
        A2AClientError: the card cannot be fetched or read.
    """
    from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
    from a2a.utils.constants import TransportProtocol

    card = _cards.get(url)
    if card is None:
        card = await A2ACardResolver(http, url).get_agent_card()
        for interface in card.supported_interfaces:
            _check_url(interface.url, "the agent card's interface URL")
        _cards[url] = card
    config = ClientConfig(streaming=False, polling=True, httpx_client=http,
                          supported_protocol_bindings=[TransportProtocol.JSONRPC, TransportProtocol.HTTP_JSON])
    return ClientFactory(config).create(card)


async def _until(awaitable: Awaitable[Any], svc: Context, deadline: float | None = None) -> Any:
    """Await ``awaitable`` but give up as soon as a stop is requested (raises ``_Stopped``) or at ``deadline``."""
    task = asyncio.ensure_future(awaitable)
    try:
        while not task.done():
            if svc.stopping():
                raise _Stopped
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError
            await asyncio.wait([task], timeout=0.1)
        return task.result()
    finally:
        if not task.done():
            task.cancel()
            try:
                await task
            except BaseException:  # noqa: BLE001 - the cancelled request's own error does not matter
                pass


# -- the node -----------------------------------------------------------------


def _result(task: Any) -> dict[str, Any]:
    """``{task_id, context_id, state, text, artifacts: [{artifact_id, name, text, data}]}`` of a finished task."""
    from google.protobuf.json_format import MessageToDict

    artifacts = []
    for art in task.artifacts:
        texts = [p.text for p in art.parts if p.HasField("text")]
        data = [MessageToDict(p.data) for p in art.parts if p.HasField("data")]
        artifacts.append({"artifact_id": art.artifact_id, "name": art.name, "text": "\n".join(texts), "data": data})
    text = "\n".join(a["text"] for a in artifacts if a["text"])
    if not text and task.status.HasField("message"):
        text = "\n".join(p.text for p in task.status.message.parts if p.HasField("text"))
    return {"task_id": task.id, "context_id": task.context_id, "state": _state_name(task.status.state),
            "text": text, "artifacts": artifacts}


def _status_text(task: Any) -> str:
    if task.status.HasField("message"):
        return " ".join(p.text for p in task.status.message.parts if p.HasField("text"))
    return ""


def _run_failing(svc: Context, run_id: str, key: str) -> str | None:
    """The key of another node whose failure already makes the run fail finally (R-W3), if any."""
    for n in svc.journal.nodes(run_id):
        if n["node_key"] != key and n["status"] == "failed" and not n["handled"]:
            return n["node_key"]
    return None


async def _follow(svc: Context, run_id: str, node: RemoteAgentNode, text: str) -> NodeOutcome:
    """Send ``text``, record the task, poll it to an end; return the NodeOutcome."""
    from a2a.types import GetTaskRequest, Message, Part, Role, SendMessageConfiguration, SendMessageRequest

    key, url = node.key, node.url or ""
    deadline = time.monotonic() + node.timeout
    say = lambda level, msg: svc.say(run_id, key, level, msg)  # noqa: E731

    def save(state: str, task_id: str | None = None, context_id: str | None = None) -> None:
        svc.journal.remote_task_state(run_id, key, state=state, at=svc.now(), task_id=task_id, context_id=context_id)

    async with _http_client(min(REQUEST_TIMEOUT, node.timeout)) as http:
        try:
            client = await _until(_client(http, url), svc, deadline)
            request = SendMessageRequest(
                message=Message(role=Role.ROLE_USER, message_id=str(uuid.uuid4()), parts=[Part(text=text)]),
                configuration=SendMessageConfiguration(return_immediately=True))

            async def first_answer() -> Any:
                async for event in client.send_message(request):
                    return event
                raise RemoteError("the agent sent no answer")

            event = await _until(first_answer(), svc, deadline)
        except _Stopped:
            save(state="unknown")
            say("warning", f"stopped before the agent at {url} answered; no task id known, nothing to cancel")
            return NodeOutcome("stopped", error="stopped by the user")
        except TimeoutError:
            save(state="unknown")
            return NodeOutcome("failed", error=f"no answer from {url} within the node's timeout ({node.timeout:g} s)")
        except Exception as exc:  # noqa: BLE001 - any client, HTTP or protocol error fails the node in one line
            save(state="error")
            return NodeOutcome("failed", error=f"sending to {url} failed: {_error_text(exc)}")

        if event.HasField("message"):  # the agent answered directly, without a task
            reply = "\n".join(p.text for p in event.message.parts if p.HasField("text"))
            save(state="completed", context_id=event.message.context_id or None)
            say("info", f"sent the message to {url}; the agent answered directly (no task)")
            return NodeOutcome("succeeded", {"task_id": None, "context_id": event.message.context_id or None,
                                             "state": "completed", "text": reply, "artifacts": []})
        task = event.task
        state = _state_name(task.status.state)
        save(task_id=task.id, context_id=task.context_id or None, state=state)
        say("info", f"sent the message to {url}: task {task.id}, state {state}")
        delay = POLL_FIRST
        try:
            while state not in TERMINAL_STATES and state not in INTERRUPTED_STATES:
                wake = time.monotonic() + delay
                while time.monotonic() < wake:
                    if svc.stopping():
                        raise _Stopped
                    if time.monotonic() >= deadline:
                        raise TimeoutError
                    failing = _run_failing(svc, run_id, key)
                    if failing:
                        return NodeOutcome("failed", error=f"stopped following task {task.id}: the run is failing "
                                                           f"(node {failing!r} failed)")
                    await asyncio.sleep(min(0.1, max(0.0, wake - time.monotonic())))
                delay = min(delay * 2, POLL_MAX)
                try:
                    task = await _until(client.get_task(GetTaskRequest(id=task.id)), svc, deadline)
                except (_Stopped, TimeoutError):
                    raise
                except Exception as exc:  # noqa: BLE001 - one failed poll fails the node; the cancel still follows
                    return NodeOutcome("failed", error=f"following task {task.id} at {url} failed: "
                                                       f"{_error_text(exc)}")
                new = _state_name(task.status.state)
                if new != state:
                    state = new
                    save(state=state)
        except _Stopped:
            return NodeOutcome("stopped", error="stopped by the user")
        except TimeoutError:
            return NodeOutcome("failed", error=f"task {task.id} did not finish within the node's timeout "
                                               f"({node.timeout:g} s); last state {state}")
        finally:
            await client.close()
    detail = _status_text(task)
    if state in INTERRUPTED_STATES:
        return NodeOutcome("failed", error=f"task {task.id} is {state}: the agent asks for an answer Workrun cannot "
                                           "give" + (f" ({_one_line(detail, 500)})" if detail else ""))
    if state != "completed":
        return NodeOutcome("failed", error=f"task {task.id} ended {state}"
                                           + (f": {_one_line(detail, 500)}" if detail else ""))
    result = _result(task)
    try:
        size = len(json.dumps(result, ensure_ascii=False, allow_nan=False).encode("utf-8"))
    except ValueError:  # NaN or Infinity: no JSON reader but Python's takes them
        return NodeOutcome("failed", error=f"task {task.id} completed but its result holds NaN or Infinity, "
                                           "which are not JSON")
    if size > MAX_RESULT:
        return NodeOutcome("failed", error=f"task {task.id} completed but its result is {size} bytes, over the "
                                           f"{MAX_RESULT}-byte limit")
    say("info", f"task {task.id}: completed")
    return NodeOutcome("succeeded", result)


def run_remote_node(svc: Context, run_id: str, node: RemoteAgentNode, context: dict[str, Any]) -> NodeOutcome:
    """Send the node's message to the A2A agent at ``node.url`` and follow the task (module doc).

    Runs in an engine worker thread; returns within about 0.1 s of a stop request.

    Args:
        svc: services (journal, stop event).
        run_id: the run.
        node: a ``remote_agent`` node: ``url``, ``message`` (templates allowed), ``timeout`` (seconds).
        context: template context ``{"inputs": ..., "nodes": {key: {"result": ...}}}``.

    Returns:
        NodeOutcome: ``succeeded`` with ``{task_id, context_id, state, text, artifacts}``, ``failed`` with a
        one-line error, or ``stopped``.
    """
    if not a2a_available():
        return NodeOutcome("failed", error=MISSING_EXTRA)
    prior = [t for t in svc.journal.remote_tasks(run_id) if t["node_key"] == node.key]
    if prior:  # a runner died while this node was following its task: never send the message twice
        t = prior[0]
        what = (f"task {t['task_id']} (last state {t['state']})" if t["task_id"]
                else "a message whose task id is unknown")
        return NodeOutcome("failed", error=f"the runner stopped while this node was following {what} at {t['url']}; "
                                           "it is not sent or followed again")
    try:
        text = render(node.message, context)
    except ConfigError as exc:
        return NodeOutcome("failed", error=exc.line())
    if not isinstance(text, str):
        text = json.dumps(text, ensure_ascii=False)
    try:
        _check_url(node.url or "", "url")
    except RemoteError as exc:
        return NodeOutcome("failed", error=str(exc))
    svc.journal.start_remote_task(run_id, node.key, node.url or "", at=svc.now())
    return asyncio.run(_follow(svc, run_id, node, text))


# -- the cancel ---------------------------------------------------------------


async def _send_cancel(url: str, task_id: str) -> tuple[str, str]:
    """One ``CancelTask`` request; return (the task's state, the answer as one line "task state canceled: ...")."""
    from a2a.types import CancelTaskRequest

    async with _http_client(CANCEL_TIMEOUT) as http:
        client = await asyncio.wait_for(_client(http, url), CANCEL_TIMEOUT)
        try:
            task = await asyncio.wait_for(client.cancel_task(CancelTaskRequest(id=task_id)), CANCEL_TIMEOUT)
        finally:
            await client.close()
    detail = _status_text(task)
    state = _state_name(task.status.state)
    return state, f"task state {state}" + (f": {detail}" if detail else "")


def cancel_open_tasks(svc: Context, run_id: str) -> None:
    """Send one best-effort ``CancelTask`` to each non-terminal remote task of the run (R-C10).

    Called when a run is marked failed or stopped, and again by ``resume`` (a no-op
    for tasks already handled). Per task with a task id, not in a terminal state and
    with no cancel yet: ``cancel_status = 'sending'`` is committed, then exactly one
    request is sent, then ``sent`` or ``error`` with the answer (cut to 64 KiB) is
    saved. A ``sending`` row left by a runner that died is marked ``unknown`` and
    never sent again. Each outcome is a message on the node.

    Args:
        svc: services.
        run_id: a run that is ``failed`` or ``stopped``.
    """
    tasks = svc.journal.remote_tasks(run_id)
    if not tasks:
        return
    for t in tasks:
        key, task_id = t["node_key"], t["task_id"]
        if t["cancel_status"] == "sending":
            answer = "the runner stopped while this cancel was being sent; it is not sent again (R-C10)"
            svc.journal.remote_cancel(run_id, key, status="unknown", answer=answer, at=svc.now())
            svc.say(run_id, key, "warning", f"cancel of remote task {task_id}: outcome unknown: {answer}")
            continue
        if t["cancel_status"] is not None or not task_id or t["state"] in TERMINAL_STATES:
            continue
        if not a2a_available():
            svc.journal.remote_cancel(run_id, key, status="error", answer=MISSING_EXTRA, at=svc.now())
            svc.say(run_id, key, "error", f"cancel of remote task {task_id} not sent: {MISSING_EXTRA}")
            continue
        svc.journal.remote_cancel(run_id, key, status="sending", at=svc.now())
        try:
            state, answer = asyncio.run(_send_cancel(t["url"], task_id))
        except Exception as exc:  # noqa: BLE001 - best effort: any error is recorded, never retried
            error = _one_line(_error_text(exc))
            svc.journal.remote_cancel(run_id, key, status="error", answer=error, at=svc.now())
            svc.say(run_id, key, "warning", f"one cancel for remote task {task_id} to {t['url']}: "
                    f"error: {error} (not retried, R-C10)")
            continue
        answer = _one_line(answer)
        svc.journal.remote_cancel(run_id, key, status="sent", answer=answer, state=state, at=svc.now())
        svc.say(run_id, key, "info", f"sent one cancel for remote task {task_id} to {t['url']}; answer: {answer}")
