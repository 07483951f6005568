"""``kind = "http"`` nodes and HTTP reverse actions end to end, against a real HTTP server on loopback
(R-H1..R-H7): the CLI in a subprocess, the journal on disk, the server counting what arrived."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from _kit.http_server import TestServer


@pytest.fixture
def server():
    with TestServer() as srv:
        yield srv


def _allow(server: TestServer) -> str:
    return f'http_allow = ["127.0.0.1:{server.port}"]\n'


def _ops(view: dict[str, Any], node: str) -> list[dict[str, Any]]:
    return [o for o in view["operations"] if o["node_key"] == node]


def _node(view: dict[str, Any], key: str) -> dict[str, Any]:
    return next(n for n in view["nodes"] if n["node_key"] == key)


def test_success_result_feeds_templates_and_carries_idempotency_keys(server, write_workflow, workrun):
    server.route("POST", "/api/orders", status=201, json={"id": 42, "item": "book"})
    server.route("GET", "/api/orders/42", status=200, json={"id": 42, "state": "new"})
    wf = write_workflow("ok", _allow(server) + f"""
        [inputs]
        item = "book"
        [nodes.order]
        kind = "http"
        method = "POST"
        url = "{server.url}/api/orders?item={{{{ inputs.item }}}}"
        body = {{ item = "{{{{ inputs.item }}}}", qty = 1 }}
        [nodes.check]
        kind = "http"
        method = "GET"
        url = "{server.url}/api/orders/{{{{ nodes.order.result.body.id }}}}"
    """.replace("\n        ", "\n"))
    res = workrun("run", wf, "--json")
    assert res.code == 0, res
    view = res.json()
    (order,) = _ops(view, "order")
    assert order["status"] == "succeeded"
    assert order["input"] == {"method": "POST", "url": f"{server.url}/api/orders?item=book",
                              "headers": {"Content-Type": "application/json",
                                          "Idempotency-Key": order["operation_id"]},
                              "body": {"item": "book", "qty": 1}}
    assert order["result"] == {"status": 201, "headers": {"content-type": "application/json"},
                               "body": {"id": 42, "item": "book"}}
    (check,) = _ops(view, "check")
    assert check["depends_on"] == [order["operation_id"]]
    assert check["result"]["body"] == {"id": 42, "state": "new"}
    posted, got = server.requests("POST", "/api/orders")[0], server.requests("GET", "/api/orders/42")[0]
    assert posted.json() == {"item": "book", "qty": 1} and posted.path == "/api/orders?item=book"
    assert posted.headers["Idempotency-Key"] == order["operation_id"]
    assert got.headers["Idempotency-Key"] == check["operation_id"]


@pytest.mark.parametrize("status", [404, 422, 500, 503])
def test_error_status_fails_the_node_naming_status_and_body(server, write_workflow, workrun, status):
    server.route("POST", "/api/orders", status=status, body=f"out of stock {status}")
    wf = write_workflow("bad", _allow(server) + f"""
[nodes.order]
kind = "http"
method = "POST"
url = "{server.url}/api/orders"
""")
    res = workrun("run", wf, "--json")
    assert res.code == 1, res
    view = res.json()
    (op,) = _ops(view, "order")
    assert (op["status"], op["compensation"]) == ("failed", None)
    assert op["error"] == f"HTTP {status}: out of stock {status}"
    assert any(f"HTTP {status}: out of stock {status}" in m["text"] for m in _node(view, "order")["messages"])
    assert server.count("POST", "/api/orders") == 1


@pytest.mark.parametrize("raw", [b'{"v": NaN, "w": -Infinity}', b'{"v": 1e999}', b'{"v": "\\udc80"}',
                                 b"[" * 300 + b"]" * 300])
def test_a_json_body_no_json_reader_but_pythons_takes_is_kept_as_text(server, write_workflow, workrun, raw):
    """Python's json reads NaN, Infinity, 1e999 (as Infinity) and a lone surrogate; no other JSON reader does (and a
    lone surrogate has no UTF-8: the journal write would fail). Such a body is text, like any body that is not JSON,
    and ``--json``, ``runs show`` and the journal stay readable by any JSON parser."""
    server.route("GET", "/nan", status=200, raw=raw, headers={"Content-Type": "application/json"})
    wf = write_workflow("nan", _allow(server) + f'[nodes.h]\nkind = "http"\nmethod = "GET"\nurl = "{server.url}/nan"\n')
    res = workrun("run", wf, "--json")
    assert res.code == 0, res

    def strict(text: str) -> Any:
        return json.loads(text, parse_constant=lambda name: pytest.fail(f"{name} in the output"))

    (op,) = _ops(strict(res.out), "h")
    assert op["result"]["body"] == raw.decode()
    assert strict(workrun("runs", "show", res.json()["run_id"], "--json").out)


def test_redirect_is_not_followed(server, write_workflow, workrun):
    server.route("POST", "/api/orders", status=302, headers={"Location": f"{server.url}/elsewhere"})
    wf = write_workflow("redirect", _allow(server) + f"""
[nodes.order]
kind = "http"
method = "POST"
url = "{server.url}/api/orders"
""")
    res = workrun("run", wf, "--json")
    assert res.code == 1, res
    (op,) = _ops(res.json(), "order")
    assert op["error"] == f"HTTP 302: redirect to {server.url}/elsewhere not followed"
    assert server.requests(path="/elsewhere") == []


def test_timeout_after_the_request_arrived_is_unknown_and_not_resent(server, write_workflow, workrun):
    server.route("POST", "/api/orders", hang=60)
    wf = write_workflow("slow", _allow(server) + f"""
[nodes.order]
kind = "http"
method = "POST"
url = "{server.url}/api/orders"
timeout = 1
on_failure = {{ retry = {{ attempts = 3, backoff = 0 }} }}
""")
    res = workrun("run", wf, "--json")
    assert res.code == 1, res
    view = res.json()
    (op,) = _ops(view, "order")
    assert op["status"] == "unknown" and op["compensation"] is None
    assert "no answer within 1 s" in op["error"]
    assert server.count("POST", "/api/orders") == 1  # never re-sent, even with a retry budget
    shown = workrun("runs", "show", view["run_id"]).out  # R-R3: shown for an operator (hostile review)
    assert f"outcome unknown: {op['operation_id']} (order): never re-sent, and not compensated" in shown, shown


def test_idempotent_unknown_is_resent_with_the_same_idempotency_key(server, write_workflow, workrun):
    server.route("POST", "/api/orders", sequence=[{"hang": 60}, {"status": 201, "json": {"id": 5}}])
    wf = write_workflow("idem", _allow(server) + f"""
[nodes.order]
kind = "http"
method = "POST"
url = "{server.url}/api/orders"
timeout = 1
idempotent = true
""")
    res = workrun("run", wf, "--json")
    assert res.code == 0, res
    first, second = _ops(res.json(), "order")
    assert (first["status"], second["status"]) == ("unknown", "succeeded")
    keys = [r.headers["Idempotency-Key"] for r in server.requests("POST", "/api/orders")]
    assert keys == [first["operation_id"], first["operation_id"]]
    assert second["input"]["headers"]["Idempotency-Key"] == first["operation_id"]


def _reverse_workflow(server: TestServer, project: Path | None, *, max_retries: int = 3, idempotent: bool = False,
                      order_timeout: float = 30) -> str:
    app = f"""
[nodes.stock]
project = "{project}"
app = "mark"
input = {{ name = "stock" }}
""" if project else ""
    needs = 'needs = ["stock"]' if project else ""
    return _allow(server) + app + f"""
[nodes.order]
kind = "http"
method = "POST"
url = "{server.url}/api/orders"
{needs}
compensation = {{ method = "DELETE", url = "{server.url}/api/orders/{{{{ original.result.body.id }}}}", \
max_retries = {max_retries}, backoff = 0.05, timeout = {order_timeout}, idempotent = {str(idempotent).lower()}, \
headers = {{ X-Run = "{{{{ run_id }}}}", X-Op = "{{{{ operation_id }}}}" }} }}

[nodes.ship]
kind = "http"
method = "POST"
url = "{server.url}/api/shipments"
body = {{ order = "{{{{ nodes.order.result.body.id }}}}" }}
compensation = {{ method = "POST", url = "{server.url}/api/shipments/{{{{ original.result.body.id }}}}/cancel", \
body = {{ why = "{{{{ error }}}}", node = "{{{{ node_key }}}}" }}, backoff = 0.05 }}

[nodes.pay]
kind = "http"
method = "POST"
url = "{server.url}/api/payments"
needs = ["ship"]
"""


def test_reverse_actions_run_at_final_failure_in_reverse_dependency_order_with_an_app_compensation(
        server, write_workflow, workrun, marker_project, tmp_path):
    log = tmp_path / "comp.log"
    server.route("POST", "/api/orders", status=201, json={"id": 7})
    server.route("POST", "/api/shipments", status=201, json={"id": 70})
    server.route("POST", "/api/payments", status=402, json={"error": "declined"})
    server.route("DELETE", "/api/orders/7", status=200, json={"deleted": 7})
    server.route("POST", "/api/shipments/70/cancel", status=200, body="cancelled")
    wf = write_workflow("reverse", _reverse_workflow(server, marker_project))
    res = workrun("run", wf, "--json", env={"TEST_LOG": str(log)})
    assert res.code == 1, res
    view = res.json()
    comps = {o["node_key"]: o["compensation"] for o in view["operations"] if o["compensation"]}
    assert {k: c["status"] for k, c in comps.items()} == {"stock": "succeeded", "order": "succeeded",
                                                          "ship": "succeeded"}
    cancel = server.requests("POST", "/api/shipments/70/cancel")[0]
    delete = server.requests("DELETE", "/api/orders/7")[0]
    app_t0 = json.loads(log.read_text().splitlines()[0])["t0"]
    # ship depends on order, order on stock: undone ship, then order, then stock
    assert cancel.at <= delete.at <= app_t0
    (order,) = _ops(view, "order")
    assert delete.headers["Idempotency-Key"] == comps["order"]["compensation_id"]
    assert delete.headers["X-Run"] == view["run_id"] and delete.headers["X-Op"] == order["operation_id"]
    assert cancel.json() == {"why": "node 'pay' failed: HTTP 402: {\"error\": \"declined\"}", "node": "ship"}
    (attempt,) = comps["order"]["attempts"]
    assert (attempt["http_status"], attempt["response_tail"], attempt["exit_code"]) == (200, '{"deleted": 7}', None)
    assert comps["order"]["result"] == {"status": 200, "headers": {"content-type": "application/json"},
                                        "body": {"deleted": 7}}


def test_reverse_action_failing_four_times_is_failed_then_operator_retry_works(server, write_workflow, workrun):
    server.route("POST", "/api/orders", status=201, json={"id": 7})
    server.route("POST", "/api/shipments", status=201, json={"id": 70})
    server.route("POST", "/api/shipments/70/cancel", status=200, body="ok")
    server.route("POST", "/api/payments", status=402, body="declined")
    server.route("DELETE", "/api/orders/7", status=500, body="database down")
    wf = write_workflow("four", _reverse_workflow(server, None))
    res = workrun("run", wf, "--json")
    assert res.code == 1, res
    (order,) = _ops(res.json(), "order")
    comp = order["compensation"]
    assert comp["status"] == "failed" and len(comp["attempts"]) == 4
    assert [a["http_status"] for a in comp["attempts"]] == [500] * 4
    assert all(a["response_tail"] == "database down" and a["status"] == "failed" for a in comp["attempts"])
    assert "all 4 attempt(s) failed" in comp["reason"] and "HTTP 500: database down" in comp["reason"]
    assert server.count("DELETE", "/api/orders/7") == 4
    shown = workrun("compensations", "show", comp["compensation_id"])
    assert shown.code == 0 and "HTTP 500" in shown.out and "response: database down" in shown.out
    server.route("DELETE", "/api/orders/7", status=200, json={"deleted": 7})
    retried = workrun("compensations", "retry", comp["compensation_id"], "--json")
    assert retried.code == 0, retried
    after = retried.json()
    assert after["status"] == "succeeded" and len(after["attempts"]) == 5
    assert (after["attempts"][-1]["trigger"], after["attempts"][-1]["http_status"]) == ("operator", 200)
    assert server.count("DELETE", "/api/orders/7") == 5


def _spawn(args: list[Any], env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "workrun", *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})})


def _comp_of(workrun: Callable[..., Any], node: str) -> dict[str, Any]:
    res = workrun("runs", "list", "--json")
    run_id = res.json()[0]["run_id"]
    view = workrun("runs", "show", run_id, "--json").json()
    (op,) = _ops(view, node)
    return op["compensation"]


@pytest.mark.parametrize("idempotent", [False, True])
def test_kill_9_while_a_reverse_action_is_in_flight_then_resume_twice(server, write_workflow, workrun, idempotent):
    server.route("POST", "/api/orders", status=201, json={"id": 7})
    server.route("POST", "/api/shipments", status=201, json={"id": 70})
    server.route("POST", "/api/shipments/70/cancel", status=200, body="ok")
    server.route("POST", "/api/payments", status=402, body="declined")
    server.route("DELETE", "/api/orders/7", sequence=[{"hang": 120}, {"status": 200, "json": {"deleted": 7}}])
    wf = write_workflow("kill", _reverse_workflow(server, None, idempotent=idempotent, order_timeout=60))
    proc = _spawn(["run", wf])
    try:
        assert server.wait_for("DELETE", "/api/orders/7", 1, timeout=120), proc
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    server.release()
    first = workrun("resume", "--json")
    second = workrun("resume", "--json")
    comp = _comp_of(workrun, "order")
    if idempotent:  # re-sent once with the same key, then done; the second resume sends nothing
        assert comp["status"] == "succeeded", (first, second)
        assert server.count("DELETE", "/api/orders/7") == 2
        keys = {r.headers["Idempotency-Key"] for r in server.requests("DELETE", "/api/orders/7")}
        assert keys == {comp["compensation_id"]}
        assert [a["status"] for a in comp["attempts"]] == ["unknown", "succeeded"]
    else:  # sent but unanswered: unknown, for an operator; never re-sent
        assert comp["status"] == "unknown", (first, second)
        assert server.count("DELETE", "/api/orders/7") == 1
        assert [a["status"] for a in comp["attempts"]] == ["unknown"]
        assert first.code == 1  # the second resume finds nothing left to do


def test_kill_9_right_after_a_reverse_action_succeeded_never_sends_it_again(server, write_workflow, workrun):
    server.route("POST", "/api/orders", status=201, json={"id": 7})
    server.route("POST", "/api/shipments", status=201, json={"id": 70})
    server.route("POST", "/api/shipments/70/cancel", status=200, body="ok")
    server.route("POST", "/api/payments", status=402, body="declined")
    server.route("DELETE", "/api/orders/7", status=200, json={"deleted": 7})
    wf = write_workflow("fault", _reverse_workflow(server, None))
    killed = workrun("run", wf, env={"WORKRUN_FAULT": "attempt.finished@2"})  # ship's undo, then order's
    assert killed.code == -signal.SIGKILL, killed
    assert server.count("DELETE", "/api/orders/7") == 1
    for _ in range(2):
        res = workrun("resume", "--json")
        assert res.code == 0, res
    comp = _comp_of(workrun, "order")
    assert comp["status"] == "succeeded" and len(comp["attempts"]) == 1
    assert server.count("DELETE", "/api/orders/7") == 1
    assert server.count("POST", "/api/shipments/70/cancel") == 1


def test_secret_from_env_reaches_the_server_and_is_written_nowhere(server, write_workflow, workrun, isolated_env):
    secret = "tok-7f3a9c-DO-NOT-LOG"
    server.route("POST", "/api/orders", status=201, json={"id": 7})
    server.route("POST", "/api/payments", status=402, body="declined")
    server.route("DELETE", "/api/orders/7", status=500, body="nope")
    wf = write_workflow("secret", _allow(server) + f"""
[nodes.order]
kind = "http"
method = "POST"
url = "{server.url}/api/orders"
headers = {{ Authorization = "Bearer {{{{ env.TOKEN }}}}" }}
compensation = {{ method = "DELETE", url = "{server.url}/api/orders/{{{{ original.result.body.id }}}}", \
headers = {{ Authorization = "Bearer {{{{ env.TOKEN }}}}" }}, max_retries = 1, backoff = 0 }}
[nodes.pay]
kind = "http"
method = "POST"
url = "{server.url}/api/payments"
needs = ["order"]
""")
    env = {"TOKEN": secret}
    outputs = [workrun("run", wf, env=env), workrun("run", wf, "--json", env=env)]
    run_id = outputs[1].json()["run_id"]
    comp = _ops(outputs[1].json(), "order")[0]["compensation"]
    outputs += [workrun("runs", "show", run_id, "--json", env=env), workrun("runs", "show", run_id, env=env),
                workrun("compensations", "list", "--json", env=env),
                workrun("compensations", "show", comp["compensation_id"], "--json", env=env),
                workrun("compensations", "show", comp["compensation_id"], env=env),
                workrun("compensations", "retry", comp["compensation_id"], "--json", env=env)]
    got = [r.headers["Authorization"] for r in server.received if r.path.startswith("/api/orders")]
    assert got and set(got) == {f"Bearer {secret}"}
    assert server.count("DELETE", "/api/orders/7") == 2 * 2 + 1  # two runs of 2 attempts, one operator retry
    for res in outputs:
        assert secret not in res.out and secret not in res.err
    shown = outputs[2].json()
    assert _ops(shown, "order")[0]["input"]["headers"]["Authorization"] == "Bearer {{ env.TOKEN }}"
    files = [p for p in isolated_env.rglob("*") if p.is_file()]
    assert any(p.name.startswith("journal.sqlite3") for p in files)
    for path in files:  # journal, -wal, -shm, and anything else in the data directory
        assert secret.encode() not in path.read_bytes(), path


def test_secret_variable_missing_or_misplaced_is_a_config_error(server, write_workflow, workrun):
    wf = write_workflow("nosecret", _allow(server) + f"""
[nodes.order]
kind = "http"
method = "POST"
url = "{server.url}/api/orders"
headers = {{ Authorization = "Bearer {{{{ env.WORKRUN_TEST_UNSET_TOKEN }}}}" }}
""")
    res = workrun("run", wf)
    assert res.code == 2
    assert res.err.strip() == (f"error: {wf}: nodes.order.headers.Authorization: environment variable "
                               "WORKRUN_TEST_UNSET_TOKEN is not set")
    wf = write_workflow("inbody", _allow(server) + f"""
[nodes.order]
kind = "http"
method = "POST"
url = "{server.url}/api/orders"
body = {{ token = "{{{{ env.HOME }}}}" }}
""")
    res = workrun("run", wf)
    assert res.code == 2 and "nodes.order.body.token" in res.err and "only in header values" in res.err
    assert workrun("runs", "list", "--json").json() == [] and server.received == []


@pytest.mark.parametrize("url", ["http://{{ inputs.host }}/api/orders", "http://127.0.0.1:{{ inputs.port }}/x",
                                 "{{ inputs.scheme }}://127.0.0.1/x"])
def test_template_in_the_host_exits_2_before_anything_runs(server, write_workflow, workrun, url):
    wf = write_workflow("host", _allow(server) + f"""
[inputs]
host = "127.0.0.1:{server.port}"
port = "{server.port}"
scheme = "http"
[nodes.order]
kind = "http"
method = "POST"
url = "{url}"
""")
    res = workrun("run", wf)
    assert res.code == 2, res
    assert res.err.startswith(f"error: {wf}: nodes.order.url: ") and "literal" in res.err
    assert len(res.err.strip().splitlines()) == 1
    assert workrun("runs", "list", "--json").json() == [] and server.received == []


def test_guard_refuses_loopback_unless_allowed(server, write_workflow, workrun):
    server.route("POST", "/api/orders", status=201, json={"id": 1})
    body = f"""
[nodes.order]
kind = "http"
method = "POST"
url = "http://localhost:{server.port}/api/orders"
"""
    res = workrun("run", write_workflow("refused", body), "--json")
    assert res.code == 1, res
    (op,) = _ops(res.json(), "order")
    assert op["status"] == "failed"
    assert op["error"].startswith("refused by the outbound guard: ") and "(loopback)" in op["error"]
    assert server.received == []
    allowed = workrun("run", write_workflow("allowed", body), "--json",
                      env={"WORKRUN_HTTP_ALLOW": f"127.0.0.1:{server.port},[::1]:{server.port}"})
    assert allowed.code == 0, allowed
    assert server.count("POST", "/api/orders") == 1
    bad = workrun("run", write_workflow("badenv", body), env={"WORKRUN_HTTP_ALLOW": "localhost"})
    assert bad.code == 2 and "WORKRUN_HTTP_ALLOW" in bad.err


APP_WITH_HTTP_COMPENSATION = """
[tool.workrun.apps.book]
kind = "process"
entry = "main.py"
compensation = {{ http = {{ method = "DELETE", url = "{url}/api/bookings/{{{{ original.result.booking }}}}", \
headers = {{ X-Why = "{{{{ error }}}}" }} }}, backoff = 0.05 }}
[tool.workrun.apps.book.output]
booking = {{ type = "string", required = true }}
"""

BOOK_MAIN = """
from workrun_sdk import process
process.result({"booking": "b-" + process.input()["who"]})
"""


def test_app_with_an_http_reverse_action_instead_of_a_script(server, write_workflow, workrun, make_project):
    server.route("DELETE", "/api/bookings/b-ann", status=204)
    server.route("POST", "/api/payments", status=402, body="declined")
    project = make_project("booker", APP_WITH_HTTP_COMPENSATION.format(url=server.url), {"main.py": BOOK_MAIN})
    wf = write_workflow("appaction", _allow(server) + f"""
[nodes.book]
project = "{project}"
app = "book"
input = {{ who = "ann" }}
[nodes.pay]
kind = "http"
method = "POST"
url = "{server.url}/api/payments"
needs = ["book"]
""")
    res = workrun("run", wf, "--json")
    assert res.code == 1, res
    (op,) = _ops(res.json(), "book")
    comp = op["compensation"]
    assert comp["status"] == "succeeded" and comp["attempts"][0]["http_status"] == 204
    (arrived,) = server.requests("DELETE", "/api/bookings/b-ann")
    assert arrived.headers["Idempotency-Key"] == comp["compensation_id"]


def test_app_compensation_needs_exactly_one_of_entry_and_http(server, write_workflow, workrun, make_project):
    both = APP_WITH_HTTP_COMPENSATION.format(url=server.url).replace(
        "compensation = { http", 'compensation = { entry = "main.py", http')
    project = make_project("both", both, {"main.py": BOOK_MAIN}, lock=False)
    (project / "uv.lock").write_text("version = 1\n")
    wf = write_workflow("both", f"""
[nodes.book]
project = "{project}"
app = "book"
""")
    res = workrun("run", wf)
    assert res.code == 2, res
    assert "tool.workrun.apps.book.compensation" in res.err and "exactly one of entry" in res.err


@pytest.mark.parametrize("idempotent", [False, True])
def test_kill_9_while_an_http_node_is_in_flight_then_resume(server, write_workflow, workrun, idempotent):
    server.route("POST", "/api/orders", sequence=[{"hang": 120}, {"status": 201, "json": {"id": 9}}])
    wf = write_workflow("nodekill", _allow(server) + f"""
[nodes.order]
kind = "http"
method = "POST"
url = "{server.url}/api/orders"
idempotent = {str(idempotent).lower()}
timeout = 60
""")
    proc = _spawn(["run", wf])
    try:
        assert server.wait_for("POST", "/api/orders", 1, timeout=120), proc
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    server.release()
    first = workrun("resume", "--json")
    second = workrun("resume", "--json")
    run_id = workrun("runs", "list", "--json").json()[0]["run_id"]
    view = workrun("runs", "show", run_id, "--json").json()
    ops = _ops(view, "order")
    assert ops[0]["status"] == "unknown"
    if idempotent:  # re-sent once on resume, with the key of the request it repeats
        assert view["status"] == "succeeded" and [o["status"] for o in ops] == ["unknown", "succeeded"], first
        keys = [r.headers["Idempotency-Key"] for r in server.requests("POST", "/api/orders")]
        assert keys == [ops[0]["operation_id"]] * 2
    else:  # never re-sent: the node fails and the run with it (an unknown call is not compensated)
        assert view["status"] == "failed" and len(ops) == 1 and ops[0]["compensation"] is None, first
        assert server.count("POST", "/api/orders") == 1
    assert second.code == 0


def test_error_in_a_reverse_action_is_the_runs_failure_not_an_earlier_handled_one(server, write_workflow, workrun):
    """Adversarial review (SPEC §19: ``{{ error }}`` in a reverse action is the run's failure line): a node whose
    failure a ``fallback_action`` handled failed earlier; its error was paired with the node that failed the run."""
    server.route("POST", "/api/orders", status=201, json={"id": 7})
    server.route("POST", "/api/payments", status=402, json={"error": "declined"})
    server.route("POST", "/api/shipments", status=500, json={"error": "no truck"})
    server.route("POST", "/api/orders/7/cancel", status=200, body="ok")
    wf = write_workflow("why", f"""
http_allow = ["127.0.0.1:{server.port}"]
[nodes.order]
kind = "http"
method = "POST"
url = "{server.url}/api/orders"
compensation = {{ method = "POST", url = "{server.url}/api/orders/{{{{ original.result.body.id }}}}/cancel", \
body = {{ why = "{{{{ error }}}}" }} }}
[nodes.pay]
kind = "http"
method = "POST"
url = "{server.url}/api/payments"
needs = ["order"]
on_failure = {{ fallback_action = {{ update_data = {{ fields = ["declined"], values = {{ declined = true }} }} }} }}
[nodes.ship]
kind = "http"
method = "POST"
url = "{server.url}/api/shipments"
needs = ["pay"]
""")
    res = workrun("run", wf, "--json")
    assert res.code == 1, res
    assert res.json()["reason"] == "node 'ship' failed", res.json()["reason"]
    [cancel] = server.requests("POST", "/api/orders/7/cancel")
    why = cancel.json()["why"]
    assert why.startswith("node 'ship' failed: HTTP 500") and "no truck" in why and "declined" not in why, why


def test_resume_that_resends_an_idempotent_unknown_call_exits_0(server, write_workflow, workrun):
    """SPEC §10, R-R3 (diff review): the runner killed while an idempotent request waits for its answer; ``resume``
    settles it as unknown, re-sends it with the same Idempotency-Key, the answer comes and the run succeeds:
    nothing is left for a person, so ``resume`` exits 0 (an unknown call whose node then fails exits 1)."""
    import os
    import subprocess
    import sys
    import time

    server.route("POST", "/api/orders", sequence=[{"hang": 60}, {"status": 201, "json": {"id": 5}}])
    wf = write_workflow("idem-resume", _allow(server) + f"""
[nodes.order]
kind = "http"
method = "POST"
url = "{server.url}/api/orders"
timeout = 60
idempotent = true
""")
    proc = subprocess.Popen([sys.executable, "-m", "workrun", "run", str(wf)], env=os.environ.copy(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not server.requests("POST", "/api/orders"):
            assert proc.poll() is None and time.monotonic() < deadline, "the request never came"
            time.sleep(0.05)
    finally:
        proc.kill()
        proc.wait()
    res = workrun("resume", "--json")
    assert res.code == 0, res
    [view] = res.json()["runs"]
    assert view["status"] == "succeeded"
    assert [o["status"] for o in _ops(view, "order")] == ["unknown", "succeeded"]
    keys = {r.headers["Idempotency-Key"] for r in server.requests("POST", "/api/orders")}
    assert len(keys) == 1 and len(server.requests("POST", "/api/orders")) == 2
