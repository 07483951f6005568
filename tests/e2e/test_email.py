"""Email actions (SPEC §19, R-K2) against a real SMTP server on loopback (aiosmtpd): a reverse action, a ticket
action and a notification; subjects and Message-IDs; a refusal before the message, a 4xx and a 5xx after
it, and a connection dropped after the message (unknown, never re-sent)."""

from __future__ import annotations

import json
from datetime import datetime

import pytest

from _kit.http_server import TestServer
from _kit.smtp_server import SmtpServer


@pytest.fixture
def smtp():
    with SmtpServer() as server:
        yield server


@pytest.fixture
def shop():
    with TestServer() as server:
        server.route("POST", "/orders", status=201, json={"id": "7"})
        server.route("POST", "/boom", status=500, body="no")
        server.route("POST", "/pay", status=402, body="declined")
        yield server


def _smtp_table(smtp: SmtpServer, shop: TestServer, extra: str = "") -> str:
    return (f'http_allow = ["127.0.0.1:{shop.port}", "127.0.0.1:{smtp.port}"]\n'
            f'[smtp]\nhost = "127.0.0.1"\nport = {smtp.port}\nfrom = "workrun@example.com"\ntimeout = 5\n{extra}')


def _reverse(smtp: SmtpServer, shop: TestServer, retries: int = 2, idempotent: bool = False, auth: str = "") -> str:
    return _smtp_table(smtp, shop, auth) + f"""
[nodes.order]
kind = "http"
method = "POST"
url = "{shop.url}/orders"
compensation = {{ email = {{ to = ["ops@example.com"], cc = ["lead@example.com"], \
body = "Undo order {{{{ original.result.body.id }}}} of run {{{{ run_id }}}}: {{{{ error }}}}" }}, \
max_retries = {retries}, backoff = 0.05, idempotent = {str(idempotent).lower()} }}
[nodes.boom]
kind = "http"
method = "POST"
url = "{shop.url}/boom"
needs = ["order"]
"""


def _comp(view: dict, node: str = "order") -> dict:
    return next(o for o in view["operations"] if o["node_key"] == node)["compensation"]


def test_a_reverse_action_emails_with_its_subject_and_message_id(smtp, shop, write_workflow, workrun):
    res = workrun("run", write_workflow("mail", _reverse(smtp, shop)), "--json")
    assert res.code == 1, res
    comp = _comp(res.json())
    assert comp["status"] == "succeeded", comp
    [got] = smtp.received
    msg = got["message"]
    rid = res.json()["run_id"]
    assert got["from"] == "workrun@example.com" and got["to"] == ["ops@example.com", "lead@example.com"]
    assert msg["Subject"] == f"Workrun: reverse action — {rid} order"
    assert msg["Message-ID"] == f"<{comp['compensation_id']}@workrun>"
    body = msg.get_payload(decode=True).decode()
    assert "Undo order 7 of run " + rid in body and "boom" in body
    assert comp["attempts"][0]["smtp_code"] == 250


def test_a_refused_recipient_is_not_sent_and_retried(smtp, shop, write_workflow, workrun):
    smtp.mode = "refuse_rcpt"
    res = workrun("run", write_workflow("mail", _reverse(smtp, shop, retries=1)), "--json")
    comp = _comp(res.json())
    assert comp["status"] == "failed" and len(comp["attempts"]) == 2, comp  # retried within its attempts
    assert smtp.datas == 0 and all(a["smtp_code"] == 550 for a in comp["attempts"])
    assert "refused recipient" in comp["attempts"][0]["error"]


def test_4xx_after_data_is_retried_and_5xx_is_a_dead_letter_at_once(smtp, shop, write_workflow, workrun):
    smtp.mode = "defer"
    deferred = _comp(workrun("run", write_workflow("defer", _reverse(smtp, shop, retries=1)), "--json").json())
    assert deferred["status"] == "failed" and [a["smtp_code"] for a in deferred["attempts"]] == [451, 451]
    ids = [m["Message-ID"] for m in smtp.messages()]  # the same Message-ID for every attempt (de-duplication)
    assert ids == [f"<{deferred['compensation_id']}@workrun>"] * 2
    smtp.mode = "reject"
    before = smtp.datas
    rejected = _comp(workrun("run", write_workflow("reject", _reverse(smtp, shop, retries=3)), "--json").json())
    assert rejected["status"] == "failed" and [a["smtp_code"] for a in rejected["attempts"]] == [554]
    assert smtp.datas == before + 1  # never retried: a dead letter at once


def test_an_email_actions_own_timeout_bounds_its_wait(smtp, shop, write_workflow, workrun):
    """Adversarial review: an email action's ``timeout`` (beside the kind key, as every action's attempt setting)
    was ignored for ``[smtp]``'s (5 s here; 30 s by default). An answer that never comes after the message ends
    the attempt after the action's 1 s: sent, not answered, ``unknown``."""
    smtp.mode = "hang"
    wf = write_workflow("hang", _reverse(smtp, shop, retries=0).replace("backoff = 0.05,", "backoff = 0.05, timeout = 1,"))
    comp = _comp(workrun("run", wf, "--json").json())
    assert comp["status"] == "unknown" and smtp.datas == 1, comp
    [attempt] = comp["attempts"]
    took = (datetime.fromisoformat(attempt["ended_at"]) - datetime.fromisoformat(attempt["started_at"])).total_seconds()
    assert took < 4, took


def test_a_connection_dropped_after_the_message_is_unknown_and_never_resent(smtp, shop, write_workflow, workrun):
    smtp.mode = "drop"
    comp = _comp(workrun("run", write_workflow("drop", _reverse(smtp, shop)), "--json").json())
    assert comp["status"] == "unknown", comp
    assert smtp.datas == 1 and comp["attempts"][0]["smtp_code"] is None


def test_a_ticket_action_and_its_notification_by_email(smtp, shop, write_workflow, workrun):
    wf = write_workflow("ticket", _smtp_table(smtp, shop) + f"""
[notify]
email = {{ to = ["oncall@example.com"], body = "{{{{ message }}}}" }}
[nodes.pay]
kind = "http"
method = "POST"
url = "{shop.url}/pay"
on_failure = {{ compensate = {{ email = {{ to = ["billing@example.com"], body = "Refund for {{{{ run_id }}}}: \
{{{{ error }}}}" }} }} }}
""")
    res = workrun("run", wf, "--json")
    assert res.code == 4, res
    [ticket] = res.json()["tickets"]
    tid, rid = ticket["ticket_id"], res.json()["run_id"]
    by_to = {r["to"][0]: r["message"] for r in smtp.received}
    assert set(by_to) == {"billing@example.com", "oncall@example.com"}
    action, note = by_to["billing@example.com"], by_to["oncall@example.com"]
    assert action["Message-ID"] == f"<{tid}@workrun>" and note["Message-ID"] == f"<{tid}.notify@workrun>"
    assert action["Subject"] == note["Subject"] == f"Workrun: compensation needs attention — {rid} pay"
    assert "HTTP 402" in action.get_payload(decode=True).decode()
    shown = workrun("tickets", "show", tid, "--json").json()
    assert shown["action"]["status"] == "succeeded" and shown["action"]["attempts"][0]["smtp_code"] == 250


@pytest.mark.parametrize("text, field", [
    ('[nodes.a]\nkind = "http"\nmethod = "GET"\nurl = "http://127.0.0.1:9/"\n'
     'on_failure = { compensate = { email = { to = ["a@b.c"], body = "x" } } }\n', "nodes.a.on_failure.compensate"),
    ('[smtp]\nhost = "smtp.example.com"\nfrom = "w@x.y"\nusername = "u"\npassword = "{{ env.SMTP_PW }}"\n'
     '[nodes.a]\nkind = "http"\nmethod = "GET"\nurl = "http://127.0.0.1:9/"\n', "smtp.username"),
    ('[smtp]\nhost = "127.0.0.1"\nfrom = "w@x.y"\n[nodes.a]\nkind = "http"\nmethod = "GET"\n'
     'url = "http://127.0.0.1:9/"\non_failure = { compensate = { email = { to = ["{{ inputs.x }}"], body = "x" } } }\n'
     '[inputs]\nx = "a@b.c"\n', "nodes.a.on_failure.compensate.email.to"),
])
def test_bad_email_config_is_exit_2_naming_the_field(cli, write_workflow, text, field):
    res = cli("check", write_workflow("bad", text), env={"SMTP_PW": "pw"})
    assert res.code == 2 and f": {field}: " in res.err, res


def test_the_smtp_password_is_never_stored(smtp, shop, write_workflow, workrun, isolated_env):
    """The password is read at send time and appears in no file of the data directory and no output (R-X2)."""
    secret = "smtp-pw-Zq81/77"
    wf = write_workflow("auth", _reverse(smtp, shop, auth='username = "bot"\npassword = "{{ env.SMTP_PW }}"\n'))
    res = workrun("run", wf, "--json", env={"SMTP_PW": secret})
    assert res.code == 1, res
    assert smtp.logins == [("bot", secret)] and len(smtp.received) == 1
    assert secret not in res.out + res.err
    files = [p for p in isolated_env.rglob("*") if p.is_file()]
    assert all(secret.encode() not in p.read_bytes() for p in files)
    assert json.dumps(res.json()).count(secret) == 0


@pytest.mark.parametrize("text, field", [
    ('[smtp]\nhost = "127.0.0.1"\nfrom = "w@x.y\\r\\nBcc: evil@example.net"\n', "smtp.from"),
    ('[smtp]\nhost = "127.0.0.1"\nfrom = "w@x.y"\n[nodes.b]\nkind = "http"\nmethod = "GET"\n'
     'url = "http://127.0.0.1:9/"\non_failure = { compensate = { email = { to = ["a@example.com\\u0000"], '
     'body = "x" } } }\n', "nodes.b.on_failure.compensate.email.to"),
])
def test_control_characters_in_addresses_are_exit_2(cli, write_workflow, text, field):
    """Break-it findings: a CR/LF in [smtp] from (header injection) or a NUL in a recipient never reaches send."""
    wf = write_workflow("ctl", text + '[nodes.a]\nkind = "http"\nmethod = "GET"\nurl = "http://127.0.0.1:9/"\n')
    res = cli("check", wf)
    assert res.code == 2 and f": {field}: " in res.err, res


@pytest.mark.parametrize("point, status, sent", [
    ("attempt.intent", "succeeded", 1),  # killed before "about to send": never sent, sent once on resume
    ("attempt.started", "unknown", 0),  # killed after "about to send": it may have gone out, so never re-sent
    ("attempt.finished", "succeeded", 1),  # killed after the outcome was journaled: nothing to do again
])
def test_an_email_is_sent_at_most_once_across_kill_9(smtp, shop, write_workflow, workrun, point, status, sent,
                                                     journal_backend):
    """R-R3/R-K2 on both journals (fleet review: on PostgreSQL the run taking over asked the request claims, which
    no email has, and failed on ``running -> not_started`` for good)."""
    killed = workrun("run", write_workflow("mail", _reverse(smtp, shop)), "--json", env={"WORKRUN_FAULT": point})
    assert killed.code == -9, killed
    workrun("resume", "--json")
    [run] = workrun("runs", "list", "--json").json()
    comp = _comp(workrun("runs", "show", run["run_id"], "--json").json())
    assert comp["status"] == status, comp
    assert len(smtp.received) == sent
    assert [a["status"] for a in comp["attempts"]].count("succeeded") == (1 if status == "succeeded" else 0)
