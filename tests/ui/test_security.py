"""Dashboard security (R-U5) against a real ``workrun ui`` (uvicorn on a free loopback port), with a plain
HTTP client: the token, the Host check, POST + CSRF + Origin (nothing changed when refused), escaping of
hostile journal text, security headers, and no environment secret in any page or API answer."""

from __future__ import annotations

import getpass
import sqlite3
import time
from pathlib import Path

import httpx
import pytest

HOSTILE_APP = """
[tool.workrun.apps.hostile]
kind = "process"
entry = "main.py"
timeout = 60
compensation = { entry = "compensate.py", max_retries = 0 }
"""
HOSTILE_MAIN = """
import sys
from workrun_sdk import process
data = process.input()
sys.stderr.write("<img src=x onerror=alert(2)>\\n")
sys.stderr.write("nul\\x00esc\\x1b[31mred\\u202eltr\\n")
if data.get("fail"):
    raise SystemExit(3)
process.result({"note": "<script>alert(1)</script>", "name": "</pre><b>bold</b>"})
"""
HOSTILE_COMPENSATE = """
import sys
sys.stderr.write("<script>alert('stderr')</script>\\n")
raise SystemExit(5)
"""
NODE_KEY = 'a"b\'<i>quoted</i>'
BIDI_WORKFLOW = "bidi\u202eflow"
SECRET = "s3cr3t-value-that-must-never-show-0c1d"


@pytest.fixture
def hostile_home(isolated_env: Path, make_project, write_workflow, workrun) -> dict[str, str]:
    """A failed run of a hostile App (its compensation failed, so there is something to act on), plus a run
    with a node key full of quotes and markup written through the journal API."""
    project = make_project("hostile", HOSTILE_APP, {"main.py": HOSTILE_MAIN, "compensate.py": HOSTILE_COMPENSATE})
    wf = write_workflow("hostile", f"""
        name = "hostile"
        [nodes.evil]
        project = "{project}"
        app = "hostile"
        [nodes.boom]
        project = "{project}"
        app = "hostile"
        needs = ["evil"]
        input = {{ fail = true }}
    """)
    r = workrun("run", wf, "--json")
    assert r.code == 1, r
    run_id = r.json()["run_id"]
    comp = next(op["compensation"] for op in r.json()["operations"] if op["compensation"])
    assert comp["status"] == "failed", comp
    ok = workrun("run", write_workflow("fine", f'[nodes.evil]\nproject = "{project}"\napp = "hostile"\n'), "--json")
    assert ok.code == 0, ok
    ok_run = ok.json()["run_id"]

    from workrun.journal import SqliteJournal

    journal = SqliteJournal(isolated_env / "journal.sqlite3")
    journal.create_run({"run_id": "run_quotes00001", "workflow": '<script>alert("wf")</script>',
                        "workflow_path": "/x.toml", "spec": {"nodes": {NODE_KEY: {"key": NODE_KEY}}}, "inputs": {},
                        "status": "running", "created_at": time.time()}, [NODE_KEY])
    journal.add_message("run_quotes00001", NODE_KEY, "error", "<script>alert(3)</script>")
    journal.create_run({"run_id": "run_bidi00000001", "workflow": BIDI_WORKFLOW, "workflow_path": "/b.toml",
                        "spec": {"nodes": {}}, "inputs": {}, "status": "failed", "created_at": time.time()}, [])
    journal.close()
    return {"run_id": run_id, "compensation_id": comp["compensation_id"], "succeeded_run": ok_run}


def _events(home: Path) -> list[tuple]:
    db = sqlite3.connect(f"file:{home / 'journal.sqlite3'}?mode=ro", uri=True)
    try:
        return db.execute("SELECT id, actor, action, text FROM events ORDER BY id").fetchall()
    finally:
        db.close()


def test_token_cookie_and_host(ui_server, isolated_env: Path) -> None:
    server = ui_server()
    with httpx.Client(base_url=server.base, timeout=60) as anon:
        assert anon.get("/").status_code == 401
        assert anon.get("/api/runs").status_code == 401
        assert anon.get("/api/runs").json() == {  # the API refuses in JSON, as every other API error
            "error": "unauthorized: open the URL that `workrun ui` printed (with its token)"}
        assert anon.get("/").headers["content-type"].startswith("text/plain")
        assert anon.get("/?token=wrong").status_code == 401
        assert anon.get("/?token=%C3%A9%00").status_code == 401  # any text is compared safely, never a 500
        odd_cookie = f"workrun_session_{server.port}=\u00e9".encode("latin-1")
        assert anon.get("/", headers={"Cookie": odd_cookie}).status_code == 401
        assert anon.get("/api/runs", headers={"Authorization": "Bearer wrong"}).status_code == 401
        # the token is traded for a cookie and dropped from the URL
        first = anon.get(f"/?token={server.token}&status=failed")
        assert first.status_code == 303
        assert first.headers["location"] == "/?status=failed"
        # the redirect stays on this origin and never fails (hostile review): a path that decodes to "//host"
        # (a scheme-relative URL, another site), one outside Latin-1 (a header cannot hold it)
        for odd, where in (("/%2F%2Fevil.example/x", "/evil.example/x"), ("/runs/%E2%80%AE", "/runs/%E2%80%AE")):
            with httpx.Client(base_url=server.base, timeout=60) as fresh:
                moved = fresh.get(f"{odd}?token={server.token}")
            assert moved.status_code == 303 and moved.headers["location"] == where, (odd, moved.headers)
        with httpx.Client(base_url=server.base, timeout=60) as api:  # the scheme's name is not case-sensitive
            assert api.get("/api/runs", headers={"Authorization": f"bearer {server.token}"}).status_code == 200
        cookie = first.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and server.token not in cookie
        assert anon.get("/").status_code == 200  # the cookie now opens pages
        assert anon.get("/api/runs").json() == []
        # DNS rebinding: a valid session with a foreign Host header is refused
        assert anon.get("/", headers={"Host": f"evil.example:{server.port}"}).status_code == 403
        assert anon.get("/", headers={"Host": f"127.0.0.1:{server.port + 1}"}).status_code == 403
        assert anon.get("/", headers={"Host": f"localhost:{server.port}"}).status_code == 200
        assert anon.put("/").status_code == 405
        page = anon.get("/")
        assert "script-src 'self'" in page.headers["content-security-policy"]
        assert "unsafe-inline" not in page.headers["content-security-policy"]
        assert page.headers["x-content-type-options"] == "nosniff"
    with httpx.Client(base_url=server.base, timeout=60) as api:  # an API client may use the bearer token
        assert api.get("/api/runs", headers={"Authorization": f"Bearer {server.token}"}).status_code == 200
        assert api.get(f"/api/runs?token={server.token}").status_code == 200


def test_post_needs_csrf_and_same_origin(ui_server, hostile_home, isolated_env: Path) -> None:
    server = ui_server()
    client = server.client()
    cid = hostile_home["compensation_id"]
    page = client.get(f"/runs/{hostile_home['run_id']}").text
    csrf = page.split('name="csrf" value="', 1)[1].split('"', 1)[0]
    origin = {"Origin": server.base}
    before = _events(isolated_env)
    url = f"/actions/compensations/{cid}/note"
    refused = [
        client.post(url, data={"text": "no csrf"}, headers=origin),
        client.post(url, data={"text": "wrong csrf", "csrf": "0" * 64}, headers=origin),
        client.post(url, data={"text": "foreign", "csrf": csrf}, headers={"Origin": "http://evil.example"}),
        client.post(url, data={"text": "other port", "csrf": csrf},
                    headers={"Origin": f"http://127.0.0.1:{server.port + 1}"}),
        client.post(url, data={"text": "no origin", "csrf": csrf}),
        client.post(f"/actions/compensations/{cid}/resolve", data={"csrf": csrf}, headers={"Origin": "null"}),
    ]
    assert [r.status_code for r in refused] == [403] * 6
    assert _events(isolated_env) == before  # nothing changed
    assert client.get(f"/api/compensations/{cid}").json()["status"] == "failed"
    # the same request done right is done, audited as ui:<OS user>
    ok = client.post(url, data={"text": "checked by hand", "csrf": csrf, "back": "/compensations"}, headers=origin)
    assert ok.status_code == 303, ok.text
    after = _events(isolated_env)
    assert after[len(before):] == [(after[-1][0], f"ui:{getpass.getuser()}", "note", "checked by hand")]
    # refusals of the CLI are refusals here too (one line, nothing changed)
    bad = client.post(f"/actions/compensations/{cid}/confirm", data={"outcome": "done", "csrf": csrf}, headers=origin)
    assert bad.status_code == 400
    assert "cannot confirm" in bad.text
    # a resolve needs the field `reason` (R-D4): another field's text is no reason (dashboard review)
    unreasoned = client.post(f"/actions/compensations/{cid}/resolve", data={"text": "anything", "csrf": csrf},
                             headers=origin)
    assert unreasoned.status_code == 400 and "needs a reason" in unreasoned.text
    assert _events(isolated_env) == after
    assert client.get(f"/api/compensations/{cid}").json()["status"] == "failed"


def test_a_scheduling_action_the_cli_refuses_is_400_with_its_line_not_started(ui_server, hostile_home, workrun,
                                                                               isolated_env: Path) -> None:
    """A retry or compensate the CLI refuses answers 400 with the CLI's one line, never "started" (the command
    refuses before it takes the scheduler lock, which the dashboard reads as started)."""
    server = ui_server()
    client = server.client()
    cid = hostile_home["compensation_id"]
    assert workrun("compensations", "resolve", cid, "--note", "fixed by hand").code == 0
    page = client.get(f"/runs/{hostile_home['run_id']}").text
    csrf = page.split('name="csrf" value="', 1)[1].split('"', 1)[0]
    origin = {"Origin": server.base}
    before = _events(isolated_env)
    retry = client.post(f"/actions/compensations/{cid}/retry", data={"csrf": csrf}, headers=origin)
    assert retry.status_code == 400, retry.text
    assert f"cannot retry {cid} (succeeded): it is already done" in retry.text
    ok_run = hostile_home["succeeded_run"]
    compensate = client.post(f"/actions/runs/{ok_run}/compensate", data={"csrf": csrf, "reason": "r"}, headers=origin)
    assert compensate.status_code == 400, compensate.text
    assert f"run {ok_run} succeeded; succeeded runs are not compensated" in compensate.text
    assert _events(isolated_env) == before
    assert client.get(f"/api/compensations/{cid}").json()["status"] == "succeeded"


def test_hostile_numbers_and_nul_characters_are_answered_never_a_500(ui_server, hostile_home,
                                                                        isolated_env: Path) -> None:
    server = ui_server()
    client = server.client()
    huge = "9223372036854775807"
    for path in (f"/?page={huge}", f"/?page=-{huge}", f"/api/runs?limit={huge}&offset={huge}", "/?page=1e9"):
        assert client.get(path).status_code == 200, path
    assert client.get(f"/api/runs?limit={huge}").json()[0]["run_id"]
    # the API refuses a number it cannot use, naming it, as `runs list --limit 0` exits 2 (hostile review)
    for query, name in ((f"offset=-{huge}", "offset"), ("limit=-1", "limit"), ("limit=abc", "limit"),
                        ("limit=0", "limit"), ("page=0", "page"), ("page=1e9", "page")):
        answer = client.get(f"/api/runs?{query}")
        assert answer.status_code == 400 and answer.json()["error"].startswith(f"{name}: must be a whole number"), \
            (query, answer.text)
    # a NUL in a find parameter matched every run; a date with junk after it was read as the date (adversarial
    # review): both answered 400, naming the parameter
    for query, name in (("q=%00", "q"), ("workflow=a%00", "workflow"), ("since=2026-12-04T99", "since"),
                        ("until=2026-12-04xyz", "since and until")):
        answer = client.get(f"/api/runs?{query}")
        assert answer.status_code == 400 and answer.json()["error"].startswith(name), (query, answer.text)
    assert client.get("/compensations?run=%00").status_code == 400
    assert len(client.get("/api/runs?since=2026-01-01T08:00").json()) == len(client.get("/api/runs").json())
    page = client.get(f"/runs/{hostile_home['run_id']}").text
    csrf = page.split('name="csrf" value="', 1)[1].split('"', 1)[0]
    before = _events(isolated_env)
    cid = hostile_home["compensation_id"]
    for data in ({"text": "a\x00b"}, {"text": "ok", "back": "/\x00"}, {"outcome": "done\x00"}):
        action = "confirm" if "outcome" in data else "note"
        answer = client.post(f"/actions/compensations/{cid}/{action}", data={**data, "csrf": csrf},
                             headers={"Origin": server.base})
        assert answer.status_code == 400, (data, answer.status_code, answer.text)
    assert _events(isolated_env) == before


def test_hostile_journal_renders_as_text(ui_server, hostile_home) -> None:
    server = ui_server(env={"WORKRUN_TEST_SECRET": SECRET})
    client = server.client()
    run = client.get(f"/runs/{hostile_home['run_id']}").text
    assert "<script>alert(1)</script>" not in run and "&lt;script&gt;alert(1)&lt;/script&gt;" in run
    assert "<img src=x" not in run and "&lt;img src=x onerror=alert(2)&gt;" in run
    assert "</pre><b>bold</b>" not in run and "&lt;/pre&gt;&lt;b&gt;bold&lt;/b&gt;" in run
    assert "<script>alert('stderr')</script>" not in run
    # control and bidi-override characters are shown as the CLI shows them, never written raw (adversarial review)
    assert "\x00" not in run and "\x1b" not in run and "\u202e" not in run
    assert "nul\\x00esc\\x1b[31mred\\u202eltr" in run
    # ...but a value a page sends back is sent as it is: the Runs page's workflow filter finds a name holding one
    # (dashboard review: the option's value was the shown "\u202e", which matches no workflow)
    listing = client.get("/").text
    assert '<option value="bidi\u202eflow" >bidi\\u202eflow</option>' in listing, listing
    assert "run_bidi00000001" in client.get("/", params={"workflow": BIDI_WORKFLOW}).text
    found = client.get("/", params={"q": "bidi\u202e"}).text
    assert 'name="q" value="bidi\u202e"' in found and "run_bidi00000001" in found
    quotes = client.get("/runs/run_quotes00001").text
    assert "<i>quoted</i>" not in quotes and "&lt;i&gt;quoted&lt;/i&gt;" in quotes
    assert 'data-node="a&#34;b&#39;&lt;i&gt;quoted&lt;/i&gt;"' in quotes  # attribute stays one attribute
    assert "<script>alert(3)</script>" not in quotes
    listing = client.get("/").text
    assert '<script>alert("wf")</script>' not in listing and "&lt;script&gt;alert(&#34;wf&#34;)" in listing
    # only the dashboard's own script file, never inline script
    for html in (run, quotes, listing):
        assert html.count("<script") == 1 and '<script src="/static/app.js" defer></script>' in html
    # no environment secret anywhere
    pages = ["/", "/compensations", "/tickets", "/apps", f"/runs/{hostile_home['run_id']}", "/runs/run_quotes00001",
             "/api/runs", f"/api/runs/{hostile_home['run_id']}", "/api/compensations",
             f"/api/compensations/{hostile_home['compensation_id']}"]
    for p in pages:
        r = client.get(p)
        assert r.status_code == 200, p
        assert SECRET not in r.text, p


def test_scheduling_action_while_another_scheduler_runs_is_409(ui_server, hostile_home, isolated_env: Path) -> None:
    from workrun.core.lock import SchedulerLock

    server = ui_server()
    client = server.client()
    cid = hostile_home["compensation_id"]
    page = client.get(f"/runs/{hostile_home['run_id']}").text
    csrf = page.split('name="csrf" value="', 1)[1].split('"', 1)[0]
    before = _events(isolated_env)
    runs_before = client.get("/api/runs").json()
    lock = SchedulerLock(isolated_env).acquire()  # this test process is "another scheduler"
    try:
        busy = client.post(f"/actions/compensations/{cid}/retry", data={"csrf": csrf}, headers={"Origin": server.base})
        rerun = client.post(f"/actions/runs/{hostile_home['run_id']}/rerun", data={"csrf": csrf},
                            headers={"Origin": server.base})
    finally:
        lock.release()
    assert busy.status_code == 409 and rerun.status_code == 409
    assert "another scheduler holds" in busy.text and "--wait" in busy.text
    assert _events(isolated_env) == before
    assert client.get("/api/runs").json() == runs_before
    assert client.get(f"/api/compensations/{cid}").json()["status"] == "failed"
