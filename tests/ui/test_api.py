"""``/api/…`` returns exactly the CLI's ``--json`` (R-U7), read from a real dashboard while the CLI reads the same
journal; and the SPEC §16 roll-up is in both."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TUTORIAL = ROOT / "demo_apps" / "workflows" / "tutorial.toml"


def test_api_equals_cli_json(ui_server, workrun) -> None:
    r = workrun("run", TUTORIAL, "--json")
    assert r.code == 1, r
    run_id = r.json()["run_id"]
    server = ui_server()
    client = server.client()
    shown = workrun("runs", "show", run_id, "--json")
    assert shown.code == 0, shown
    assert client.get(f"/api/runs/{run_id}").json() == shown.json()
    assert client.get(f"/api/runs/{run_id[:8]}").json() == shown.json()  # a unique prefix, as the CLI
    assert client.get("/api/runs").json() == workrun("runs", "list", "--json").json()
    assert client.get("/api/compensations").json() == workrun("compensations", "list", "--json").json()
    cid = shown.json()["operations"][0]["compensation"]["compensation_id"]
    assert client.get(f"/api/compensations/{cid}").json() == workrun("compensations", "show", cid, "--json").json()
    # the roll-up of SPEC §16
    assert shown.json()["compensation"] == "complete"
    assert shown.json()["compensation_counts"] == {"pending": 0, "running": 0, "succeeded": 1, "failed": 0,
                                                   "blocked": 0, "unknown": 0, "skipped": 0}
    assert "compensated: 1 of 1" in workrun("runs", "show", run_id).out
    missing = client.get("/api/runs/run_nope")
    assert missing.status_code == 404 and "no run matches" in missing.json()["error"]


def test_runs_page_filters_and_pages(ui_server, isolated_env: Path) -> None:
    import time

    from workrun.journal import SqliteJournal

    isolated_env.mkdir(mode=0o700, parents=True, exist_ok=True)
    journal = SqliteJournal(isolated_env / "journal.sqlite3")
    now = time.time()
    for i in range(60):
        journal.create_run({"run_id": f"run_{i:012d}", "workflow": "even" if i % 2 == 0 else "odd",
                            "workflow_path": "/w.toml", "spec": {"nodes": {}}, "inputs": {}, "status": "running",
                            "created_at": now + i}, [])
    journal.close()
    client = ui_server().client()
    first = client.get("/").text
    assert first.count('class="run-row"') == 50
    assert first.index("run_000000000059") < first.index("run_000000000010")  # newest first
    assert "run_000000000009" not in first and "page 1 of 2" in first
    second = client.get("/?page=2").text
    assert second.count('class="run-row"') == 10 and "run_000000000000" in second
    # R-D1: a date given loosely is shown as the day it was read as, which the page's date field can hold (else
    # the field stays empty, unlike its default, and the page takes it for one being filled in: no live updates)
    loose = client.get("/?since=2026-1-5&until=%202026-12-31T23:59").text
    assert 'name="since" value="2026-01-05"' in loose and 'name="until" value="2026-12-31"' in loose
    past = client.get("/?page=99999&workflow=even").text  # past the end: a way back, not a dead end
    assert "no runs on this page" in past and '<a href="/?page=1&amp;workflow=even">last page</a>' in past, past
    # R-D1: a page is reached by its number, the filters kept
    jump = client.get("/?q=run_0").text.split('class="inline jump"', 1)[1].split("</form>", 1)[0]
    assert '<input type="hidden" name="q" value="run_0">' in jump and 'name="page" min="1" max="2"' in jump, jump
    odd = client.get("/?workflow=odd").text
    assert odd.count('class="run-row"') == 30 and "run_000000000058" not in odd
    assert client.get("/?status=failed").text.count('class="run-row"') == 0
    api = client.get("/api/runs?workflow=even&limit=5").json()
    assert [r["run_id"] for r in api] == [f"run_{i:012d}" for i in (58, 56, 54, 52, 50)]


def test_apps_page_shows_config_and_code_changes(ui_server, workrun, marker_project, make_project,
                                                 write_workflow) -> None:
    wf = write_workflow("one", f"""
        name = "one"
        [nodes.only]
        project = "{marker_project}"
        app = "mark"
    """)
    assert workrun("run", wf).code == 0
    other = make_project("other", """
        [tool.workrun.apps.other]
        kind = "process"
        entry = "main.py"
        [tool.workrun.apps.other.output]
        total = { type = "integer", required = true }
    """, {"main.py": "print('hi')\n"})
    client = ui_server("--project", str(other)).client()
    page = client.get("/apps").text
    assert str(marker_project) in page and str(other) in page
    assert "unchanged since its last call" in page and "compensate.py" in page
    assert "total: integer (required)" in page and "never called" in page
    (marker_project / "main.py").write_text((marker_project / "main.py").read_text() + "\n# changed\n")
    page = client.get("/apps").text
    assert "code changed since its last call" in page and "main.py changed" in page


WAITER_APP = """
[tool.workrun.apps.waiter]
kind = "process"
entry = "main.py"
timeout = 300
"""
WAITER_MAIN = """
import time
from pathlib import Path
from workrun_sdk import process
flag = Path(process.input()["flag"])
end = time.time() + 240
while not flag.exists() and time.time() < end:
    time.sleep(0.05)
process.result({"saw": flag.exists()})
"""


def test_stop_then_compensate_from_the_dashboard(ui_server, marker_project, make_project, write_workflow,
                                                 tmp_path: Path, isolated_env: Path) -> None:
    import getpass
    import sqlite3
    import subprocess
    import sys
    import time

    waiter = make_project("waiter", WAITER_APP, {"main.py": WAITER_MAIN})
    wf = write_workflow("stoppable", f"""
        name = "stoppable"
        [nodes.first]
        project = "{marker_project}"
        app = "mark"
        input = {{ name = "first" }}
        [nodes.hang]
        project = "{waiter}"
        app = "waiter"
        needs = ["first"]
        input = {{ flag = "{tmp_path / 'never'}" }}
    """)
    runner = subprocess.Popen([sys.executable, "-m", "workrun", "run", str(wf)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        server = ui_server()
        client = server.client()
        deadline = time.monotonic() + 120
        run_id = None
        while time.monotonic() < deadline:
            runs = client.get("/api/runs").json()
            if runs:
                run_id = runs[0]["run_id"]
                nodes = {n["node_key"]: n["status"] for n in client.get(f"/api/runs/{run_id}").json()["nodes"]}
                if nodes["hang"] == "running":
                    break
            time.sleep(0.1)
        assert run_id, "the run never started"
        page = client.get(f"/runs/{run_id}").text
        assert 'id="stop"' in page
        csrf = page.split('name="csrf" value="', 1)[1].split('"', 1)[0]
        origin = {"Origin": server.base}
        refused = client.post(f"/actions/runs/{run_id}/stop", data={"csrf": csrf}, headers=origin)
        assert refused.status_code == 400 and "needs a reason" in refused.text  # R-D4
        stopped = client.post(f"/actions/runs/{run_id}/stop", data={"csrf": csrf, "reason": "wrong input"},
                              headers=origin)
        assert stopped.status_code == 303, stopped.text
        assert runner.wait(timeout=120) == 130
        view = client.get(f"/api/runs/{run_id}").json()
        # a stop compensates nothing (R-C9) and says so (R-L6)
        assert view["status"] == "stopped" and view["compensation"] == "not_undone"
        done = client.post(f"/actions/runs/{run_id}/compensate", data={"csrf": csrf, "reason": "undo it"},
                           headers=origin)
        assert done.status_code == 303, done.text
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and client.get(f"/api/runs/{run_id}").json()["compensation"] != "complete":
            time.sleep(0.2)
        view = client.get(f"/api/runs/{run_id}").json()
        assert view["compensation"] == "complete", view
        first = next(op for op in view["operations"] if op["node_key"] == "first")
        assert first["compensation"]["status"] == "succeeded"
        # the audit: both actions, by ui:<OS user>
        db = sqlite3.connect(f"file:{isolated_env / 'journal.sqlite3'}?mode=ro", uri=True)
        rows = db.execute("SELECT actor, action FROM events WHERE run_id = ? ORDER BY id", (run_id,)).fetchall()
        db.close()
        assert rows == [(f"ui:{getpass.getuser()}", "stop"), (f"ui:{getpass.getuser()}", "compensate")]
        db = sqlite3.connect(f"file:{isolated_env / 'journal.sqlite3'}?mode=ro", uri=True)
        args = [r[0] for r in db.execute("SELECT args FROM events WHERE run_id = ? ORDER BY id", (run_id,))]
        db.close()
        assert [json.loads(a)["reason"] for a in args] == ["wrong input", "undo it"]  # the reason is audited
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()


@pytest.mark.parametrize("path, command", [
    ("/api/compensations?status=bogus", ("compensations", "list", "--status", "bogus", "--json")),
    ("/api/tickets?status=bogus", ("tickets", "list", "--status", "bogus", "--json")),
])
def test_api_refuses_an_unknown_status_as_the_cli_does(ui_server, workrun, path, command) -> None:
    assert workrun(*command).code == 2  # the CLI refuses it ...
    answer = ui_server().client().get(path)
    assert answer.status_code == 400 and "unknown status 'bogus'" in answer.json()["error"]  # ... and so does /api
    # in its own terms: the query's parameter, not the CLI's option, and what it takes (new-user review)
    assert answer.json()["error"].startswith("status: ") and "(one of: " in answer.json()["error"], answer.json()
    # ... and the statuses of what it lists (dashboard review: the tickets' named the compensations')
    from workrun.app.views import COMPENSATION_STATUSES, TICKET_STATUSES

    known = TICKET_STATUSES if "tickets" in path else COMPENSATION_STATUSES
    assert answer.json()["error"].endswith(f"(one of: {', '.join(known)})"), answer.json()


def test_a_second_dashboard_on_a_busy_port_says_what_to_do(ui_server, workrun) -> None:
    """New-user review: `workrun ui` twice on one port: exit 2, one line that says one may run there already."""
    busy = workrun("ui", "--no-open", "--port", str(ui_server().port), timeout=60)
    assert busy.code == 2 and busy.err.count("\n") == 1 and "--port 0 picks a free port" in busy.err, busy


def test_apps_page_lists_apps_only_not_http_requests(ui_server, workrun, write_workflow) -> None:
    """An http node's request is an operation of the journal, but no App project (R-U2)."""
    from _kit.http_server import TestServer

    with TestServer() as server:
        server.route("GET", "/ok", status=200, json={})
        wf = write_workflow("http", f"""
            name = "http"
            http_allow = ["127.0.0.1:{server.port}"]
            [nodes.get]
            kind = "http"
            method = "GET"
            url = "{server.url}/ok"
        """)
        assert workrun("run", wf).code == 0
    page = ui_server().client().get("/apps").text
    assert "not an App project" not in page and "no longer in pyproject.toml" not in page


def test_run_page_shows_a_reverse_actions_http_status_and_response(ui_server, workrun, write_workflow) -> None:
    """A reverse action's attempt shows its HTTP status and response tail (escaped), as `compensations show` does."""
    from _kit.http_server import TestServer

    with TestServer() as server:
        server.route("POST", "/orders", status=201, json={"id": 7})
        server.route("DELETE", "/orders/7", status=200, body='<b>deleted</b> 7')
        wf = write_workflow("rev", f"""
            name = "rev"
            http_allow = ["127.0.0.1:{server.port}"]
            [nodes.order]
            kind = "http"
            method = "POST"
            url = "{server.url}/orders"
            compensation = {{ method = "DELETE", url = "{server.url}/orders/{{{{ original.result.body.id }}}}" }}
            [nodes.boom]
            kind = "http"
            needs = ["order"]
            method = "GET"
            url = "{server.url}/missing"
        """)
        res = workrun("run", wf, "--json")
        assert res.code == 1, res
    page = ui_server().client().get(f"/runs/{res.json()['run_id']}").text
    assert "HTTP 200" in page and "response: &lt;b&gt;deleted&lt;/b&gt; 7" in page


def test_tickets_from_the_dashboard_note_resume_and_terminate(ui_server, workrun, write_workflow, tmp_path: Path,
                                                              isolated_env: Path) -> None:
    """R-U4 for tickets: a note (shown in the ticket's history, escaped), resume with a result (the run goes on)
    and terminate (the run fails and its calls are compensated), each audited as ui:<OS user>."""
    import getpass
    import time

    from _kit.ops_apps import write_project

    ops = write_project(tmp_path / "ops")

    def waiting_run(name: str) -> tuple[str, str]:
        wf = write_workflow(name, f"""
            [nodes.order]
            project = "{ops}"
            app = "step"
            input = {{ name = "order", log = "{tmp_path / (name + '.log')}" }}
            [nodes.charge]
            project = "{ops}"
            app = "step"
            needs = ["order"]
            input = {{ name = "charge", fail = true }}
            on_failure = "notify"
            [nodes.ship]
            project = "{ops}"
            app = "step"
            input = {{ name = "ship", value = "{{{{ nodes.charge.result.id }}}}" }}
        """)
        res = workrun("run", wf, "--json")
        assert res.code == 4, res
        (ticket,) = res.json()["tickets"]
        return res.json()["run_id"], ticket["ticket_id"]

    resumed_run, resumed = waiting_run("pay1")
    ended_run, ended = waiting_run("pay2")
    server = ui_server()
    client = server.client()
    page = client.get("/tickets").text
    csrf = page.split('name="csrf" value="', 1)[1].split('"', 1)[0]
    origin = {"Origin": server.base}

    def act(tid: str, action: str, **data: str) -> None:
        answer = client.post(f"/actions/tickets/{tid}/{action}", data={"csrf": csrf, "back": "/tickets", **data},
                             headers=origin)
        assert answer.status_code == 303, answer.text

    def settled(run_id: str, status: str) -> dict:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            view = client.get(f"/api/runs/{run_id}").json()
            if view["status"] == status and view["compensation"] in (None, "complete"):
                return view
            time.sleep(0.2)
        raise AssertionError(client.get(f"/api/runs/{run_id}").json())

    act(resumed, "note", text="<b>card</b> charged by phone")
    shown = client.get("/tickets").text
    assert "&lt;b&gt;card&lt;/b&gt; charged by phone" in shown and "<b>card</b>" not in shown
    act(resumed, "resume", result='{"id": "ch_1"}')
    view = settled(resumed_run, "succeeded")
    ship = next(op for op in view["operations"] if op["node_key"] == "ship")
    assert ship["input"]["value"] == "ch_1"
    act(ended, "terminate", reason="the customer cancelled")
    view = settled(ended_run, "failed")
    order = next(op for op in view["operations"] if op["node_key"] == "order")
    assert order["compensation"]["status"] == "succeeded" and view["compensation"] == "complete"
    me = f"ui:{getpass.getuser()}"
    tickets = client.get("/api/tickets").json()
    history = {t["ticket_id"]: [(h["actor"], h["action"]) for h in t["history"]] for t in tickets}
    assert history[resumed][1:] == [(me, "note"), (me, "resume")], history
    assert history[ended][1:] == [(me, "terminate")], history
    assert [line for line in client.get("/tickets").text.splitlines() if "data-history" in line]


def test_a_refused_action_shows_the_use_cases_error_read_as_data(ui_server, workrun, write_workflow,
                                                                   isolated_env: Path) -> None:
    """Issue 27: a dashboard action's outcome comes from the child's structured result (exit code and error lines
    as data, from workrun.app), never from its stderr: a refused compensate shows the use case's exact line."""
    from workrun.cli import detached
    from workrun.core.errors import ActionRefusedError
    from workrun.ui import actions

    wf = write_workflow("fine", 'http_allow = ["127.0.0.1:9"]\n[nodes.a]\nkind = "http"\nmethod = "GET"\n'
                        'url = "http://127.0.0.1:9/x"\n')
    res = workrun("run", wf, "--eval", "--json")
    run_id = res.json()["run_id"]
    expected = ActionRefusedError("evaluation runs are never compensated (R-W6)", field="RUN").line()
    got = actions.run_action(isolated_env, ["compensate", run_id], scheduling=True)
    assert (got.state, got.code, got.line) == ("refused", 2, expected)
    server = ui_server()
    client = server.client()
    page = client.get(f"/runs/{run_id}").text
    csrf = page.split('name="csrf" value="', 1)[1].split('"', 1)[0]
    refused = client.post(f"/actions/runs/{run_id}/compensate", data={"csrf": csrf, "reason": "try"},
                          headers={"Origin": server.base})
    assert refused.status_code == 400 and "never compensated" in refused.text, refused.text
    for module in (actions, detached):  # nothing there reads an ``error:`` line of a command's output
        source = Path(module.__file__).read_text()
        assert '"error: "' not in source and "stderr=err" not in source


def test_find_runs_attention_and_a_read_only_dashboard(ui_server, workrun, write_workflow, isolated_env) -> None:
    """R-D1 find (text, status, dates, sort, pages, "no runs match"), R-D2 attention counts in the API and the
    navigation, R-D7 a read-only dashboard (every POST 403) and API clients acting with a bearer token and
    the X-Workrun-CSRF header."""
    from datetime import UTC, datetime

    ok = write_workflow("alpha-flow", 'http_allow = ["127.0.0.1:9"]\n[nodes.a]\nkind = "http"\nmethod = "GET"\n'
                        'url = "http://127.0.0.1:9/x"\n')
    ids = [workrun("run", ok, "--json").json()["run_id"] for _ in range(3)]
    server = ui_server()
    client = server.client()
    assert [r["run_id"] for r in client.get("/api/runs?q=alpha").json()] == ids[::-1]
    assert [r["run_id"] for r in client.get(f"/api/runs?q={ids[1][:10]}").json()] == [ids[1]]
    assert [r["run_id"] for r in client.get("/api/runs?order=asc").json()] == ids
    assert len(client.get("/api/runs?page=1&limit=2").json()) == 2
    assert len(client.get("/api/runs?page=2&limit=2").json()) == 1
    today = datetime.now(UTC).date().isoformat()
    assert len(client.get(f"/api/runs?since={today}&until={today}").json()) == 3
    assert client.get("/api/runs?until=2000-01-01").json() == []
    assert client.get("/api/runs?since=yesterday").status_code == 400
    assert client.get("/api/runs?sort=duration").status_code == 200
    assert "no runs match" in client.get("/?q=nothing-like-this").text
    need = client.get("/api/attention").json()
    assert need == {"compensations": {"failed": 0, "blocked": 0, "unknown": 0}, "tickets": {"pending": 0},
                    "total": 0}
    import httpx

    from workrun.ui.security import csrf_token

    # R-D7: a program holding the token acts with Bearer + X-Workrun-CSRF (no Origin); without the header: 403
    bearer = {"Authorization": f"Bearer {server.token}"}
    # ... the value it needs comes with any answer to it (new-user review: scraped from a form), never to a cookie
    said = httpx.get(f"{server.base}/api/attention", headers=bearer).headers.get("X-Workrun-CSRF")
    assert said == csrf_token(server.token)
    assert "x-workrun-csrf" not in server.client().get("/api/attention").headers
    answer = httpx.post(f"{server.base}/actions/runs/{ids[0]}/stop", data={"reason": "api"}, follow_redirects=False,
                        headers={**bearer, "X-Workrun-CSRF": said})
    assert answer.status_code == 303, answer.text  # "nothing to stop": decided by the use case, not refused
    assert httpx.post(f"{server.base}/actions/runs/{ids[0]}/stop", data={"reason": "api"},
                      headers=bearer).status_code == 403
    read_only = ui_server("--read-only")
    ro = read_only.client()
    page = ro.get(f"/runs/{ids[0]}").text
    assert 'id="rerun"' not in page and "read-only" in page
    csrf = page.split('name="csrf" value="', 1)[1].split('"', 1)[0] if 'name="csrf"' in page else "x"
    denied = ro.post(f"/actions/runs/{ids[0]}/rerun", data={"csrf": csrf}, headers={"Origin": read_only.base})
    assert denied.status_code == 403
    for who in ({}, {"Authorization": f"Bearer {read_only.token}"}):  # no credentials at all; a token holder
        anyone = httpx.post(f"{read_only.base}/actions/runs/{ids[0]}/stop", data={"reason": "x"}, headers=who)
        assert anyone.status_code == 403, anyone.text


def test_queue_pages_find_by_status_run_and_workflow_and_read_only_shows_no_action(ui_server, workrun,
                                                                                    write_workflow, tmp_path) -> None:
    """R-D1: the Compensations and Tickets pages (and their API) find by status, run and workflow and page; R-D7:
    the read-only dashboard's pages hold no action at all; R-D2: the navigation always shows its two numbers; a
    waiting run's page links to its pending ticket; unknown API paths answer JSON."""
    from _kit.ops_apps import write_project

    ops = write_project(tmp_path / "ops")
    tutorial = [workrun("run", TUTORIAL, "--json").json()["run_id"] for _ in range(2)]
    waiting = write_workflow("pay", f'[nodes.order]\nproject = "{ops}"\napp = "step"\ninput = {{ name = "order" }}\n'
                             f'[nodes.charge]\nproject = "{ops}"\napp = "step"\ninput = {{ name = "c", fail = true }}\n'
                             'needs = ["order"]\non_failure = "notify"\n')
    paying = workrun("run", waiting, "--json")
    assert paying.code == 4, paying
    pay_id = paying.json()["run_id"]
    (ticket,) = paying.json()["tickets"]
    server = ui_server()
    client = server.client()
    every = client.get("/compensations").text
    assert every.count('class="compensation queue-item"') == 2 and "2 compensations;" in every
    one = client.get(f"/compensations?run={tutorial[1][:12]}").text
    assert one.count('class="compensation queue-item"') == 1 and tutorial[1] in one and tutorial[0] not in one
    assert client.get("/compensations?workflow=cleanup-tutorial").text.count('class="compensation queue-item"') == 2
    assert "no compensations match" in client.get("/compensations?workflow=pay").text
    assert "no compensations on this page" in client.get("/compensations?page=2").text
    assert client.get("/compensations?status=bogus").status_code == 400
    assert client.get("/compensations?run=run_nope").status_code == 400
    assert client.get("/api/compensations?workflow=cleanup-tutorial").json() == workrun(
        "compensations", "list", "--workflow", "cleanup-tutorial", "--json").json()
    assert len(client.get("/api/compensations?workflow=cleanup-tutorial").json()) == 2
    assert client.get("/api/compensations?workflow=pay").json() == []
    tickets = client.get("/tickets?workflow=pay").text
    assert f'data-ticket="{ticket["ticket_id"]}"' in tickets
    assert "no tickets match" in client.get("/tickets?workflow=cleanup-tutorial").text
    assert "no tickets match" in client.get("/tickets?status=resolved").text
    assert client.get("/tickets?status=bogus").status_code == 400
    assert client.get("/api/tickets?workflow=pay").json() == workrun("tickets", "list", "--workflow", "pay",
                                                                     "--json").json()
    assert client.get("/api/tickets?workflow=cleanup-tutorial").json() == []
    for listing in ("compensations", "tickets"):  # as an empty --run: never "any workflow" (hostile review)
        empty = workrun(listing, "list", "--workflow", "")
        assert empty.code == 2 and "--workflow: an empty workflow name matches nothing" in empty.err, empty
    run_page = client.get(f"/runs/{pay_id}").text  # R-D2: the waiting run links to what needs a person
    assert f'href="#t-{ticket["ticket_id"]}" id="first-attention"' in run_page
    assert f'id="t-{ticket["ticket_id"]}"' in run_page
    assert 'id="count-tickets" title="pending tickets">1<' in every
    assert 'id="count-compensations" title="need a person: failed, blocked or unknown">0<' in every
    # small answers: an unknown API path is JSON; an offset without a limit is taken; a page past the last says so
    nope = client.get("/api/nope")
    assert nope.status_code == 404 and nope.json() == {"error": "no such API endpoint"}
    assert [r["run_id"] for r in client.get("/api/runs?offset=1").json()] == [tutorial[1], tutorial[0]]
    assert "no runs on this page" in client.get("/?page=5").text
    long = "a" * 50_000  # hostile review: a find parameter longer than anything it can match is a 400, not a 500
    for where in (f"/compensations?run={long}", f"/tickets?run={long}", f"/?q={long}", f"/api/runs?q={long}",
                  f"/compensations?workflow={long}"):
        assert client.get(where).status_code == 400, where
    assert client.get(f"/runs/{'a' * 300}").status_code == 404
    assert client.get(f"/api/compensations?run={'a' * 300}").status_code == 404
    ro = ui_server("--read-only").client()
    for where in ("/", f"/runs/{tutorial[0]}", f"/runs/{pay_id}", "/compensations", "/tickets", "/apps"):
        page = ro.get(where)
        assert page.status_code == 200 and 'method="post"' not in page.text, where


def test_verify_runs_are_left_out_of_the_api_and_the_runs_page_unless_all(ui_server, workrun) -> None:
    """R-V1, R-U7: ``/api/runs`` is ``runs list --json``, which leaves ``workrun verify``'s runs out unless ``--all``
    (``all=1``); the Runs page does the same, says what it left out, and keeps ``all`` across pages."""
    scenario = workrun("verify", TUTORIAL, "--json")
    assert scenario.code == 0, scenario
    verify_runs = scenario.json()[0]["runs"]
    client = ui_server().client()
    assert client.get("/api/runs").json() == workrun("runs", "list", "--json").json() == []
    every = client.get("/api/runs?all=1").json()
    assert every == workrun("runs", "list", "--all", "--json").json() and {r["run_id"] for r in every} == set(verify_runs)
    page = client.get("/").text
    assert not any(r in page for r in verify_runs)
    assert "no runs yet (1 verify run left out" in page, page
    # the note counts only the verify runs the filters match (review of the change)
    assert "verify run left out" not in client.get("/?q=zzz").text
    assert "no runs match (1 verify run left out" in client.get(f"/?q={verify_runs[0][:8]}").text
    shown = client.get("/?all=1").text
    assert all(r in shown for r in verify_runs) and ">verify</span>" in shown
    assert 'name="all" value="1" checked' in shown
    assert client.get("/api/runs?all=yes").status_code == 400
    ordinary = workrun("run", TUTORIAL, "--json").json()["run_id"]
    page = client.get("/").text
    assert ordinary in page and not any(r in page for r in verify_runs) and "verify run left out" not in page
    assert [r["run_id"] for r in client.get("/api/runs").json()] == [ordinary]


def test_the_compensations_and_tickets_api_page_as_the_runs_api_does(ui_server, workrun) -> None:
    """Adversarial review: ``/api/compensations`` ignored ``page`` while its page paged (R-D1); now ``page``,
    ``limit`` and ``offset`` take a part of ``compensations list --json`` as ``/api/runs`` does."""
    for _ in range(3):
        assert workrun("run", TUTORIAL, "--json").code == 1
    client = ui_server().client()
    every = client.get("/api/compensations").json()
    assert every == workrun("compensations", "list", "--json").json() and len(every) == 3
    assert client.get("/api/compensations?limit=2").json() == every[:2]
    assert client.get("/api/compensations?page=2&limit=2").json() == every[2:]
    assert client.get("/api/compensations?offset=1").json() == every[1:]
    assert client.get("/api/compensations?page=9").json() == []
    for query in ("limit=0", "page=x", "offset=-1"):
        assert client.get(f"/api/compensations?{query}").status_code == 400, query
        assert client.get(f"/api/tickets?{query}").status_code == 400, query
    assert client.get("/api/tickets?limit=1").json() == []


def test_verify_runs_compensations_are_left_out_of_the_queue_and_the_attention_count(ui_server, workrun,
                                                                                     marker_project, write_workflow,
                                                                                     tmp_path) -> None:
    """R-V1 and R-D2 (new-user review): the Runs page left verify's runs out but the Compensations page and the
    attention count took their compensations in; now both leave them out unless ``all=1``, as the CLI does."""
    wf = write_workflow("v", f"""
[nodes.a]
project = "{marker_project}"
app = "mark"
input = {{ name = "a", comp_fail = true }}
[nodes.b]
project = "{marker_project}"
app = "mark"
needs = ["a"]
input = {{ name = "b" }}
""")
    assert workrun("verify", wf, "--node", "a", env={"TEST_LOG": str(tmp_path / "c.log")}).code == 1
    client = ui_server().client()
    assert client.get("/api/compensations").json() == workrun("compensations", "list", "--json").json() == []
    every = client.get("/api/compensations?all=1").json()
    assert [c["status"] for c in every] == ["failed"] and every == \
        workrun("compensations", "list", "--all", "--json").json()
    assert client.get("/api/attention").json()["compensations"]["failed"] == 0
    page = client.get("/compensations").text
    assert "verify runs too" in page and every[0]["compensation_id"] not in page
    assert every[0]["compensation_id"] in client.get("/compensations?all=1").text
    assert client.get("/api/compensations?all=2").status_code == 400


def test_actions_waiting_for_a_busy_scheduler_never_hold_up_the_pages(isolated_env: Path, monkeypatch) -> None:
    """R-U8 (a scheduler never blocks reading), R-D5: actions run on threads of their own. Dashboard review: 45
    actions waiting for a busy scheduler held every thread of the server's pool, and a page took 26 s. Here 45
    actions are held (their command stands in, waiting on an event) while pages and the API still answer; an id
    that starts with ``-`` (an option to the CLI) is refused before anything runs."""
    import socket
    import threading

    import httpx
    import uvicorn

    from workrun.ui import app as ui_app
    from workrun.ui.security import csrf_token

    release = threading.Event()
    started: list[list[str]] = []

    def held(data_dir: Path, args: list[str], **_: object) -> object:
        if "retry" not in args:  # a stop, a note: quick, not held here
            return ui_app.ActionResult(state="done", code=0, line="", started_at=0.0)
        started.append(args)
        release.wait(60)
        return ui_app.ActionResult(state="done", code=0, line="", started_at=0.0)

    monkeypatch.setattr(ui_app, "run_action", held)
    from workrun.journal import open_journal

    isolated_env.mkdir(mode=0o700)
    open_journal(isolated_env).close()  # an empty journal for the pages to read
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    token = "t" * 32
    server = uvicorn.Server(uvicorn.Config(ui_app.create_app(data_dir=isolated_env, token=token, port=port),
                                           host="127.0.0.1", port=port, log_level="warning"))
    serving = threading.Thread(target=server.run, daemon=True)
    serving.start()
    base = f"http://127.0.0.1:{port}"
    auth = {"Authorization": f"Bearer {token}", "X-Workrun-CSRF": csrf_token(token)}
    try:
        while not server.started:
            threading.Event().wait(0.02)
        refused = httpx.post(f"{base}/actions/compensations/--help/retry", headers=auth, follow_redirects=False)
        assert refused.status_code == 400 and started == [], refused.text
        posts = [threading.Thread(target=httpx.post, args=(f"{base}/actions/compensations/cmp_{i:04d}/retry",),
                                  kwargs={"data": {"wait": "1"}, "headers": auth, "timeout": 120}, daemon=True)
                 for i in range(45)]
        for p in posts:
            p.start()
        while len(started) < ui_app.ACTION_THREADS:
            threading.Event().wait(0.02)
        # while every action thread is held and the rest queue for one, the pages answer
        assert httpx.get(f"{base}/api/attention", headers=auth, timeout=30).status_code == 200
        assert httpx.get(f"{base}/compensations", headers=auth, timeout=30).status_code == 200
        assert len(started) == ui_app.ACTION_THREADS  # no more actions at once than their own threads
        # ... and a stop or a note, which never wait for a scheduler, are never queued behind them (R-C9)
        stop = httpx.post(f"{base}/actions/runs/run_x/stop", data={"reason": "now"}, headers=auth, timeout=30)
        assert stop.status_code == 303, stop.text
        note = httpx.post(f"{base}/actions/compensations/cmp_x/note", data={"text": "seen"}, headers=auth, timeout=30)
        assert note.status_code == 303, note.text
        release.set()
        for p in posts:
            p.join(60)
        assert len(started) == 45
    finally:
        release.set()
        server.should_exit = True
        serving.join(10)
