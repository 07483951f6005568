"""Connectors, SMS and URL references (SPEC §19: R-K1, R-K3, R-K5, R-K6) against a real HTTP server on loopback,
with real ``workrun`` processes."""

from __future__ import annotations

import json

import pytest

from _kit.http_server import TestServer

TOKEN = "shop-tok/9f2e+Q"


@pytest.fixture
def server():
    with TestServer() as srv:
        yield srv


def _head(server: TestServer, extra: str = "") -> str:
    return (f'http_allow = ["127.0.0.1:{server.port}"]\n[connectors.shop]\nbase_url = "{server.url}/api"\n'
            'headers = { Authorization = "Bearer {{ env.SHOP_TOKEN }}", X-Client = "workrun" }\n' + extra)


def test_requests_through_a_connector_share_its_base_url_and_headers(server, write_workflow, workrun, isolated_env):
    server.route("POST", "/api/orders", status=201, json={"id": "7"})
    server.route("DELETE", "/api/orders/7", status=204, body="")
    server.route("POST", "/api/pay", status=402, body=f"declined for {TOKEN}")
    wf = write_workflow("shop", _head(server) + """
[nodes.order]
kind = "http"
connector = "shop"
method = "POST"
url = "/orders"
headers = { X-Client = "order-node" }
compensation = { connector = "shop", method = "DELETE", url = "/orders/{{ original.result.body.id }}" }
[nodes.pay]
kind = "http"
connector = "shop"
method = "POST"
url = "/pay"
needs = ["order"]
""")
    res = workrun("run", wf, "--json", env={"SHOP_TOKEN": TOKEN})
    assert res.code == 1, res
    [order] = server.requests("POST", "/api/orders")
    assert order.headers["Authorization"] == f"Bearer {TOKEN}" and order.headers["X-Client"] == "order-node"
    [undo] = server.requests("DELETE", "/api/orders/7")
    assert undo.headers["Authorization"] == f"Bearer {TOKEN}" and undo.headers["X-Client"] == "workrun"
    view = res.json()
    op = next(o for o in view["operations"] if o["node_key"] == "order")
    assert op["input"]["connector"] == "shop" and op["input"]["url"] == f"{server.url}/api/orders"
    assert op["compensation"]["status"] == "succeeded"
    assert op["compensation"]["context"]["reverse_action"]["connector"] == "shop"
    assert op["connector"] == "shop" and [a["connector"] for a in op["compensation"]["attempts"]] == ["shop"]  # R-K1
    files = [p for p in isolated_env.rglob("*") if p.is_file()]
    assert all(TOKEN.encode() not in p.read_bytes() for p in files)
    assert TOKEN not in res.out + res.err


def test_the_rate_limit_spaces_requests_by_the_servers_clock(server, write_workflow, workrun):
    for i in range(4):
        server.route("GET", f"/api/n{i}", status=200, json={})
    nodes = "".join(f'[nodes.n{i}]\nkind = "http"\nconnector = "shop"\nmethod = "GET"\nurl = "/n{i}"\n'
                    + (f'needs = ["n{i - 1}"]\n' if i else "") for i in range(4))
    wf = write_workflow("rate", _head(server, "rate_limit = { requests = 2, per = 1 }\n") + nodes)
    res = workrun("run", wf, "--json", env={"SHOP_TOKEN": TOKEN})
    assert res.code == 0, res
    times = [r.at for r in server.requests("GET")]
    assert len(times) == 4
    assert times[2] - times[0] >= 0.95 and times[3] - times[1] >= 0.95, times  # never 3 in any 1 s


def test_the_circuit_opens_after_failures_and_nothing_reaches_the_server_while_open(server, write_workflow, workrun):
    server.route("POST", "/api/flaky", status=503, body="down")
    wf = write_workflow("breaker", _head(server, "circuit_breaker = { failures = 2, reset = 30 }\n") + """
[nodes.call]
kind = "http"
connector = "shop"
method = "POST"
url = "/flaky"
on_failure = { retry = { attempts = 5, backoff = 0 } }
""")
    res = workrun("run", wf, "--json", env={"SHOP_TOKEN": TOKEN})
    assert res.code == 1, res
    assert server.count("POST", "/api/flaky") == 2  # open after 2 failures in a row: the other 3 never sent
    ops = [o for o in res.json()["operations"] if o["node_key"] == "call"]
    assert [o["status"] for o in ops] == ["failed"] * 5
    assert all("circuit open for connector shop" in o["error"] for o in ops[2:]), [o["error"] for o in ops]


def test_a_half_open_circuit_closes_on_a_good_answer(server, write_workflow, workrun):
    server.route("POST", "/api/flaky", sequence=[{"status": 500}, {"status": 200, "json": {"ok": True}}])
    wf = write_workflow("half", _head(server, "circuit_breaker = { failures = 1, reset = 0.3 }\n") + """
[nodes.call]
kind = "http"
connector = "shop"
method = "POST"
url = "/flaky"
on_failure = { retry = { attempts = 3, backoff = 0.4 } }
""")
    res = workrun("run", wf, "--json", env={"SHOP_TOKEN": TOKEN})
    assert res.code == 0, res
    assert server.count("POST", "/api/flaky") == 2


@pytest.mark.parametrize("url, says", [
    ('"http://127.0.0.1:9/x"', "relative url starting with /"),
    ('"/../admin"', "'.' and '..' segments"),
    ('"//evil.example/x"', "'//'"),
    ('"/{{ inputs.who }}/x"', "first path segment"),
])
def test_a_url_that_could_leave_the_connector_is_exit_2(cli, server, write_workflow, url, says):
    wf = write_workflow("bad", _head(server) + f"""
[inputs]
who = "x"
[nodes.a]
kind = "http"
connector = "shop"
method = "GET"
url = {url}
""")
    res = cli("check", wf, env={"SHOP_TOKEN": TOKEN})
    assert res.code == 2 and "nodes.a.url" in res.err and says in res.err, res


@pytest.mark.parametrize("text, field", [
    ('[nodes.a]\nkind = "http"\nconnector = "nope"\nmethod = "GET"\nurl = "/x"\n', "nodes.a.connector"),
    ('[connectors.x]\nbase_url = "http://{{ inputs.h }}/"\n[nodes.a]\nkind = "http"\nmethod = "GET"\n'
     'url = "http://127.0.0.1:9/"\n', "connectors.x.base_url"),
    ('[connectors.x]\nbase_url = "http://127.0.0.1:9/"\nrate_limit = { requests = 0, per = 1 }\n[nodes.a]\n'
     'kind = "http"\nmethod = "GET"\nurl = "http://127.0.0.1:9/"\n', "connectors.x.rate_limit.requests"),
    ('[connectors.x]\nbase_url = "http://127.0.0.1:9/"\ncolour = 1\n[nodes.a]\nkind = "http"\nmethod = "GET"\n'
     'url = "http://127.0.0.1:9/"\n', "connectors.x.colour"),
])
def test_bad_connectors_are_exit_2_naming_the_field(cli, write_workflow, text, field):
    res = cli("check", write_workflow("bad", text))
    assert res.code == 2 and f": {field}: " in res.err, res


def test_a_filled_value_cannot_climb_out_of_the_base_url(server, write_workflow, workrun):
    server.route("GET", "/api/look", status=200, json={"id": ".."})
    wf = write_workflow("climb", _head(server) + """
[nodes.look]
kind = "http"
connector = "shop"
method = "GET"
url = "/look"
[nodes.get]
kind = "http"
connector = "shop"
method = "GET"
url = "/items/{{ nodes.look.result.body.id }}"
""")
    res = workrun("run", wf, "--json", env={"SHOP_TOKEN": TOKEN})
    assert res.code == 1, res
    assert [r.path for r in server.requests()] == ["/api/look"]
    get = next(n for n in res.json()["nodes"] if n["node_key"] == "get")
    assert "unsafe path from {{ nodes.look.result.body.id }}" in json.dumps(get["messages"])


def test_an_sms_action_posts_to_the_connectors_sms_path(server, write_workflow, workrun):
    server.route("POST", "/api/pay", status=402, body="declined")
    server.route("POST", "/api/sms", status=202, json={"queued": True})
    wf = write_workflow("sms", _head(server) + """
[inputs]
order = "A-17"
[nodes.pay]
kind = "http"
connector = "shop"
method = "POST"
url = "/pay"
on_failure = { compensate = { sms = { connector = "shop", template_id = "T100", recipients = ["+15550100"], \
fields = { order = "{{ inputs.order }}", why = "{{ error }}" } }, max_retries = 1 } }
""")
    res = workrun("run", wf, "--json", env={"SHOP_TOKEN": TOKEN})
    assert res.code == 4, res
    [sms] = server.requests("POST", "/api/sms")
    body = sms.json()
    assert body["template_id"] == "T100" and body["recipients"] == ["+15550100"]
    assert body["fields"]["order"] == "A-17" and "402" in body["fields"]["why"]
    [ticket] = res.json()["tickets"]
    assert sms.headers["Idempotency-Key"] == ticket["ticket_id"]
    assert sms.headers["Authorization"] == f"Bearer {TOKEN}"


def test_a_reverse_action_deletes_what_location_names(server, write_workflow, workrun):
    """R-K6: 201 + Location, undone by DELETE of that URL; a Location on another origin is never sent to."""
    server.route("POST", "/api/orders", status=201, json={}, headers={"Location": "/api/orders/7"})
    server.route("POST", "/api/elsewhere", status=201, json={}, headers={"Location": "http://example.invalid/x/1"})
    server.route("DELETE", "/api/orders/7", status=204, body="")
    server.route("POST", "/api/boom", status=500, body="no")
    wf = write_workflow("location", f"""
http_allow = ["127.0.0.1:{server.port}"]
[nodes.order]
kind = "http"
method = "POST"
url = "{server.url}/api/orders"
compensation = {{ method = "DELETE", url = "{{{{ original.result.headers.location }}}}", max_retries = 0 }}
[nodes.other]
kind = "http"
method = "POST"
url = "{server.url}/api/elsewhere"
compensation = {{ method = "DELETE", url = "{{{{ original.result.headers.location }}}}", max_retries = 0 }}
[nodes.boom]
kind = "http"
method = "POST"
url = "{server.url}/api/boom"
needs = ["order", "other"]
""")
    res = workrun("run", wf, "--json")
    assert res.code == 1, res
    assert server.count("DELETE", "/api/orders/7") == 1
    comps = {o["node_key"]: o["compensation"] for o in res.json()["operations"] if o["compensation"]}
    assert comps["order"]["status"] == "succeeded"
    assert comps["other"]["status"] == "failed"
    assert f"is not on {server.url}" in json.dumps(comps["other"]), comps["other"]
    assert [r.method for r in server.requests() if r.method == "DELETE"] == ["DELETE"]


@pytest.mark.parametrize("text, says", [
    ('[connectors.s]\nbase_url = "http://127.0.0.1:9/api"\n[nodes.a]\nkind = "http"\nconnector = "s"\nmethod = "GET"\n'
     'url = "/%2e%2e/admin"\n', "'.' and '..' segments"),
    ('[connectors.s]\nbase_url = "http://127.0.0.1:9/a/../b"\n[nodes.a]\nkind = "http"\nmethod = "GET"\n'
     'url = "http://127.0.0.1:9/"\n', "dot segment"),
    ('[nodes.a]\nkind = "http"\nmethod = "GET"\nurl = "http://127.0.0.1:9/"\ncompensation = { method = "DELETE", '
     'url = "http://127.0.0.1:9/x", email = { to = ["a@b.co"], body = "x" } }\n', "an action is one kind"),
    ('[nodes.a]\nkind = "http"\nmethod = "GET"\nurl = "http://127.0.0.1:9/"\non_failure = { compensate = { '
     'update_data = { fields = ["a"] }, sms = { connector = "s", template_id = "T", recipients = ["1"] } } }\n',
     "an action is one kind"),
])
def test_break_it_findings_are_exit_2(cli, write_workflow, text, says):
    res = cli("check", write_workflow("bad", text))
    assert res.code == 2 and says in res.err, res


def test_every_bad_connector_and_smtp_table_is_reported(cli, write_workflow):
    """R-L1 for the new tables: each connector's error and [smtp]'s, not just the first."""
    res = cli("check", write_workflow("bad", '[connectors.a]\nbase_url = "http://127.0.0.1:9/"\nfoo = 1\n'
                                      '[connectors.b]\nbase_url = "http://127.0.0.1:9/"\nbar = 1\n'
                                      '[smtp]\nhost = "127.0.0.1"\nport = 99999\nfrom = "w@x.y"\n'
                                      '[nodes.a]\nkind = "http"\nmethod = "GET"\nurl = "http://127.0.0.1:9/"\n'))
    lines = res.err.strip().splitlines()
    assert res.code == 2 and len(lines) == 3, res
    assert [ln.split(": ")[2] for ln in lines] == ["connectors.a.foo", "connectors.b.bar", "smtp.port"]


def test_a_connector_with_an_unset_header_variable_is_one_error_not_one_per_node_that_uses_it(cli, write_workflow):
    """R-L1: the connector's own error only; the nodes that use it are not also told the connector is unknown."""
    res = cli("check", write_workflow("unset", '[connectors.shop]\nbase_url = "http://127.0.0.1:9/api"\n'
                                      'headers = { Authorization = "Bearer {{ env.WORKRUN_TEST_UNSET_TOKEN }}" }\n'
                                      '[nodes.a]\nkind = "http"\nconnector = "shop"\nmethod = "GET"\nurl = "/a"\n'
                                      '[nodes.b]\nkind = "http"\nconnector = "shop"\nmethod = "GET"\nurl = "/b"\n'
                                      'needs = ["a"]\n'))
    lines = res.err.strip().splitlines()
    assert res.code == 2 and len(lines) == 1, res
    assert "connectors.shop.headers.Authorization: environment variable WORKRUN_TEST_UNSET_TOKEN is not set" \
        in lines[0]
    bad_url = cli("check", write_workflow("badurl", '[connectors.shop]\nbase_url = "http://127.0.0.1:9/a?q=1"\n'
                                          '[nodes.a]\nkind = "http"\nconnector = "shop"\nmethod = "GET"\n'
                                          'url = "/a"\n'))
    assert bad_url.code == 2 and len(bad_url.err.strip().splitlines()) == 1, bad_url
    assert ": connectors.shop.base_url: " in bad_url.err and "unknown connector" not in bad_url.err
    typo = cli("check", write_workflow("typo", '[connectors.shop]\nbase_url = "http://127.0.0.1:9/"\ntimeout = "x"\n'
                                       '[nodes.a]\nkind = "http"\nconnector = "shop"\nmethod = "GET"\n'
                                       'url = "/a"\n'))
    assert typo.code == 2 and len(typo.err.strip().splitlines()) == 1, typo
    assert ": connectors.shop.timeout: " in typo.err and "unknown connector" not in typo.err


@pytest.mark.parametrize("comp, method, path", [
    ('{ connector = "shop", method = "DELETE", url = "/orders/{{ original.result.id }}", max_retries = 0 }',
     "DELETE", "/api/orders/7"),
    ('{ http = { connector = "shop", method = "DELETE", url = "/orders/{{ original.result.id }}" } }',
     "DELETE", "/api/orders/7"),
    ('{ sms = { connector = "shop", template_id = "T1", recipients = ["+15550100"], '
     'fields = { order = "{{ original.result.id }}" } } }', "POST", "/api/sms"),
    ('{ update_data = { fields = ["st"], values = { st = "undone {{ original.result.id }}" } } }', None, None),
])
def test_an_apps_compensation_may_be_any_action_kind(server, write_workflow, workrun, make_project, comp, method,
                                                      path):
    """SPEC §19: an App's ``compensation = { … }`` is an ACTION of any kind, a connector's checked against the
    workflow that uses the App (R-K1, R-K3, R-K4)."""
    server.route("DELETE", "/api/orders/7", status=204, body="")
    server.route("POST", "/api/sms", status=200, json={"ok": True})
    project = make_project("booker", f'[tool.workrun.apps.book]\nentry = "main.py"\ncompensation = {comp}\n',
                           {"main.py": "from workrun_sdk import process\nprocess.result({'id': '7'})\n"})
    wf = write_workflow("book", _head(server) + f"""
[inputs]
st = "new"
[nodes.book]
project = "{project}"
app = "book"
[nodes.boom]
kind = "http"
connector = "shop"
method = "POST"
url = "/nowhere"
needs = ["book"]
""")
    res = workrun("run", wf, "--json", env={"SHOP_TOKEN": TOKEN})
    assert res.code == 1, res
    op = next(o for o in res.json()["operations"] if o["node_key"] == "book")
    assert op["compensation"]["status"] == "succeeded", op
    if method is not None:
        [sent] = server.requests(method, path)
        assert sent.headers["Authorization"] == f"Bearer {TOKEN}"
    else:
        assert res.json()["data"]["st"] == "undone 7"
    assert workrun("check", wf, env={"SHOP_TOKEN": TOKEN}).code == 0
    undeclared = write_workflow("bare", f'[nodes.book]\nproject = "{project}"\napp = "book"\n'
                                '[inputs]\nst = "x"\n')
    if "connector" in comp:  # the workflow that uses the App must declare its connector (R-K5), named where it is
        bad = workrun("check", undeclared)  # written (conformance review: an sms action's was named ….http.connector)
        where = "compensation.sms.connector" if "sms" in comp else "compensation.http.connector"
        assert bad.code == 2 and f".{where}: unknown connector 'shop'" in bad.err, bad


@pytest.mark.parametrize("prefix", ["/api", ""])
def test_a_ticket_action_through_a_connector_deletes_what_location_names(server, write_workflow, workrun, prefix):
    """R-K6 for a node's ``on_failure`` action: a whole-template URL through a connector is resolved against its
    base URL, the path kept as it is (it was joined to the base URL as one percent-encoded segment)."""
    server.route("POST", "/api/orders", status=201, json={}, headers={"Location": "/api/orders/7"})
    server.route("DELETE", "/api/orders/7", status=204, body="")
    server.route("POST", "/api/pay", status=500, body="no")
    wf = write_workflow("ticket-location", f"""
http_allow = ["127.0.0.1:{server.port}"]
[connectors.shop]
base_url = "{server.url}{prefix}"
[nodes.order]
kind = "http"
connector = "shop"
method = "POST"
url = "{"/orders" if prefix else "/api/orders"}"
[nodes.pay]
kind = "http"
connector = "shop"
method = "POST"
url = "{"/pay" if prefix else "/api/pay"}"
needs = ["order"]
on_failure = {{ compensate = {{ connector = "shop", method = "DELETE", url = "{{{{ nodes.order.result.headers.location }}}}", max_retries = 0 }} }}
""")
    res = workrun("run", wf, "--json")
    (ticket,) = res.json()["tickets"]
    assert ticket["action"]["status"] == "succeeded", ticket
    assert [a["connector"] for a in ticket["action"]["attempts"]] == ["shop"]  # R-K1
    assert server.count("DELETE", "/api/orders/7") == 1
