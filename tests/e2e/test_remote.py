"""End-to-end tests of remote agent nodes (issue 7, R-C10) against a real A2A server on loopback.

The server is built with ``a2a-sdk`` and runs in a thread of the test process
(uvicorn on a free 127.0.0.1 port); the runner is the real CLI in a subprocess.
The agent does what the message says: ``fast TEXT`` completes at once with
``TEXT`` upper-cased as a text artifact; ``slow N`` works N seconds. The server
records every request it receives (JSON-RPC method name, or ``GET <path>``) in
arrival order, so a test can check that exactly one ``CancelTask`` arrived and
that nothing came after it.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("a2a.server.routes")
uvicorn = pytest.importorskip("uvicorn")

from a2a.helpers import new_task_from_user_message, new_text_part  # noqa: E402
from a2a.server.agent_execution import AgentExecutor, RequestContext  # noqa: E402
from a2a.server.events import EventQueue  # noqa: E402
from a2a.server.request_handlers import DefaultRequestHandler  # noqa: E402
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes  # noqa: E402
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater  # noqa: E402
from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill  # noqa: E402
from starlette.applications import Starlette  # noqa: E402
from starlette.responses import RedirectResponse  # noqa: E402
from starlette.routing import Route  # noqa: E402

SLOW = 60  # seconds a slow task works: longer than any test waits for it


class _Executor(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        words = context.get_user_input().split(maxsplit=1)
        task = context.current_task or new_task_from_user_message(context.message)
        await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        await updater.start_work()
        if words[0] == "slow":
            await asyncio.sleep(float(words[1]))
        text = words[1] if len(words) > 1 else ""
        await updater.add_artifact([new_text_part(text.upper())], name="answer")
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


class Agent:
    """A real A2A server: ``url``, ``requests`` (names in arrival order), ``count(name)``."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/"
        self.requests: list[str] = []
        card = AgentCard(
            name="test agent", description="fast/slow", version="1",
            default_input_modes=["text/plain"], default_output_modes=["text/plain"],
            capabilities=AgentCapabilities(streaming=False),
            supported_interfaces=[AgentInterface(url=self.url, protocol_binding="JSONRPC", protocol_version="1.0")],
            skills=[AgentSkill(id="s", name="s", description="s", tags=["t"])])
        handler = DefaultRequestHandler(agent_executor=_Executor(), task_store=InMemoryTaskStore(), agent_card=card)
        redirect = Route("/moved/.well-known/agent-card.json",
                         lambda request: RedirectResponse(self.url + ".well-known/agent-card.json", 307))
        app = Starlette(routes=[*create_agent_card_routes(card), *create_jsonrpc_routes(handler, "/"), redirect])
        self.server = uvicorn.Server(uvicorn.Config(self._recording(app), log_level="error", lifespan="off"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def _recording(self, app: Any) -> Any:
        async def wrapped(scope: dict[str, Any], receive: Any, send: Any) -> None:
            if scope["type"] != "http":
                return await app(scope, receive, send)
            messages, body = [], b""
            while True:
                message = await receive()
                messages.append(message)
                body += message.get("body", b"")
                if not message.get("more_body"):
                    break
            name = f"{scope['method']} {scope['path']}"
            if scope["method"] == "POST":
                try:
                    name = json.loads(body)["method"]
                except (ValueError, KeyError, TypeError):
                    pass
            self.requests.append(name)

            async def replay() -> dict[str, Any]:
                return messages.pop(0) if messages else await receive()

            await app(scope, replay, send)

        return wrapped

    def count(self, name: str) -> int:
        return Counter(self.requests)[name]

    def wait_for(self, name: str, timeout: float = 30) -> None:
        end = time.monotonic() + timeout
        while self.count(name) == 0:
            assert time.monotonic() < end, f"the agent never received {name}: {self.requests}"
            time.sleep(0.05)


@pytest.fixture
def agent() -> Iterator[Agent]:
    a = Agent()
    a.thread.start()
    end = time.monotonic() + 30
    while not a.server.started:
        assert time.monotonic() < end, "the test A2A server did not start"
        time.sleep(0.02)
    yield a
    a.server.should_exit = a.server.force_exit = True
    a.thread.join(5)


def _remote(key: str, url: str, message: str, timeout: float = 60) -> str:
    return f'[nodes.{key}]\nkind = "remote_agent"\nurl = "{url}"\nmessage = "{message}"\ntimeout = {timeout}\n'


def _task(view: dict[str, Any], key: str) -> dict[str, Any]:
    return next(t for t in view["remote_tasks"] if t["node_key"] == key)


def _texts(view: dict[str, Any], key: str) -> list[str]:
    return [m["text"] for n in view["nodes"] if n["node_key"] == key for m in n["messages"]]


def _slow_and_failing(write_workflow, marker_project: Path, url: str) -> Path:
    return write_workflow("slowfail", _remote("remote", url, f"slow {SLOW}") + f"""
[nodes.bad]
project = "{marker_project}"
app = "mark"
input = {{ name = "bad", fail = true }}
""")


def _start(args: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "workrun", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, **(env or {})})


def _wait_task_recorded(workrun, timeout: float = 90) -> str:
    """Wait until the journal knows the (only) run's remote task id; return the run id."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        runs = workrun("runs", "list", "--json").json()
        if runs:
            view = workrun("runs", "show", runs[0]["run_id"], "--json").json()
            if view["remote_tasks"] and view["remote_tasks"][0]["task_id"]:
                return runs[0]["run_id"]
        time.sleep(0.1)
    raise AssertionError("the remote task id was never journaled")


def test_completed_task_feeds_downstream_node(workrun, write_workflow, marker_project, agent):
    wf = write_workflow("ok", _remote("ask", agent.url, "fast hello agent") + f"""
[nodes.use]
project = "{marker_project}"
app = "mark"
input = {{ name = "{{{{ nodes.ask.result.text }}}}" }}
""")
    res = workrun("run", wf, "--json")
    assert res.code == 0, res
    view = res.json()
    ask = next(n for n in view["nodes"] if n["node_key"] == "ask")
    assert ask["status"] == "succeeded"
    assert ask["result"]["state"] == "completed" and ask["result"]["text"] == "HELLO AGENT"
    assert [a["text"] for a in ask["result"]["artifacts"]] == ["HELLO AGENT"]
    use = next(o for o in view["operations"] if o["node_key"] == "use")
    assert use["input"] == {"name": "HELLO AGENT"} and use["result"]["name"] == "HELLO AGENT"
    task = _task(view, "ask")
    assert task["task_id"] == ask["result"]["task_id"] and task["state"] == "completed"
    assert task["cancel_status"] is None
    assert agent.count("SendMessage") == 1 and agent.count("CancelTask") == 0


def test_slow_task_and_failing_sibling_get_exactly_one_cancel(workrun, write_workflow, marker_project, agent):
    """R-C10: the run fails through `bad`; the working task gets one cancel and nothing after it."""
    t0 = time.monotonic()
    res = workrun("run", _slow_and_failing(write_workflow, marker_project, agent.url), "--json")
    assert res.code == 1, res
    assert time.monotonic() - t0 < SLOW, "the runner waited for the remote task instead of giving it up"
    view = res.json()
    assert {n["node_key"]: n["status"] for n in view["nodes"]} == {"remote": "failed", "bad": "failed"}
    assert view["reason"] == "node 'bad' failed"
    assert agent.count("CancelTask") == 1
    assert agent.requests[-1] == "CancelTask", agent.requests
    task = _task(view, "remote")
    assert task["cancel_status"] == "sent" and task["cancel_answer"] == "task state canceled"
    assert task["state"] == "canceled"
    texts = _texts(view, "remote")
    assert any("stopped following task" in t and "node 'bad' failed" in t for t in texts), texts
    assert any(t.startswith(f"sent one cancel for remote task {task['task_id']}") and t.endswith("canceled")
               for t in texts), texts
    # the cancel is never sent again: not by a resume, not by showing the run
    assert workrun("resume").code in (0, 1)
    assert agent.count("CancelTask") == 1 and agent.requests[-1] == "CancelTask"


def test_completed_task_then_failure_gets_no_cancel(workrun, write_workflow, marker_project, agent):
    wf = write_workflow("donefail", _remote("remote", agent.url, "fast done") + f"""
[nodes.bad]
project = "{marker_project}"
app = "mark"
input = {{ name = "bad", fail = true }}
needs = ["remote"]
""")
    res = workrun("run", wf, "--json")
    assert res.code == 1, res
    view = res.json()
    assert _task(view, "remote")["state"] == "completed"
    assert _task(view, "remote")["cancel_status"] is None
    assert agent.count("SendMessage") == 1 and agent.count("CancelTask") == 0
    assert not any("cancel" in t for t in _texts(view, "remote"))


def test_node_timeout_fails_the_node_and_cancels_once(workrun, write_workflow, agent):
    res = workrun("run", write_workflow("timeout", _remote("remote", agent.url, f"slow {SLOW}", timeout=1.5)), "--json")
    assert res.code == 1, res
    view = res.json()
    assert any("did not finish within the node's timeout (1.5 s)" in t for t in _texts(view, "remote"))
    assert agent.count("CancelTask") == 1 and agent.requests[-1] == "CancelTask", agent.requests
    assert _task(view, "remote")["state"] == "canceled"


@pytest.mark.parametrize("how", ["sigint", "workrun stop"])
def test_stop_during_task_sends_one_cancel(workrun, write_workflow, agent, how):
    wf = write_workflow("stop", _remote("remote", agent.url, f"slow {SLOW}"))
    proc = _start(["run", str(wf)])
    try:
        run_id = _wait_task_recorded(workrun)
        t0 = time.monotonic()
        if how == "sigint":
            proc.send_signal(signal.SIGINT)
        else:
            assert workrun("stop", run_id).code == 0
        assert proc.wait(SLOW) == 130, proc.stderr.read() if proc.stderr else ""
        assert time.monotonic() - t0 < SLOW / 2  # the task was given up, not waited out
    finally:
        if proc.poll() is None:
            proc.kill()
    view = workrun("runs", "show", run_id, "--json").json()
    assert view["status"] == "stopped"
    assert view["nodes"][0]["status"] == "stopped"
    assert agent.count("CancelTask") == 1 and agent.requests[-1] == "CancelTask", agent.requests
    assert _task(view, "remote")["cancel_status"] == "sent"
    assert any(t.startswith("sent one cancel") for t in _texts(view, "remote"))


def test_runner_killed_while_task_runs_then_resume_sends_one_cancel(workrun, write_workflow, agent):
    """The message is not sent again, the node fails, the task gets one cancel; a second resume sends nothing."""
    wf = write_workflow("kill", _remote("remote", agent.url, f"slow {SLOW}"))
    proc = _start(["run", str(wf)])
    try:
        run_id = _wait_task_recorded(workrun)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    assert agent.count("CancelTask") == 0
    for _ in range(2):  # the exit code is about compensation (SPEC §10); this run has none
        res = workrun("resume", "--json")
        assert res.code in (0, 1), res
    view = workrun("runs", "show", run_id, "--json").json()
    assert view["status"] == "failed" and view["nodes"][0]["status"] == "failed"
    assert any("not sent or followed again" in t for t in _texts(view, "remote"))
    assert agent.count("SendMessage") == 1
    assert agent.count("CancelTask") == 1 and agent.requests[-1] == "CancelTask", agent.requests
    assert _task(view, "remote")["cancel_status"] == "sent"


@pytest.mark.parametrize("point, cancels, status", [
    ("run.failed", 1, "sent"),        # killed after final failure was committed, before the cancel: resume sends it
    ("remote.cancel", 0, "unknown"),  # killed after 'sending' was committed: never sent, never re-sent
])
def test_killed_around_the_cancel(workrun, write_workflow, marker_project, agent, point, cancels, status):
    wf = _slow_and_failing(write_workflow, marker_project, agent.url)
    first = workrun("run", wf, "--json", env={"WORKRUN_FAULT": point})
    assert first.code == -signal.SIGKILL, first
    assert agent.count("CancelTask") == 0
    for _ in range(2):
        assert workrun("resume").code in (0, 1)
    run_id = workrun("runs", "list", "--json").json()[0]["run_id"]
    view = workrun("runs", "show", run_id, "--json").json()
    assert view["status"] == "failed"
    assert agent.count("CancelTask") == cancels
    assert _task(view, "remote")["cancel_status"] == status
    if status == "unknown":
        assert any("outcome unknown" in t for t in _texts(view, "remote"))


def test_redirect_is_not_followed(workrun, write_workflow, agent):
    res = workrun("run", write_workflow("moved", _remote("remote", agent.url + "moved/", "fast x")), "--json")
    assert res.code == 1, res
    error = [t for t in _texts(res.json(), "remote") if "remote: failed" in t][0]
    assert "redirect" in error and "307" in error
    assert agent.requests == ["GET /moved/.well-known/agent-card.json"]


def test_missing_a2a_package_names_the_extra(workrun, write_workflow, agent, tmp_path):
    hidden = tmp_path / "hide"
    (hidden / "a2a").mkdir(parents=True)
    (hidden / "a2a" / "__init__.py").write_text("raise ImportError('a2a hidden by the test')\n")
    wf = write_workflow("noextra", _remote("remote", agent.url, "fast x"))
    res = workrun("run", wf, "--json", env={"PYTHONPATH": str(hidden)})
    assert res.code == 2, res  # a config error before anything runs: no run is created
    assert res.err.count("\n") == 1 and "nodes.remote.kind" in res.err and "pip install 'workrun[a2a]'" in res.err
    assert workrun("runs", "list", "--json").json() == []
    assert agent.requests == []
