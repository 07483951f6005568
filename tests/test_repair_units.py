"""Unit tests of manual repair (SPEC §12): failure policies, action rendering, the ticket state
machines, the journal's ticket transactions on a real SQLite file, and the engine with fake executors
(no processes)."""

from __future__ import annotations

import json

import pytest

from _kit.fakes import FakeExecutor, failing, hold, services, workflow
from workrun.config.workflow import parse_policy
from workrun.core.errors import ConfigError, InvalidTransitionError, StaleStatusError
from workrun.core.models import HttpAction
from workrun.core.states import allowed, check
from workrun.effects.ticket_records import event_row, render_request, ticket_message, ticket_row
from workrun.engine.driver import Engine, create_run
from workrun.journal.sqlite import SqliteJournal
from workrun.outbound.http import from_queued


@pytest.mark.parametrize("value, kind, exhausted", [
    ("notify", "notify", "notify"),
    ("terminate", "terminate", "terminate"),
    ({"retry": {"attempts": 2}}, "retry", "fail"),
    ({"retry": {"attempts": 2}, "then": "notify"}, "retry", "notify"),
    ({"compensate": {"method": "POST", "url": "http://127.0.0.1/x"}}, "compensate", "compensate"),
    ({"fallback_action": {"method": "POST", "url": "http://127.0.0.1/x"}}, "fallback_action", "fallback_action"),
    ("fail", "fail", "fail"),
    ("continue", "continue", "fail"),
])
def test_policies_parse_to_what_they_lead_to(value, kind, exhausted):
    policy = parse_policy(value, "wf.toml", "nodes.a.on_failure")
    assert (policy.kind, policy.exhausted, policy.opens_ticket) == (kind, exhausted, exhausted != "fail")


@pytest.mark.parametrize("value, field", [
    ("nag", "nodes.a.on_failure"),
    ({"then": "notify"}, "nodes.a.on_failure.then"),
    ({"retry": {"attempts": 2}, "then": "terminate"}, "nodes.a.on_failure.then"),
    ({"compensate": "http://x"}, "nodes.a.on_failure.compensate"),
    ({"compensate": {"method": "POST"}}, "nodes.a.on_failure.compensate.url"),
    ({"compensate": {"method": "POST", "url": "http://x/", "max_retries": True}},
     "nodes.a.on_failure.compensate.max_retries"),
    ({"notify": True}, "nodes.a.on_failure.notify"),
])
def test_bad_policies_name_their_field(value, field):
    with pytest.raises(ConfigError) as err:
        parse_policy(value, "wf.toml", "nodes.a.on_failure")
    assert err.value.file == "wf.toml" and err.value.field == field


def test_action_values_are_filled_at_registration_and_encoded_in_the_url():
    action = HttpAction(method="POST", url="http://127.0.0.1/refund/{{ nodes.order.result.id }}?run={{ run_id }}",
                        headers={"Authorization": "Bearer {{ env.TOKEN }}"},
                        body={"order": "{{ nodes.order.result.id }}", "why": "node {{ node_key }}: {{ error }}"})
    values = {"inputs": {}, "nodes": {"order": {"result": {"id": "a/b?c"}}}, "run_id": "run_1", "node_key": "charge",
              "error": "HTTP 402"}
    req = render_request(action, values, idempotency_key="tkt_1")
    assert req["url"] == "http://127.0.0.1/refund/a%2Fb%3Fc?run=run_1"
    assert req["headers"]["Authorization"] == "Bearer {{ env.TOKEN }}"  # read at send time only (R-H5)
    assert req["body"] == {"order": "a/b?c", "why": "node charge: HTTP 402"}
    sent = from_queued(req["prepared"], {"TOKEN": "t0k"})
    assert sent.headers["Authorization"] == "Bearer t0k" and sent.secrets == {"TOKEN": "t0k"}
    assert sent.target == "/refund/a%2Fb%3Fc?run=run_1" and sent.headers["Idempotency-Key"] == "tkt_1"
    whole = HttpAction(method="POST", url="http://127.0.0.1/", body={"id": "{{ nodes.order.result.id }}"})
    assert render_request(whole, {"nodes": {"order": {"result": {"id": 7}}}}, idempotency_key="k")["body"] == {"id": 7}
    with pytest.raises(KeyError):
        render_request(HttpAction(method="POST", url="http://127.0.0.1/{{ nodes.order.result.missing }}"), values,
                       idempotency_key="k")


@pytest.mark.parametrize("where", ["inputs", "result", "error", "message"])
def test_a_value_from_outside_holding_a_template_is_sent_literally(where, monkeypatch):
    """R-X1 (issue 26, bug 1): a ticket action or notification is prepared once; a value from an input, a node's
    result, an error or a message that holds ``{{ env.NAME }}`` is data and reaches the wire as written."""
    monkeypatch.setenv("OTHER_SECRET", "s3cr3t")
    monkeypatch.setenv("TOKEN", "t0k")
    evil = "declined: {{ env.OTHER_SECRET }}"
    values = {"inputs": {"note": "-"}, "nodes": {"lookup": {"result": {"body": {"note": "-"}}}}, "error": "-",
              "message": "-", "run_id": "run_1"}
    ref = {"inputs": "inputs.note", "result": "nodes.lookup.result.body.note", "error": "error",
           "message": "message"}[where]
    if where == "inputs":
        values["inputs"]["note"] = evil
    elif where == "result":
        values["nodes"]["lookup"]["result"]["body"]["note"] = evil
    else:
        values[where] = evil
    action = HttpAction(method="POST", url="http://127.0.0.1/refund?note={{ " + ref + " }}",
                        headers={"X-Note": "{{ " + ref + " }}", "Authorization": "Bearer {{ env.TOKEN }}"},
                        body={"note": "{{ " + ref + " }}", "text": "n: {{ " + ref + " }}"})
    req = render_request(action, values, idempotency_key="tkt_1")
    sent = from_queued(req["prepared"])
    assert sent.headers["X-Note"] == evil and sent.headers["Authorization"] == "Bearer t0k"
    assert b"s3cr3t" not in (sent.body or b"") and "s3cr3t" not in sent.target
    assert "s3cr3t" not in json.dumps(req)
    assert sent.secrets == {"TOKEN": "t0k"}


@pytest.mark.parametrize("value, says", [("", "empty value for {{ nodes.o.result.id }} in url"),
                                         ("  ", "empty value for {{ nodes.o.result.id }} in url"),
                                         (None, "empty value for {{ nodes.o.result.id }} in url"),
                                         ("..", "unsafe path from {{ nodes.o.result.id }}"),
                                         (".", "unsafe path from {{ nodes.o.result.id }}")])
def test_an_empty_or_dot_value_in_a_url_is_never_sent(value, says):
    """R-X3: an action whose filled URL would hit the collection (``DELETE /orders/``) is stored unsendable."""
    action = HttpAction(method="DELETE", url="http://127.0.0.1/orders/{{ nodes.o.result.id }}")
    req = render_request(action, {"nodes": {"o": {"result": {"id": value}}}}, idempotency_key="k")
    assert req["prepared"] is None and req["unsendable"] == says
    query = HttpAction(method="DELETE", url="http://127.0.0.1/orders?id={{ nodes.o.result.id }}")
    if value is None or not value.strip():
        assert render_request(query, {"nodes": {"o": {"result": {"id": value}}}}, idempotency_key="k")["unsendable"]


@pytest.mark.parametrize("status, says", [("pending", "waits for a person"),
                                          ("resolved", "handled by its fallback action"),
                                          ("terminated", "ended the run terminated")])
def test_ticket_message_is_one_line_saying_what_became_of_the_node(status, says):
    text = ticket_message("run_1", "charge", "tkt_1", "line one\nline two", status)
    assert "\n" not in text and all(w in text for w in ("run_1", "charge", "tkt_1", "line one line two", says))
    assert (status == "pending") == ("waits for a person" in text)  # only a pending ticket waits


@pytest.mark.parametrize("table, old, new, ok", [
    ("runs", "running", "waiting", True), ("runs", "waiting", "running", True),
    ("runs", "waiting", "terminated", True), ("runs", "waiting", "succeeded", False),
    ("runs", "terminated", "running", False),
    ("nodes", "running", "waiting", True), ("nodes", "waiting", "succeeded", True),
    ("nodes", "waiting", "running", False), ("nodes", "pending", "waiting", False),
    ("tickets", "pending", "resolved", True), ("tickets", "resolved", "pending", False),
    ("tickets", "terminated", "resolved", False),
    ("ticket_actions", "unknown", "pending", False), ("ticket_actions", "failed", "pending", True),
    ("ticket_attempts", "sending", "unknown", True), ("ticket_attempts", "starting", "unknown", False),
    ("notifications", "sending", "pending", False), ("notifications", "pending", "sending", True),
])
def test_state_machines(table, old, new, ok):
    assert allowed(table, old, new) is ok
    if not ok:
        with pytest.raises(InvalidTransitionError):
            check(table, ("k",), old, new)


def _journal_with_waiting_node(tmp_path):
    j = SqliteJournal(tmp_path / "j.sqlite3")
    j.create_run({"run_id": "run_1", "workflow": "w", "workflow_path": "/w.toml", "spec": {}, "inputs": {},
                  "status": "running", "eval": 0, "rerun_of": None, "created_at": 1.0}, ["a", "b"])
    j.start_node("run_1", "a", at=2.0)
    j.open_ticket(ticket_row("tkt_1", "run_1", "a", "notify", "pending", "boom", 3.0), node_status="waiting",
                  handled=False, at=3.0, events=[event_row("tkt_1", "run_1", "workrun", "open", {}, 3.0)])
    j.pause_run("run_1", reason="waiting", at=4.0)
    return j


def test_resume_is_one_transaction_and_refuses_a_stale_ticket(tmp_path):
    j = _journal_with_waiting_node(tmp_path)
    j.resume_ticket("tkt_1", {"id": 7}, event_row("tkt_1", "run_1", "ann", "resume", {}, 5.0), at=5.0)
    assert j.ticket("tkt")["status"] == "resolved" and j.run("run_1")["status"] == "running"
    assert {n["node_key"]: (n["status"], n["handled"], n["result"]) for n in j.nodes("run_1")}["a"] == \
        ("succeeded", 1, {"id": 7})
    with pytest.raises(StaleStatusError):  # a second resume finds the ticket resolved: nothing written
        j.resume_ticket("tkt_1", {}, event_row("tkt_1", "run_1", "bob", "resume", {}, 6.0), at=6.0)
    assert [e["actor"] for e in j.ticket_events("tkt_1")] == ["workrun", "ann"]


def test_ending_a_run_ends_its_waiting(tmp_path):
    j = _journal_with_waiting_node(tmp_path)
    j.end_run("run_1", "stopped", at=5.0, reason="stopped by the user")
    assert j.ticket("tkt_1")["status"] == "terminated" and j.ticket_events("tkt_1")[-1]["action"] == "terminate"
    assert [(n["node_key"], n["status"]) for n in j.nodes("run_1")] == [("a", "stopped"), ("b", "skipped")]


def test_notification_subjects_are_never_recorded_twice(tmp_path):
    j = _journal_with_waiting_node(tmp_path)
    row = {"notification_id": "ntf_1", "subject": "ticket:tkt_1", "run_id": "run_1", "ticket_id": "tkt_1",
           "compensation_id": None, "message": "m", "request": {}, "status": "pending", "http_status": None,
           "error": None, "created_at": 1.0, "updated_at": 1.0}
    assert j.add_notification(row) is True
    assert j.add_notification({**row, "notification_id": "ntf_2"}) is False
    assert [n["notification_id"] for n in j.notifications("run_1")] == ["ntf_1"]


# -- the engine with fake executors (no process) ---------------------------------------------------------------


def _run(tmp_path, nodes, behaviours):
    svc = services(tmp_path)
    fake = FakeExecutor(behaviours)
    run_id = create_run(svc, workflow(nodes), {})
    return svc, fake, run_id, Engine(svc, {"process": fake}).execute(run_id)


def _statuses(svc, run_id):
    return {n["node_key"]: (n["status"], bool(n["handled"])) for n in svc.journal.nodes(run_id)}


def test_engine_notify_waits_and_lets_independent_branches_finish(tmp_path):
    svc, fake, run_id, status = _run(tmp_path, {"a": {}, "pay": {"needs": ["a"], "on_failure": "notify"},
                                                "ship": {"needs": ["pay"]}, "side": {}},
                                     {"pay": failing("HTTP 402")})
    assert status == "waiting" and svc.journal.run(run_id)["status"] == "waiting"
    assert _statuses(svc, run_id) == {"a": ("succeeded", False), "pay": ("waiting", False),
                                      "ship": ("pending", False), "side": ("succeeded", False)}
    assert "ship" not in fake.started and fake.after == []  # nothing ended: no after_run (no cancel)
    (t,) = svc.journal.tickets(run_id)
    assert (t["node_key"], t["status"], t["policy"], t["error"]) == ("pay", "pending", "notify", "HTTP 402")
    assert svc.journal.compensations(run_id) == []


def test_engine_a_final_failure_elsewhere_ends_the_waiting_too(tmp_path):
    def late_failure(job):
        hold(0.2)(job)
        return failing("late")(job)

    svc, _, run_id, status = _run(tmp_path, {"pay": {"on_failure": "notify"}, "other": {}},
                                  {"pay": failing("HTTP 402"), "other": late_failure})
    assert status == "failed"
    assert _statuses(svc, run_id) == {"pay": ("failed", False), "other": ("failed", False)}
    (t,) = svc.journal.tickets(run_id)
    assert t["status"] == "terminated" and svc.journal.ticket_events(t["ticket_id"])[-1]["action"] == "terminate"


def test_engine_terminate_policy_stops_scheduling_and_ends_terminated(tmp_path):
    svc, fake, run_id, status = _run(tmp_path, {"pay": {"on_failure": "terminate"}, "ship": {"needs": ["pay"]}},
                                     {"pay": failing()})
    assert status == "terminated" and fake.started == ["pay"] and fake.after == [run_id]
    assert _statuses(svc, run_id) == {"pay": ("failed", False), "ship": ("skipped", False)}
    assert svc.journal.tickets(run_id)[0]["status"] == "terminated" and svc.journal.compensations(run_id) == []


def test_engine_fallback_action_handles_the_node_and_goes_on(tmp_path):
    policy = {"fallback_action": {"method": "POST", "url": "http://127.0.0.1:9/x/{{ run_id }}"}}
    svc, fake, run_id, status = _run(tmp_path, {"pay": {"on_failure": policy}, "ship": {"needs": ["pay"]}},
                                     {"pay": failing()})
    assert status == "succeeded" and fake.started == ["pay", "ship"]
    assert _statuses(svc, run_id)["pay"] == ("failed", True)
    (t,) = svc.journal.tickets(run_id)
    action = svc.journal.ticket_action(t["ticket_id"])
    assert t["status"] == "resolved" and action["status"] == "pending"  # registered; it runs by itself later
    assert action["request"]["url"] == f"http://127.0.0.1:9/x/{run_id}"


def test_engine_a_waiting_run_is_never_advanced_by_execute(tmp_path):
    svc, _, run_id, status = _run(tmp_path, {"pay": {"on_failure": "notify"}, "ship": {"needs": ["pay"]}},
                                  {"pay": failing()})
    again = FakeExecutor()
    assert status == "waiting" and Engine(svc, {"process": again}).execute(run_id) == "waiting"
    assert again.started == [] and _statuses(svc, run_id)["pay"] == ("waiting", False)


def test_engine_opens_tickets_only_through_the_policy_handed_in(tmp_path):
    """Issue 27: the engine knows no ticket; the surface hands the policy in (``Services(open_ticket=…)``). The
    engine calls exactly that with the failed node's outcome; with none handed in, a node that would open one is
    a composition bug, said as such, and no ticket is written."""
    from workrun.repair.policy import open_ticket

    calls = []

    def policy(svc, run_id, spec, key, failure_policy, outcome, context):
        calls.append((key, failure_policy.exhausted, outcome.error, sorted(context)))
        return open_ticket(svc, run_id, spec, key, failure_policy, outcome, context)

    svc = services(tmp_path)
    svc.open_ticket = policy
    run_id = create_run(svc, workflow({"pay": {"on_failure": "notify"}}), {})
    assert Engine(svc, {"process": FakeExecutor({"pay": failing("HTTP 402")})}).execute(run_id) == "waiting"
    assert calls == [("pay", "notify", "HTTP 402", ["inputs", "nodes"])]
    (t,) = svc.journal.tickets(run_id)
    assert (t["node_key"], t["policy"], t["status"]) == ("pay", "notify", "pending")

    (tmp_path / "two").mkdir()
    svc2 = services(tmp_path / "two")
    svc2.open_ticket = None
    run2 = create_run(svc2, workflow({"pay": {"on_failure": "notify"}}), {})
    with pytest.raises(RuntimeError, match="no ticket policy was handed in"):
        Engine(svc2, {"process": FakeExecutor({"pay": failing("HTTP 402")})}).execute(run2)
    assert svc2.journal.tickets(run2) == []
