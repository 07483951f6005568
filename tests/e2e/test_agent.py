"""End-to-end tests of agent nodes with Tool Apps (issue 5; R-A2, R-C5, SPEC §9 ``kind = "agent"``).

Real uv App projects, the real CLI in a subprocess; the OpenAI-compatible
backend talks real HTTP to a chat-completions server on 127.0.0.1 that the
test starts; the confirmation prompt is answered through a real pty.
"""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
ALWAYS_FAIL = ROOT / "demo_apps/always_fail"

TOOLS_TOML = """
[tool.workrun.apps.tk]
kind = "tool"
entry = "tools.py"
timeout = 60
compensation = { entry = "compensate.py", max_retries = 0 }

[tool.workrun.apps.tk.output]
name = { type = "string", required = true }

[tool.workrun.apps.tk.tools.guarded]
confirm = "always"

[tool.workrun.apps.proc]
kind = "process"
entry = "main.py"
timeout = 60
compensation = { entry = "compensate.py", max_retries = 0 }
"""

TOOLS_PY = """
from workrun_sdk import process
from workrun_sdk.tool import tool


@tool(name="make", description="Make a marker named NAME.")
def make(name: str, size: int = 1) -> dict:
    process.resource("marker", name)
    return {"name": name, "size": size}


@tool(name="explode", description="Always fails.")
def explode(name: str) -> dict:
    raise RuntimeError(f"explode {name}")


@tool(name="guarded", description="Needs a yes first.")
def guarded(name: str) -> dict:
    return {"name": name}
"""

MAIN_PY = """
from workrun_sdk import process
process.result({"name": process.input()["name"]})
"""

# One compensate.py for the Process App and the Tool App (as in the tutorial).
COMPENSATE_PY = """
import json, os
from workrun_sdk import compensation
ctx = compensation.context()
name = ctx.original_result["name"]
if name.startswith("cfail"):
    raise SystemExit(4)
with open(os.environ["TEST_LOG"], "a") as fh:
    fh.write(json.dumps({"name": name, "cid": ctx.compensation_id, "op": ctx.original_operation_id,
                         "resources": ctx.resources}) + "\\n")
compensation.result({"undone": name})
"""


@pytest.fixture
def tool_project(make_project: Callable[..., Path]) -> Path:
    """Tool App ``tk`` (tools ``make``, ``explode``, ``guarded`` with confirm = "always") and Process App
    ``proc``, sharing ``compensate.py`` which appends ``{name, cid, op, resources}`` to ``$TEST_LOG``
    (and fails for names starting with ``cfail``)."""
    return make_project("agenttools", TOOLS_TOML, {"tools.py": TOOLS_PY, "main.py": MAIN_PY,
                                                   "compensate.py": COMPENSATE_PY})


@pytest.fixture
def log(tmp_path: Path) -> Path:
    return tmp_path / "comp.jsonl"


def _logged(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def _ops(view: dict[str, Any], node: str) -> list[dict[str, Any]]:
    return sorted((o for o in view["operations"] if o["node_key"] == node), key=lambda o: o["tool_call_index"] or 0)


def _node(view: dict[str, Any], key: str) -> dict[str, Any]:
    return next(n for n in view["nodes"] if n["node_key"] == key)


def _agent_workflow(write_workflow: Callable[..., Path], project: Path, script: str, *, extra: str = "",
                    upstream: bool = False, boom: bool = True, name: str = "agent") -> Path:
    text = ""
    if upstream:
        text += f"""
[nodes.up]
project = "{project}"
app = "proc"
input = {{ name = "up" }}
"""
    text += f"""
[nodes.agent]
kind = "agent"
tools = [{{ project = "{project}", app = "tk" }}]
prompt = "do it"
script = {script}
{extra}
{'needs = ["up"]' if upstream else ''}
"""
    if boom:
        text += f"""
[nodes.boom]
project = "{ALWAYS_FAIL}"
app = "always-fail"
needs = ["agent"]
"""
    return write_workflow(name, text)


# -- the tutorial's agent part -----------------------------------------------------------


def test_demo_two_identical_calls_are_two_compensations(workrun):
    """R-C5: the demo agent calls create_demo_file twice with the same input -> two operations, two
    compensations with their own ids, both succeeded, newest first; both files removed."""
    res = workrun("run", ROOT / "demo_apps/workflows/agent.toml", "--json", env={"WORKRUN_CONCURRENCY": "1"})
    assert res.code == 1, res
    view = res.json()
    assert {n["node_key"]: n["status"] for n in view["nodes"]} == {"agent": "succeeded", "boom": "failed"}
    first, second = ops = _ops(view, "agent")
    assert [o["tool_call_index"] for o in ops] == [0, 1]
    assert [o["tool"] for o in ops] == ["create_demo_file", "create_demo_file"]
    assert first["input"] == second["input"] == {"text": "Hello from an agent"}  # script args rendered
    assert first["operation_id"] != second["operation_id"]
    assert [o["status"] for o in ops] == ["succeeded", "succeeded"]
    assert [o["depends_on"] for o in ops] == [[], []]
    boom = _ops(view, "boom")[0]
    assert sorted(boom["depends_on"]) == sorted(o["operation_id"] for o in ops)
    paths = [Path(o["result"]["file_path"]) for o in ops]
    assert paths[0] != paths[1]
    comps = [o["compensation"] for o in ops]
    assert comps[0]["compensation_id"] != comps[1]["compensation_id"]
    for op, comp, path in zip(ops, comps, paths, strict=True):
        assert op["resources"] == [{"kind": "file", "id": str(path)}]
        assert comp["status"] == "succeeded"
        assert comp["context"]["original_operation_id"] == op["operation_id"]
        assert comp["result"] == {"removed_file": str(path.resolve())}
        assert not path.exists()
    # newest call first (one at a time with WORKRUN_CONCURRENCY=1)
    assert comps[1]["attempts"][0]["ended_at"] <= comps[0]["attempts"][0]["started_at"]
    calls = _node(view, "agent")["result"]["tool_calls"]
    assert [c["operation_id"] for c in calls] == [o["operation_id"] for o in ops]
    assert _node(view, "agent")["result"]["answer"] == "Created two demo files."


def test_failed_tool_call_is_skipped_and_calls_depend_on_upstream(workrun, write_workflow, tool_project, log):
    """R-C5: a tool call that failed is not compensated; the successful ones are, newest first, and the
    agent's upstream call is compensated after them (its calls depend on it)."""
    wf = _agent_workflow(write_workflow, tool_project, """[
        { tool = "make", args = { name = "a" } },
        { tool = "explode", args = { name = "x" } },
        { tool = "make", args = { name = "b", size = 2 } },
    ]""", upstream=True)
    res = workrun("run", wf, "--json", env={"TEST_LOG": str(log), "WORKRUN_CONCURRENCY": "1"})
    assert res.code == 1, res
    view = res.json()
    assert _node(view, "agent")["status"] == "succeeded"  # a failed tool call is an observation, not the end
    up = _ops(view, "up")[0]
    a, x, b = _ops(view, "agent")
    assert [o["status"] for o in (a, x, b)] == ["succeeded", "failed", "succeeded"]
    assert "RuntimeError: explode x" in x["error"]
    assert x["compensation"] is None
    assert b["input"] == {"name": "b", "size": 2} and b["result"] == {"name": "b", "size": 2}
    for o in (a, x, b):
        assert o["depends_on"] == [up["operation_id"]]
    assert [e["name"] for e in _logged(log)] == ["b", "a", "up"]
    assert [e["cid"] for e in _logged(log)] == [o["compensation"]["compensation_id"] for o in (b, a, up)]
    assert _logged(log)[0]["resources"] == [{"kind": "marker", "id": "b"}]
    texts = [m["text"] for m in _node(view, "agent")["messages"]]
    assert any(t.startswith(f"tool call 1 explode (operation {x['operation_id']}): failed") for t in texts)


def test_failing_tool_compensation_holds_back_upstream_not_sibling(workrun, write_workflow, tool_project, log):
    """Issue 5 ordering: tool calls of one node are independent for hold-back; the upstream call waits."""
    wf = _agent_workflow(write_workflow, tool_project, """[
        { tool = "make", args = { name = "cfail-a" } },
        { tool = "make", args = { name = "b" } },
    ]""", upstream=True)
    res = workrun("run", wf, "--json", env={"TEST_LOG": str(log)})
    assert res.code == 1, res
    view = res.json()
    a, b = _ops(view, "agent")
    assert a["compensation"]["status"] == "failed"
    assert b["compensation"]["status"] == "succeeded"
    up = _ops(view, "up")[0]["compensation"]
    assert up["status"] == "blocked"
    assert a["compensation"]["compensation_id"] in up["reason"]
    assert b["compensation"]["compensation_id"] not in up["reason"]
    assert [e["name"] for e in _logged(log)] == ["b"]


@pytest.mark.parametrize("ending, error", [
    ("fail_answer = true", "the agent failed to answer"),
    ("", "model failed: the model broke"),
])
def test_agent_failure_after_calls_still_compensates(workrun, write_workflow, tool_project, log, ending, error):
    """R-C5: calls that succeeded are compensated even though the agent then failed (no answer / model error)."""
    script = '[{ tool = "make", args = { name = "a" } }, { tool = "make", args = { name = "a" } }' + (
        ', { error = "the model broke" }, { tool = "make", args = { name = "never" } }]' if not ending else "]")
    wf = _agent_workflow(write_workflow, tool_project, script, extra=ending, boom=False)
    res = workrun("run", wf, "--json", env={"TEST_LOG": str(log)})
    assert res.code == 1, res
    view = res.json()
    assert view["status"] == "failed"
    agent = _node(view, "agent")
    assert agent["status"] == "failed"
    assert any(error in m["text"] for m in agent["messages"])
    ops = _ops(view, "agent")
    assert [o["input"] for o in ops] == [{"name": "a"}, {"name": "a"}]
    assert [o["compensation"]["status"] for o in ops] == ["succeeded", "succeeded"]
    assert sorted(e["op"] for e in _logged(log)) == sorted(o["operation_id"] for o in ops)


# -- approval ----------------------------------------------------------------------------


def test_confirm_without_terminal_fails_clearly_and_yes_approves(workrun, write_workflow, tool_project, log):
    """Approval: confirm = "always" with no terminal and no --yes fails the node and says why; with --yes the
    call runs; compensation (no terminal either) never asks and succeeds."""
    wf = _agent_workflow(write_workflow, tool_project, """[
        { tool = "make", args = { name = "a" } },
        { tool = "guarded", args = { name = "g" } },
    ]""")
    res = workrun("run", wf, input="", env={"TEST_LOG": str(log)})  # human output; stdin is not a terminal
    assert res.code == 1, res
    assert "Call tool" not in res.out
    view = workrun("runs", "show", workrun("runs", "list", "--json").json()[0]["run_id"], "--json").json()
    agent = _node(view, "agent")
    assert agent["status"] == "failed"
    assert any("tool 'guarded' of App 'tk' asks for confirmation (confirm = \"always\") and there is no terminal; "
               "pass --yes to approve" in m["text"] for m in agent["messages"])
    assert [o["tool"] for o in view["operations"]] == ["make"]  # the guarded call was never made
    assert _node(view, "boom")["status"] == "skipped"
    assert view["operations"][0]["compensation"]["status"] == "succeeded"

    log.unlink()
    res = workrun("run", wf, "--yes", "--json", input="", env={"TEST_LOG": str(log)})
    assert res.code == 1, res
    view = res.json()
    ops = _ops(view, "agent")
    assert [(o["tool"], o["status"]) for o in ops] == [("make", "succeeded"), ("guarded", "succeeded")]
    assert [o["compensation"]["status"] for o in ops] == ["succeeded", "succeeded"]
    assert sorted(e["name"] for e in _logged(log)) == ["a", "g"]


def _run_on_pty(args: list[str], answer: str, env: dict[str, str], timeout: float = 90) -> tuple[int, str]:
    """Run the CLI with stdin/stdout/stderr on a pty; type ``answer`` when the prompt shows. -> (exit code, output)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "workrun", *args], stdin=slave, stdout=slave, stderr=slave,
                            env={**os.environ, **env}, close_fds=True, start_new_session=True)
    os.close(slave)
    out = b""
    answered = False
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            exited = proc.poll() is not None  # before the select: what it wrote before exiting is read below
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(master, 4096)
                except OSError:  # EIO: the child closed the terminal
                    break
                if not chunk:
                    break
                out += chunk
            if not answered and b"[y/N]: " in out:
                os.write(master, answer.encode() + b"\n")
                answered = True
            if exited and not ready:
                break
        code = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    return code, out.decode(errors="replace").replace("\r\n", "\n")


@pytest.mark.parametrize("answer", ["y", "n"])
def test_confirmation_prompt_on_a_real_terminal(workrun, write_workflow, tool_project, log, answer):
    """Approval on a terminal: the prompt shows once, for the normal call; compensation, in the same
    command and with the same terminal, never asks."""
    wf = _agent_workflow(write_workflow, tool_project, """[
        { tool = "make", args = { name = "a" } },
        { tool = "guarded", args = { name = "g" } },
    ]""")
    code, out = _run_on_pty(["run", str(wf)], answer, {"TEST_LOG": str(log)})
    assert code == 1, out
    prompt = "Call tool 'guarded' of App 'tk' with {\"name\": \"g\"}? [y/N]: "
    assert out.count(prompt) == 1, out
    assert out.count("Call tool") == 1, out  # nothing asked for the other call or for compensation
    view = workrun("runs", "show", workrun("runs", "list", "--json").json()[0]["run_id"], "--json").json()
    ops = _ops(view, "agent")
    if answer == "y":
        assert [(o["tool"], o["status"]) for o in ops] == [("make", "succeeded"), ("guarded", "succeeded")]
        assert _node(view, "boom")["status"] == "failed"
    else:
        assert [o["tool"] for o in ops] == ["make"]
        assert any("tool call 'guarded' was declined on the terminal" in m["text"]
                   for m in _node(view, "agent")["messages"])
    assert all(o["compensation"]["status"] == "succeeded" for o in ops)
    assert len(_logged(log)) == len(ops)
    assert out.index(prompt) < out.index("compensation ")


# -- the OpenAI-compatible backend ---------------------------------------------------------


class _ChatServer:
    """A tiny chat-completions server on 127.0.0.1: answers each POST with the next scripted response.

    ``replies``: a list of ``(http status, body dict)``; requests (path, headers, JSON body) are kept.
    """

    def __init__(self, replies: list[tuple[int, dict[str, Any]]]) -> None:
        self.replies = list(replies)
        self.requests: list[dict[str, Any]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append({"path": self.path, "auth": self.headers.get("Authorization"),
                                        "body": body})
                status, reply = server.replies.pop(0) if server.replies else (500, {"error": {"message": "over"}})
                data = json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> _ChatServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _completion(message: dict[str, Any], finish: str) -> dict[str, Any]:
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 1700000000, "model": "test-model",
            "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}


def _tool_call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def test_openai_backend_against_loopback_server(workrun, write_workflow, tool_project, log):
    """OpenAI-compatible backend over real HTTP: the discovered tools are sent as functions, three tool calls in
    one assistant message are queued (two identical -> two operations; one with bad JSON arguments -> not
    called, reported back), each outcome goes back as a role=tool message, then the final answer."""
    replies = [
        (200, _completion({"content": None, "tool_calls": [
            _tool_call("call_1", "make", json.dumps({"name": "x"})),
            _tool_call("call_2", "make", json.dumps({"name": "x"})),
            _tool_call("call_3", "make", "{not json"),
        ]}, "tool_calls")),
        (200, _completion({"content": "Made two markers."}, "stop")),
    ]
    with _ChatServer(replies) as server:
        wf = _agent_workflow(write_workflow, tool_project, "[]",
                             extra=f'model = "test-model"\nbase_url = "{server.url}"')
        res = workrun("run", wf, "--json", env={"TEST_LOG": str(log), "OPENAI_API_KEY": "sk-test-123",
                                                "OPENAI_BASE_URL": "http://127.0.0.1:9/unused"})
    assert res.code == 1, res
    view = res.json()
    agent = _node(view, "agent")
    assert agent["status"] == "succeeded"
    assert agent["result"]["answer"] == "Made two markers."
    ops = _ops(view, "agent")
    assert [(o["tool"], o["input"], o["status"]) for o in ops] == [("make", {"name": "x"}, "succeeded")] * 2
    assert ops[0]["operation_id"] != ops[1]["operation_id"]
    assert [o["compensation"]["status"] for o in ops] == ["succeeded", "succeeded"]
    assert len({o["compensation"]["compensation_id"] for o in ops}) == 2
    assert len(_logged(log)) == 2

    assert len(server.requests) == 2
    first, second = (r["body"] for r in server.requests)
    assert all(r["path"] == "/v1/chat/completions" for r in server.requests)
    assert all(r["auth"] == "Bearer sk-test-123" for r in server.requests)
    assert first["model"] == "test-model"
    assert [m["role"] for m in first["messages"]] == ["system", "user"]
    assert first["messages"][1]["content"] == "do it"
    functions = {t["function"]["name"]: t for t in first["tools"]}
    assert sorted(functions) == ["explode", "guarded", "make"]
    assert functions["make"] == {"type": "function", "function": {
        "name": "make", "description": "Make a marker named NAME.",
        "parameters": {"type": "object", "properties": {"name": {"type": "string"},
                                                        "size": {"type": "integer", "default": 1}},
                       "required": ["name"], "additionalProperties": False}}}
    roles = [m["role"] for m in second["messages"]]
    assert roles == ["system", "user", "assistant", "tool", "tool", "tool"]
    assert [c["id"] for c in second["messages"][2]["tool_calls"]] == ["call_1", "call_2", "call_3"]
    outcomes = {m["tool_call_id"]: json.loads(m["content"]) for m in second["messages"][3:]}
    assert outcomes["call_1"] == {"status": "succeeded", "result": {"name": "x", "size": 1}, "error": None}
    assert outcomes["call_2"]["status"] == "succeeded"
    assert outcomes["call_3"]["status"] == "not called"
    assert "not valid JSON" in outcomes["call_3"]["error"]


def test_openai_backend_http_error_after_a_call_compensates(workrun, write_workflow, tool_project, log):
    """A model request that fails (HTTP 400) after a successful tool call fails the node; the call is compensated."""
    replies = [
        (200, _completion({"content": "", "tool_calls": [_tool_call("c1", "make", '{"name": "y"}')]}, "tool_calls")),
        (400, {"error": {"message": "context too long", "type": "invalid_request_error"}}),
    ]
    with _ChatServer(replies) as server:
        wf = _agent_workflow(write_workflow, tool_project, "[]", boom=False,
                             extra=f'model = "test-model"\nbase_url = "{server.url}"')
        res = workrun("run", wf, "--json", env={"TEST_LOG": str(log)})  # no key: a base_url server needs none
    assert res.code == 1, res
    view = res.json()
    agent = _node(view, "agent")
    assert agent["status"] == "failed"
    assert any("model request failed: HTTP 400" in m["text"] and "context too long" in m["text"]
               for m in agent["messages"])
    (op,) = _ops(view, "agent")
    assert op["compensation"]["status"] == "succeeded"
    assert [e["name"] for e in _logged(log)] == ["y"]
    assert server.requests[0]["auth"] == "Bearer unused"


def test_openai_backend_without_package_names_the_extra(monkeypatch):
    """Missing ``openai`` package -> a WorkrunError naming the extra ``workrun[openai]``."""
    from workrun.core.errors import WorkrunError
    from workrun.core.models import AgentNode
    from workrun.nodes.agent.openai_backend import OpenAIBackend

    monkeypatch.setitem(sys.modules, "openai", None)  # makes `import openai` raise ImportError
    node = AgentNode(key="a", kind="agent", model="m", base_url="http://127.0.0.1:9/v1")
    with pytest.raises(WorkrunError, match=r"workrun\[openai\]"):
        OpenAIBackend(node, "p", [])


# -- tools listing and config errors ---------------------------------------------------------


def test_app_list_shows_apps_and_tools(workrun, tool_project):
    res = workrun("app", "list", tool_project, "--json")
    assert res.code == 0, res
    rows = {r["app"]: r for r in res.json()}
    assert rows["proc"]["kind"] == "process" and rows["proc"]["tools"] == []
    tools = {t["name"]: t for t in rows["tk"]["tools"]}
    assert sorted(tools) == ["explode", "guarded", "make"]
    assert tools["explode"] == {"name": "explode", "description": "Always fails.", "input_schema": {
        "type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"],
        "additionalProperties": False}}
    human = workrun("app", "list", tool_project)
    assert human.code == 0, human
    assert "guarded (confirm)" in human.out and "make" in human.out
    here = workrun("app", "list", "--json", cwd=tool_project)  # PROJECT_DIR defaults to the current directory
    assert here.code == 0 and here.json() == res.json(), here


def test_app_commands_say_one_error_line_of_a_project_with_several(workrun, make_project):
    """SPEC §10: one error line (only check and run list every error, R-L1), however many Apps are wrong."""
    project = make_project("twobad", """
        [tool.workrun.apps.a]
        entry = "main.py"
        timeout = "60"
        [tool.workrun.apps.b]
        entry = "main.py"
        bogus = 1
    """, {"main.py": "print('hi')\n"})
    for args in (("app", "list", project), ("app", "run", project, "a")):
        res = workrun(*args)
        assert res.code == 2 and res.err.count("\n") == 1, res
        assert res.err.startswith(f"error: {project / 'pyproject.toml'}: tool.workrun.apps.a.timeout: "), res


def test_unsupported_hint_is_a_clear_error_at_discovery(workrun, make_project):
    project = make_project("badhint", """
        [tool.workrun.apps.bad]
        kind = "tool"
        entry = "tools.py"
    """, {"tools.py": """
        from workrun_sdk.tool import tool

        @tool(name="t", description="d")
        def t(x: set) -> dict:
            return {}
    """})
    res = workrun("app", "list", project)
    assert res.code == 2, res
    lines = res.err.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"error: {project / 'tools.py'}: tool.workrun.apps.bad.entry: ")
    assert "tool t: parameter 'x': unsupported type hint" in lines[0]


def test_script_step_without_tool_is_a_config_error(workrun, write_workflow, tool_project):
    wf = _agent_workflow(write_workflow, tool_project, '[{ args = { name = "a" } }]')
    res = workrun("run", wf)
    assert res.code == 2, res
    assert res.err.strip() == (f'error: {wf}: nodes.agent.script[0]: a script step needs tool = "NAME" '
                               '(or error = "...")')
    assert workrun("runs", "list", "--json").json() == []


@pytest.mark.parametrize("calls_made, played", [(0, 0), (1, 2), (2, 3), (3, 5)])
def test_resumed_script_skips_the_steps_already_played(calls_made, played):
    """A resumed scripted agent continues after the steps that made its journaled calls; a step naming an
    unknown tool made no call, so it is not counted as one."""
    from workrun.nodes.agent.loop import _played

    script = [{"tool": "nope"}, {"tool": "make"}, {"tool": "make"}, {"tool": "nope"}, {"tool": "make"},
              {"tool": "make"}]
    assert _played(script, {"make"}, calls_made) == played


def test_agent_killed_mid_loop_resumes_after_its_journaled_calls(workrun, write_workflow, tool_project, log):
    """R-R4 for agent nodes: kill -9 right after the 2nd tool call is journaled; `workrun resume` makes only
    the remaining call (no call twice), then the run fails and every call is compensated once."""
    wf = _agent_workflow(write_workflow, tool_project, """[
        { tool = "make", args = { name = "a" } },
        { tool = "no_such_tool" },
        { tool = "make", args = { name = "b" } },
        { tool = "make", args = { name = "c" } },
    ]""")
    res = workrun("run", wf, "--json", env={"TEST_LOG": str(log), "WORKRUN_FAULT": "op.finished@2"})
    assert res.code == -9, res
    res = workrun("resume", "--json", env={"TEST_LOG": str(log)})
    assert res.code == 0, res  # SPEC §10: every compensation it handled succeeded
    view = workrun("runs", "show", workrun("runs", "list", "--json").json()[0]["run_id"], "--json").json()
    assert view["status"] == "failed"
    ops = _ops(view, "agent")
    assert [(o["tool_call_index"], o["input"]["name"], o["status"]) for o in ops] == [
        (0, "a", "succeeded"), (1, "b", "succeeded"), (2, "c", "succeeded")]
    assert [o["compensation"]["status"] for o in ops] == ["succeeded"] * 3
    assert sorted(e["name"] for e in _logged(log)) == ["a", "b", "c"]


def test_a_tool_name_two_tool_apps_offer_fails_the_node_before_any_call(workrun, write_workflow, make_project, log):
    """Agent review: ``guarded`` (confirm = "always") in one Tool App and a plain ``guarded`` in another: the later
    answered every call of it, past the confirmation. One name must mean one tool: the node fails, no call made."""
    tools_toml = TOOLS_TOML.replace("[tool.workrun.apps.proc]", "[tool.workrun.apps.tk2]\nkind = \"tool\"\n"
                                    "entry = \"tools.py\"\n\n[tool.workrun.apps.proc]")
    project = make_project("twotools", tools_toml, {"tools.py": TOOLS_PY, "main.py": MAIN_PY,
                                                    "compensate.py": COMPENSATE_PY})
    wf = _agent_workflow(write_workflow, project, '[{ tool = "guarded", args = { name = "g" } }]', boom=False)
    wf.write_text(wf.read_text().replace(f'tools = [{{ project = "{project}", app = "tk" }}]',
                                         f'tools = [{{ project = "{project}", app = "tk" }}, '
                                         f'{{ project = "{project}", app = "tk2" }}]'))
    res = workrun("run", wf, "--json", input="", env={"TEST_LOG": str(log)})
    assert res.code == 1, res
    view = res.json()
    agent = _node(view, "agent")
    assert agent["status"] == "failed" and view["operations"] == [], view
    assert any("is offered by two Tool Apps of this node ('tk' and 'tk2')" in m["text"]  # every tool clashes here
               for m in agent["messages"]), agent["messages"]


def test_the_model_api_key_never_reaches_the_journal(workrun, write_workflow, tool_project, log, isolated_env):
    """Agent review, R-X2: an OpenAI-compatible server that quotes the key in its error (a 401 from a proxy): the
    key is shown and stored as ``{{ env.OPENAI_API_KEY }}``."""
    key = "sk-agent-review-4f9c2e"
    replies = [(401, {"error": {"message": f"Incorrect API key provided: Bearer {key}", "type": "auth"}})]
    with _ChatServer(replies) as server:
        wf = _agent_workflow(write_workflow, tool_project, "[]", boom=False,
                             extra=f'model = "test-model"\nbase_url = "{server.url}"')
        res = workrun("run", wf, "--json", env={"TEST_LOG": str(log), "OPENAI_API_KEY": key})
    assert res.code == 1, res
    assert key not in res.out + res.err
    assert any("{{ env.OPENAI_API_KEY }}" in m["text"] for m in _node(res.json(), "agent")["messages"])
    for path in isolated_env.glob("journal.sqlite3*"):
        assert key.encode() not in path.read_bytes(), path
