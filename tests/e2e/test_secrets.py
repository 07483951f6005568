"""Templates are filled once and secrets never leave their header (SPEC §18, R-X1..R-X3; issue 26).

Every request here goes to a real HTTP server on loopback; the runs are real ``workrun``
processes. Each place a request can come from is covered: an http node, a reverse action,
a ticket action (``compensate``) and a ``[notify]`` request.
"""

from __future__ import annotations

import base64
import json
import urllib.parse
from pathlib import Path
from typing import Any

import pytest

from _kit.http_server import TestServer

OTHER = "s3cr3t-OTHER-7781"
EVIL = "{{ env.OTHER_SECRET }}"


@pytest.fixture
def server():
    with TestServer() as srv:
        yield srv


def _head(server: TestServer) -> str:
    return f'http_allow = ["127.0.0.1:{server.port}"]\n'


def _everything(home: Path, outputs: list[Any]) -> list[tuple[str, bytes]]:
    """Every file of the data directory (journal, -wal, -shm, call directories) and every output."""
    got = [(str(p), p.read_bytes()) for p in home.rglob("*") if p.is_file()]
    assert any(name.endswith("journal.sqlite3") for name, _ in got)
    return got + [(f"output {i}", (o.out + o.err).encode()) for i, o in enumerate(outputs)]


def _leaks(secret: str, places: list[tuple[str, bytes]]) -> list[str]:
    return [name for name, data in places if secret.encode() in data]


@pytest.mark.parametrize("source", ["error", "result", "message"])
def test_a_template_arriving_as_data_is_sent_literally_by_ticket_actions_and_notify(
        server, write_workflow, workrun, isolated_env, source):
    """Bug 1: a 402 body, an upstream answer or a ticket message holding ``{{ env.OTHER_SECRET }}`` reaches the
    refund endpoint and the notification hook as written; the variable is never read."""
    server.route("GET", "/lookup", status=200, json={"note": EVIL})
    server.route("POST", "/pay", status=402, body=f"declined: {EVIL}")
    server.route("POST", "/refund", status=200, json={"ok": True})
    server.route("POST", "/hook", status=200, json={"ok": True})
    note = {"error": "{{ error }}", "result": "{{ nodes.lookup.result.body.note }}", "message": "x"}[source]
    hook_note = "{{ message }}" if source == "message" else "plain"
    wf = write_workflow("pay", _head(server) + f"""
[notify]
http = {{ method = "POST", url = "{server.url}/hook", headers = {{ "X-Note" = "{hook_note}" }}, body = {{ m = "{{{{ message }}}}" }} }}
[nodes.lookup]
kind = "http"
method = "GET"
url = "{server.url}/lookup"
[nodes.pay]
kind = "http"
method = "POST"
url = "{server.url}/pay"
needs = ["lookup"]
on_failure = {{ compensate = {{ method = "POST", url = "{server.url}/refund", headers = {{ "X-Note" = "{note}" }}, \
body = {{ note = "{note}" }} }} }}
""")
    env = {"OTHER_SECRET": OTHER}
    res = workrun("run", wf, "--json", env=env)
    assert res.code == 4, res  # the run waits for a person (R-M1)
    assert server.wait_for("POST", "/refund") and server.wait_for("POST", "/hook")
    refund = server.requests("POST", "/refund")
    hook = server.requests("POST", "/hook")
    assert len(refund) == 1
    if source != "message":
        assert EVIL in refund[0].headers["X-Note"] and EVIL in refund[0].json()["note"], refund[0].headers
    if source == "message":
        assert EVIL in hook[0].headers["X-Note"], hook[0].headers
    for r in refund + hook + server.requests():
        assert OTHER not in json.dumps(r.headers) and OTHER.encode() not in r.body
    assert not _leaks(OTHER, _everything(isolated_env, [res, workrun("runs", "show", res.json()["run_id"], "--json")]))


def test_a_template_arriving_as_data_is_sent_literally_by_http_nodes_and_reverse_actions(
        server, write_workflow, workrun, isolated_env):
    """Bug 1 for the two places filled at send: an http node's header from an upstream result, a reverse
    action's header from the original answer; neither reads the variable."""
    server.route("GET", "/lookup", status=200, json={"note": EVIL})
    server.route("POST", "/orders", status=201, json={"id": "7", "note": EVIL})
    server.route("DELETE", "/orders/7", status=204, body="")
    server.route("POST", "/boom", status=500, body="no")
    wf = write_workflow("nodes", _head(server) + f"""
[nodes.lookup]
kind = "http"
method = "GET"
url = "{server.url}/lookup"
[nodes.order]
kind = "http"
method = "POST"
url = "{server.url}/orders"
headers = {{ "X-Note" = "{{{{ nodes.lookup.result.body.note }}}}" }}
compensation = {{ method = "DELETE", url = "{server.url}/orders/{{{{ original.result.body.id }}}}", \
headers = {{ "X-Note" = "{{{{ original.result.body.note }}}}" }} }}
[nodes.boom]
kind = "http"
method = "POST"
url = "{server.url}/boom"
needs = ["order"]
""")
    res = workrun("run", wf, "--json", env={"OTHER_SECRET": OTHER})
    assert res.code == 1, res
    [order] = server.requests("POST", "/orders")
    [undo] = server.requests("DELETE", "/orders/7")
    assert order.headers["X-Note"] == EVIL and undo.headers["X-Note"] == EVIL
    assert not _leaks(OTHER, _everything(isolated_env, [res]))


def _forms(secret: str) -> dict[str, str]:
    """Every spelling R-X2 lists, as a service might echo it."""
    raw = secret.encode()
    return {
        "as is": secret,
        "json \\/": secret.replace("/", "\\/"),
        "json \\u": "".join(f"\\u{ord(c):04X}" if c in "/b" else c for c in secret),
        "json \\u lower": "".join(f"\\u{ord(c):04x}" for c in secret),
        "percent upper": urllib.parse.quote(secret, safe=""),
        "percent lower": "".join(f"%{b:02x}" for b in raw),
        "base64": base64.b64encode(raw).decode(),
        "base64 url": base64.urlsafe_b64encode(b"?" + raw).decode(),
        "basic auth": base64.b64encode(b"user:" + raw).decode(),
    }


@pytest.mark.parametrize("content_type", [["application/json"], ["application/json", "text/plain"]])
def test_a_secret_echoed_in_any_form_is_redacted_everywhere(server, write_workflow, workrun, isolated_env,
                                                           content_type):
    """Bug 2 (R-X2): a reverse action's ``Authorization`` secret echoed in a 401 answer, in every form, is in no
    file of the data directory and in no output; what is kept shows ``{{ env.TOKEN }}`` instead."""
    secret = "tok/abc/end+Zq9"
    forms = _forms(secret)
    body = "{" + ", ".join(f'"{k}": "{v}"' for k, v in forms.items()) + "}"
    server.route("POST", "/orders", status=201, json={"id": "7"})
    server.route("DELETE", "/orders/7", status=401, raw=body.encode(),
                 headers=[("Content-Type", t) for t in content_type])
    server.route("POST", "/boom", status=500, body="no")
    server.route("POST", "/hook", status=200, json={"ok": True})
    wf = write_workflow("redact", _head(server) + f"""
[notify]
http = {{ method = "POST", url = "{server.url}/hook", body = {{ m = "{{{{ message }}}}" }} }}
[nodes.order]
kind = "http"
method = "POST"
url = "{server.url}/orders"
compensation = {{ method = "DELETE", url = "{server.url}/orders/{{{{ original.result.body.id }}}}", \
headers = {{ Authorization = "Bearer {{{{ env.TOKEN }}}}" }}, max_retries = 0 }}
[nodes.boom]
kind = "http"
method = "POST"
url = "{server.url}/boom"
needs = ["order"]
""")
    env = {"TOKEN": secret}
    res = workrun("run", wf, "--json", env=env)
    assert res.code == 1, res
    [undo] = server.requests("DELETE", "/orders/7")
    assert undo.headers["Authorization"] == f"Bearer {secret}"
    run_id = res.json()["run_id"]
    shown = workrun("runs", "show", run_id, "--json", env=env)
    comps = workrun("compensations", "list", "--json", env=env)
    cid = comps.json()[0]["compensation_id"] if isinstance(comps.json(), list) else None
    outputs = [res, shown, comps, workrun("runs", "show", run_id, env=env)]
    if cid:
        outputs += [workrun("compensations", "show", cid, "--json", env=env), workrun("compensations", "show", cid)]
    places = _everything(isolated_env, outputs) + [(f"hook {i}", r.body) for i, r in
                                                    enumerate(server.requests("POST", "/hook"))]
    for name, form in forms.items():
        assert not _leaks(form, places), name
    assert "{{ env.TOKEN }}" in shown.out  # the replacement is the template text


def test_a_secret_one_request_read_is_redacted_in_every_other_answer_too(server, write_workflow, workrun,
                                                                        isolated_env):
    """R-X2, "wherever anything is stored or shown" (secrets review): the secret node ``order`` read comes back in
    another node's failed answer (percent-encoded), in a third node's result, and past the 1 MiB cut of a reverse
    action's answer, whose tail once kept its first characters; none of it is stored, shown or sent on in the
    notification."""
    secret = 'Ab/c+d"e=f&g~hIJK?>'
    pct = urllib.parse.quote(secret, safe="")
    filler = (pct + " ") * (4096 // (len(pct) + 1) + 1)
    filler = filler[:4096 - 8]
    big = (filler + "#" * (4096 - 8 - len(filler)) + secret + " " + "A" * (1 << 20)).encode()
    server.route("POST", "/orders", status=201, json={"id": "7"})
    server.route("DELETE", "/orders/7", status=200, raw=big, headers={"Content-Type": "text/plain"})
    server.route("GET", "/echo", status=200, json={"token": secret})
    server.route("GET", "/leak", status=500, body=f"bad token {pct} end")
    server.route("POST", "/hook", status=200, json={"ok": True})
    wf = write_workflow("cross", _head(server) + f"""
[notify]
http = {{ method = "POST", url = "{server.url}/hook", body = {{ m = "{{{{ message }}}}" }} }}
[nodes.order]
kind = "http"
method = "POST"
url = "{server.url}/orders"
headers = {{ Authorization = "Bearer {{{{ env.TOKEN }}}}" }}
compensation = {{ method = "DELETE", url = "{server.url}/orders/{{{{ original.result.body.id }}}}", \
headers = {{ Authorization = "Bearer {{{{ env.TOKEN }}}}" }}, max_retries = 0 }}
[nodes.echo]
kind = "http"
method = "GET"
url = "{server.url}/echo"
needs = ["order"]
[nodes.leak]
kind = "http"
method = "GET"
url = "{server.url}/leak"
needs = ["echo"]
on_failure = "notify"
""")
    env = {"TOKEN": secret}
    res = workrun("run", wf, "--json", env=env)
    assert res.code == 4, res  # waiting on leak's ticket
    run_id = res.json()["run_id"]
    ended = workrun("tickets", "terminate", res.json()["tickets"][0]["ticket_id"], "--reason", "x", env=env)
    assert ended.code == 1, ended  # failed, its calls compensated: the reverse action's answer is over 1 MiB
    shown = workrun("runs", "show", run_id, "--json", env=env)
    [comp] = [op["compensation"] for op in shown.json()["operations"] if op["node_key"] == "order"]
    assert comp["attempts"][0]["response_tail"], comp
    outputs = [res, ended, shown, workrun("runs", "show", run_id, env=env),
               workrun("compensations", "show", comp["compensation_id"], "--json", env=env)]
    places = _everything(isolated_env, outputs) + \
        [(f"hook {i}", r.body) for i, r in enumerate(server.requests("POST", "/hook"))]
    assert server.requests("POST", "/hook"), "the notification was sent"
    for name, form in _forms(secret).items():
        assert not _leaks(form, places), name
    assert not _leaks(secret[:8], places), "a piece of the secret"
    assert "{{ env.TOKEN }}" in shown.out


def test_an_apps_output_tails_are_redacted_and_its_result_is_kept_as_data(server, write_workflow, workrun,
                                                                           make_project, isolated_env):
    """R-X2 for what an App prints (secrets review), R-X1 for what it returns (diff review): the header secret
    the workflow declares, printed to stderr by an App that inherited it, is stored as ``{{ env.REGION }}``;
    the same value in the App's result is data the next node reads, kept as written."""
    region = "eu-west-9-zz"
    server.route("POST", "/orders", status=201, json={"id": "7"})
    project = make_project("echoer", '[tool.workrun.apps.echoer]\nentry = "main.py"\n', {"main.py": """
        import os, sys
        from workrun_sdk import process
        sys.stderr.write("region is " + os.environ["REGION"] + "\\n")
        process.result({"region": os.environ["REGION"]})
    """})
    wf = write_workflow("tails", _head(server) + f"""
[nodes.order]
kind = "http"
method = "POST"
url = "{server.url}/orders"
headers = {{ "X-Region" = "{{{{ env.REGION }}}}" }}
[nodes.echo]
project = "{project}"
app = "echoer"
needs = ["order"]
[nodes.use]
kind = "http"
method = "POST"
url = "{server.url}/orders"
body = {{ region = "{{{{ nodes.echo.result.region }}}}" }}
needs = ["echo"]
""")
    res = workrun("run", wf, "--json", env={"REGION": region})
    assert res.code == 0, res
    echo = next(op for op in res.json()["operations"] if op["node_key"] == "echo")
    assert echo["stderr_tail"].strip() == "region is {{ env.REGION }}", echo
    assert echo["result"] == {"region": region}
    assert json.loads(server.requests("POST", "/orders")[-1].body) == {"region": region}


@pytest.mark.parametrize(("body", "says"), [
    ('{"id": ""}', "empty value for {{ original.result.body.id }} in url"),
    ('{"id": null}', "empty value for {{ original.result.body.id }} in url"),
    ('{"id": "  "}', "empty value for {{ original.result.body.id }} in url"),
    # no id at all: the journaled result never changes, so no later attempt could fill the url either
    ('{"order": 7}', "template {{ original.result.body.id }} has no value"),
])
def test_an_empty_id_never_sends_a_reverse_action_to_the_collection(server, write_workflow, workrun, body, says):
    """Bug 3 (R-X3): ``{"id": ""}`` or ``null`` would make ``DELETE /orders/``: not sent, failed, final. A result
    without the field is final too: ``missing_value``."""
    server.route("POST", "/orders", status=201, raw=body.encode(), headers={"Content-Type": "application/json"})
    server.route("POST", "/boom", status=500, body="no")
    wf = write_workflow("empty", _head(server) + f"""
[nodes.order]
kind = "http"
method = "POST"
url = "{server.url}/orders"
compensation = {{ method = "DELETE", url = "{server.url}/orders/{{{{ original.result.body.id }}}}" }}
[nodes.boom]
kind = "http"
method = "POST"
url = "{server.url}/boom"
needs = ["order"]
""")
    res = workrun("run", wf, "--json")
    assert res.code == 1, res
    assert server.requests("DELETE") == []
    [comp] = [o["compensation"] for o in res.json()["operations"] if o["node_key"] == "order"]
    assert comp["status"] == "failed", comp
    assert len(comp["attempts"]) == 1  # final: no further attempt
    assert says in json.dumps(comp)
    assert "not retried" in comp["reason"] and "all 4" not in comp["reason"], comp["reason"]  # says so truly


def test_an_empty_value_in_an_http_node_ticket_action_or_notify_url_is_not_sent(server, write_workflow, workrun):
    """R-X3 for the other three places: an http node, a ticket action and a notification."""
    server.route("GET", "/lookup", status=200, json={"id": "", "none": None})
    server.route("POST", "/pay", status=402, body="declined")
    wf = write_workflow("places", _head(server) + f"""
[inputs]
channel = " "
[notify]
http = {{ method = "POST", url = "{server.url}/hook/{{{{ inputs.channel }}}}" }}
[nodes.lookup]
kind = "http"
method = "GET"
url = "{server.url}/lookup"
[nodes.pay]
kind = "http"
method = "POST"
url = "{server.url}/pay"
needs = ["lookup"]
on_failure = {{ compensate = {{ method = "POST", url = "{server.url}/refund?id={{{{ nodes.lookup.result.body.none }}}}" }} }}
[nodes.get]
kind = "http"
method = "GET"
url = "{server.url}/items/{{{{ nodes.lookup.result.body.id }}}}"
needs = ["lookup"]
""")
    res = workrun("run", wf, "--json")
    assert res.code in (1, 4), res
    paths = [r.path for r in server.requests()]
    assert paths.count("/lookup") == 1 and "/pay" in paths
    assert not [p for p in paths if p.startswith(("/items", "/refund", "/hook"))], paths
    view = res.json()
    get = next(n for n in view["nodes"] if n["node_key"] == "get")
    assert get["status"] == "failed", get
    assert "empty value for {{ nodes.lookup.result.body.id }} in url" in json.dumps(get["messages"])
    [call] = [o for o in view["operations"] if o["node_key"] == "get"]  # the call is journaled, failed (R-X3)
    assert call["status"] == "failed" and call["compensation"] is None, call
    assert call["error"] == "empty value for {{ nodes.lookup.result.body.id }} in url", call
    assert call["input"]["url"] == f"{server.url}/items/{{{{ nodes.lookup.result.body.id }}}}", call
    [ticket] = workrun("tickets", "list", "--json").json()
    shown = workrun("tickets", "show", ticket["ticket_id"], "--json").json()
    assert shown["action"]["status"] == "failed", shown["action"]
    assert "empty value for {{ nodes.lookup.result.body.none }} in url" in json.dumps(shown["action"])
    # final: its reason does not send people to a retry that would fail the same way (secrets review)
    assert "cannot help" in shown["action"]["reason"] and "retry" not in shown["action"]["reason"], shown["action"]
    assert "empty value for {{ inputs.channel }} in url" in json.dumps(shown)


def test_a_failed_ticket_action_moves_its_ticket_and_says_its_attempts_once(server, write_workflow, workrun):
    """Issue 26 item 6: the ticket's ``updated_at`` moves when its action fails, and the dead-letter
    notification says "after 2 attempt(s)" once."""
    server.route("POST", "/pay", status=402, body="declined")
    server.route("POST", "/refund", status=500, body="down")
    server.route("POST", "/hook", status=200, json={"ok": True})
    wf = write_workflow("dead", _head(server) + f"""
[notify]
http = {{ method = "POST", url = "{server.url}/hook", body = {{ m = "{{{{ message }}}}" }} }}
[nodes.pay]
kind = "http"
method = "POST"
url = "{server.url}/pay"
on_failure = {{ compensate = {{ method = "POST", url = "{server.url}/refund", max_retries = 1, backoff = 0.3 }} }}
""")
    res = workrun("run", wf, "--json")
    assert res.code == 4, res
    [ticket] = workrun("tickets", "list", "--json").json()
    shown = workrun("tickets", "show", ticket["ticket_id"], "--json").json()
    assert shown["action"]["status"] == "failed" and len(shown["action"]["attempts"]) == 2
    assert shown["updated_at"] > shown["created_at"], shown
    dead = [r.json()["m"] for r in server.requests("POST", "/hook") if "its action failed" in r.json()["m"]]
    assert len(dead) == 1 and dead[0].count("attempt(s)") == 1, dead


@pytest.mark.parametrize("token", ["", "abc ", "a\x01b"])
def test_a_header_value_http_refuses_is_failed_not_sent_never_unknown(server, write_workflow, workrun, token):
    """Adversarial review (R-H2): an empty ``{{ env.SHOP_TOKEN }}`` made ``Bearer `` (a trailing space), which the
    HTTP client refuses as it starts to send: it was journaled ``unknown`` ("connection lost after the request was
    sent") though nothing left. Such a value is found before sending: the call and the reverse action are
    ``failed``, not sent."""
    server.route("POST", "/orders", status=201, body="{}")
    server.route("POST", "/boom", status=500, body="no")
    wf = write_workflow("hdr", _head(server) + f"""
[nodes.order]
kind = "http"
method = "POST"
url = "{server.url}/orders"
compensation = {{ method = "DELETE", url = "{server.url}/orders/1", headers = {{ Authorization = "Bearer {{{{ env.SHOP_TOKEN }}}}" }}, max_retries = 0 }}
[nodes.pay]
kind = "http"
method = "POST"
url = "{server.url}/orders"
needs = ["order"]
headers = {{ Authorization = "Bearer {{{{ env.SHOP_TOKEN }}}}" }}
""")
    res = workrun("run", wf, "--json", env={"SHOP_TOKEN": token})
    assert res.code == 1, res
    ops = {o["node_key"]: o for o in res.json()["operations"]}
    assert ops["pay"]["status"] == "failed" and "the filled value" in ops["pay"]["error"], ops["pay"]
    assert ops["order"]["compensation"]["status"] == "failed", ops["order"]["compensation"]
    assert "the filled value" in ops["order"]["compensation"]["attempts"][0]["error"]
    assert len(server.requests("POST")) == 1 and server.requests("DELETE") == []  # only the order was sent
