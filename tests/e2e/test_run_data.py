"""Run data (SPEC §19, R-K4): ``data`` starts as the inputs, ``{{ data.NAME }}`` reads it when a node starts,
``update_data`` writes it as a reverse action, a fallback action or a ticket action, exactly once across
kill -9 (the write and its success are one transaction)."""

from __future__ import annotations

import pytest

from _kit.http_server import TestServer


@pytest.fixture
def server():
    with TestServer() as srv:
        srv.route("POST", "/orders", status=201, json={"id": "7"})
        srv.route("POST", "/boom", status=500, body="no")
        srv.route("POST", "/pay", status=402, body="declined")
        yield srv


def _flow(server: TestServer) -> str:
    return f"""
http_allow = ["127.0.0.1:{server.port}"]
[inputs]
status = "new"
[nodes.order]
kind = "http"
method = "POST"
url = "{server.url}/orders"
compensation = {{ update_data = {{ fields = ["status", "note"], values = {{ status = "refund-requested" }} }} }}
[nodes.look]
kind = "http"
method = "GET"
url = "{server.url}/look/{{{{ data.status }}}}"
needs = ["order"]
[nodes.boom]
kind = "http"
method = "POST"
url = "{server.url}/boom"
needs = ["look"]
"""


def test_data_starts_as_inputs_and_a_reverse_action_writes_it(server, write_workflow, workrun):
    server.route("GET", "/look/new", status=200, json={})
    res = workrun("run", write_workflow("data", _flow(server)), "--json")
    assert res.code == 1, res
    view = res.json()
    assert view["inputs"] == {"status": "new"}
    assert view["data"] == {"status": "refund-requested", "note": None}
    assert server.count("GET", "/look/new") == 1  # read when the node started
    comp = next(o for o in view["operations"] if o["node_key"] == "order")["compensation"]
    assert comp["status"] == "succeeded" and len(comp["attempts"]) == 1
    shown = workrun("runs", "show", view["run_id"], "--json").json()
    assert shown["data"] == view["data"]


@pytest.mark.parametrize("point", ["attempt.intent", "attempt.finished"])
def test_a_data_write_is_applied_once_across_kill_9(server, write_workflow, workrun, point):
    server.route("GET", "/look/new", status=200, json={})
    wf = write_workflow("data", _flow(server))
    killed = workrun("run", wf, "--json", env={"WORKRUN_FAULT": point})
    assert killed.code == -9, killed
    resumed = workrun("resume", "--json")
    assert resumed.code == 0, resumed
    [run] = workrun("runs", "list", "--json").json()
    view = workrun("runs", "show", run["run_id"], "--json").json()
    comp = next(o for o in view["operations"] if o["node_key"] == "order")["compensation"]
    assert comp["status"] == "succeeded"
    assert [a["status"] for a in comp["attempts"]].count("succeeded") == 1
    assert view["data"] == {"status": "refund-requested", "note": None}


def test_a_fallback_action_writes_data_before_the_run_goes_on(server, write_workflow, workrun):
    server.route("GET", "/next/paid-later", status=200, json={})
    wf = write_workflow("fallback", f"""
http_allow = ["127.0.0.1:{server.port}"]
[nodes.pay]
kind = "http"
method = "POST"
url = "{server.url}/pay"
on_failure = {{ fallback_action = {{ update_data = {{ fields = ["status"], values = {{ status = "paid-later" }} }} }} }}
[nodes.next]
kind = "http"
method = "GET"
url = "{server.url}/next/{{{{ data.status }}}}"
needs = ["pay"]
""")
    res = workrun("run", wf, "--json")
    assert res.code == 0, res
    assert res.json()["data"] == {"status": "paid-later"}
    assert server.count("GET", "/next/paid-later") == 1
    [ticket] = res.json()["tickets"]  # the ticket shows its action done, as any action (R-M4)
    action = ticket["action"]
    assert (ticket["status"], action["status"], action["result"]) == ("resolved", "succeeded",
                                                                      {"updated": {"status": "paid-later"}}), ticket
    assert [(a["number"], a["status"]) for a in action["attempts"]] == [(1, "succeeded")]
    assert workrun("resume", "--json").json() == {"runs": []}  # nothing left to do for it


def test_a_name_only_update_data_sets_may_be_read_by_an_action(cli, write_workflow, make_project):
    """SPEC §19: a name an update_data action sets (also an App's compensation) is known to every action."""
    project = make_project("setter", '[tool.workrun.apps.set]\nentry = "main.py"\n'
                           'compensation = { update_data = { fields = ["undone"] } }\n',
                           {"main.py": "from workrun_sdk import process\nprocess.result({})\n"})
    wf = write_workflow("reads", f'[nodes.s]\nproject = "{project}"\napp = "set"\n[nodes.a]\nkind = "http"\n'
                        'method = "GET"\nurl = "http://127.0.0.1:9/"\nneeds = ["s"]\n'
                        'compensation = { method = "DELETE", url = "http://127.0.0.1:9/{{ data.undone }}" }\n')
    res = cli("check", wf)
    assert res.code == 0, res


def test_a_ticket_action_writes_data_once(server, write_workflow, workrun):
    wf = write_workflow("ticket", f"""
http_allow = ["127.0.0.1:{server.port}"]
[nodes.pay]
kind = "http"
method = "POST"
url = "{server.url}/pay"
on_failure = {{ compensate = {{ update_data = {{ fields = ["refund"], values = {{ refund = "{{{{ error }}}}" }} }} }} }}
""")
    res = workrun("run", wf, "--json")
    assert res.code == 4, res
    assert "HTTP 402" in res.json()["data"]["refund"]
    [ticket] = res.json()["tickets"]
    assert ticket["action"]["status"] == "succeeded"


@pytest.mark.parametrize("text, says", [
    ('[nodes.a]\nkind = "http"\nmethod = "GET"\nurl = "http://127.0.0.1:9/{{ data.nope }}"\n', "data.nope"),
    ('[notify]\nupdate_data = { fields = ["x"] }\n[nodes.a]\nkind = "http"\nmethod = "GET"\n'
     'url = "http://127.0.0.1:9/"\n', "notify.update_data"),
    ('[nodes.a]\nkind = "http"\nmethod = "GET"\nurl = "http://127.0.0.1:9/"\n'
     'on_failure = { compensate = { update_data = { fields = ["x"], values = { y = 1 } } } }\n', "values.y"),
    # SPEC §19: an unknown {{ data.NAME }} in any action is a config error too, not a null sent at run time
    ('[nodes.a]\nkind = "http"\nmethod = "GET"\nurl = "http://127.0.0.1:9/"\n'
     'compensation = { method = "DELETE", url = "http://127.0.0.1:9/{{ data.nope }}" }\n', "data.nope"),
    ('[nodes.a]\nkind = "http"\nmethod = "GET"\nurl = "http://127.0.0.1:9/"\n'
     'on_failure = { compensate = { method = "POST", url = "http://127.0.0.1:9/", body = { v = "{{ data.nope }}" } } '
     '}\n', "data.nope"),
    ('[notify]\nhttp = { method = "POST", url = "http://127.0.0.1:9/", body = { v = "{{ data.nope }}" } }\n'
     '[nodes.a]\nkind = "http"\nmethod = "GET"\nurl = "http://127.0.0.1:9/"\n', "data.nope"),
])
def test_bad_data_config_is_exit_2(cli, write_workflow, text, says):
    res = cli("check", write_workflow("bad", text))
    assert res.code == 2 and says in res.err, res


def test_an_unknown_data_name_in_an_apps_compensation_names_the_pyproject_field(cli, write_workflow, make_project):
    """R-K5 (hostile review): the error is where it is written: the App's pyproject.toml, its compensation's field
    as the file has it (no ``http`` the file never wrote); an sms key error likewise."""
    project = make_project("undo", '[tool.workrun.apps.undo]\nentry = "main.py"\ncompensation = { update_data = '
                           '{ fields = ["zz"], values = { zz = "{{ data.nope }}" } } }\n',
                           {"main.py": "from workrun_sdk import process\nprocess.result({})\n"})
    res = cli("check", write_workflow("w", f'[nodes.a]\nproject = "{project}"\napp = "undo"\n'))
    assert res.code == 2, res
    field = "tool.workrun.apps.undo.compensation.update_data.values.zz"
    assert res.err == (f"error: {project / 'pyproject.toml'}: {field}: {{{{ data.nope }}}}: 'nope' is neither an "
                       "input nor set by an update_data action of this workflow\n"), res
    sms = make_project("texter", '[tool.workrun.apps.texter]\nentry = "main.py"\ncompensation = { sms = '
                       '{ connector = "s", template_id = "T", recipients = ["+1"], foo = 1 } }\n',
                       {"main.py": "from workrun_sdk import process\nprocess.result({})\n"})
    bad = cli("check", write_workflow("s", f'[nodes.a]\nproject = "{sms}"\napp = "texter"\n'))
    assert bad.code == 2 and ": tool.workrun.apps.texter.compensation.sms.foo: unknown key" in bad.err, bad
