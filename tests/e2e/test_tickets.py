"""Manual repair end to end (issue 12, SPEC §12: R-M1..R-M8): waiting runs, tickets, the operator's
commands and their refusals, ticket actions and notifications against a real loopback HTTP server,
kill -9 of the runner. Real uv Apps, the real CLI.
"""

from __future__ import annotations

import json
import signal
import stat
from pathlib import Path

import pytest

from _kit.http_server import TestServer
from _kit.ops_apps import write_project

ALLOW = {"WORKRUN_HTTP_ALLOW": "127.0.0.1"}


@pytest.fixture(scope="module")
def ops(tmp_path_factory):
    return write_project(tmp_path_factory.mktemp("ops") / "ops")


@pytest.fixture
def hook():
    """The loopback server: the notification hook and the actions' targets (all answer 200 unless a test says)."""
    with TestServer() as server:
        for path in ("/hook", "/refund", "/refund/order", "/fallback"):
            server.route("POST", path, status=200, json={"ok": True})
        yield server


def node(key, ops, inp, extra=""):
    return f'[nodes.{key}]\nproject = "{ops}"\napp = "step"\ninput = {inp}\n{extra}\n'


def notify_table(server):
    return (f'[notify]\nhttp = {{ method = "POST", url = "{server.url}/hook", '
            'body = { text = "{{ message }}" } }\n')


def statuses(view):
    return {n["node_key"]: n["status"] for n in view["nodes"]}


def log_names(log: Path):
    return [json.loads(line)["name"] for line in log.read_text().splitlines()] if log.exists() else []


def payment_workflow(write_workflow, ops, log, policy='"notify"', server=None, name="pay"):
    """order -> charge (fails, ``policy``) -> ship (reads charge's result); ``side`` is independent."""
    return write_workflow(name, (notify_table(server) if server else "")
                          + node("order", ops, f'{{ name = "order", log = "{log}" }}')
                          + node("charge", ops, '{ name = "charge", fail = true }',
                                 f'needs = ["order"]\non_failure = {policy}')
                          + node("ship", ops, '{ name = "ship", value = "{{ nodes.charge.result.id }}" }')
                          + node("side", ops, f'{{ name = "side", log = "{log}" }}'))


def ticket_of(view):
    (t,) = view["tickets"]
    return t


def test_notify_waits_then_resume_with_result_continues(workrun, write_workflow, ops, tmp_path, hook,
                                                        journal_backend):
    log = tmp_path / "comp.log"
    wf = payment_workflow(write_workflow, ops, log, server=hook)
    res = workrun("run", wf, env=ALLOW)
    assert res.code == 4, res
    tid = res.out.split("ticket ")[1].split()[0]
    assert f"workrun tickets resume {tid}" in res.out and f"workrun tickets terminate {tid}" in res.out
    (run,) = workrun("runs", "list", "--json").json()
    view = workrun("runs", "show", run["run_id"], "--json").json()
    assert view["status"] == "waiting"
    assert statuses(view) == {"order": "succeeded", "charge": "waiting", "ship": "pending", "side": "succeeded"}
    t = ticket_of(view)
    assert (t["ticket_id"], t["node_key"], t["status"], t["action"]) == (tid, "charge", "pending", None)
    assert "failing on purpose" in t["error"]
    assert all(o["compensation"] is None for o in view["operations"]) and log_names(log) == []
    listed = workrun("tickets", "list", "--json").json()
    assert [(x["ticket_id"], x["run_id"], x["status"]) for x in listed] == [(tid, view["run_id"], "pending")]
    # one notification for the ticket, one line naming run, node, ticket and error (R-M8)
    (msg,) = hook.requests("POST", "/hook")
    text = msg.json()["text"]
    assert "\n" not in text and view["run_id"] in text and "charge" in text and tid in text and "failing" in text

    res = workrun("tickets", "resume", tid[:8], "--result", '{"id": 7}', "--json")
    assert res.code == 0, res
    after = res.json()
    assert after["status"] == "succeeded"
    ship = [o for o in after["operations"] if o["node_key"] == "ship"]
    assert [o["input"]["value"] for o in ship] == [7]
    charge = next(n for n in after["nodes"] if n["node_key"] == "charge")
    assert charge["status"] == "succeeded" and charge["handled"] and charge["result"] == {"id": 7}
    assert any("resumed past by operator" in m["text"] for m in charge["messages"])
    t = ticket_of(after)
    assert t["status"] == "resolved" and [h["action"] for h in t["history"]] == ["open", "resume"]
    assert t["history"][1]["args"] == {"result": {"id": 7}}
    assert len(hook.requests("POST", "/hook")) == 1


def test_terminate_fails_the_run_and_compensates_in_reverse_order(workrun, write_workflow, ops, tmp_path,
                                                                  journal_backend):
    log = tmp_path / "comp.log"
    wf = write_workflow("term", node("a", ops, f'{{ name = "a", log = "{log}" }}')
                        + node("b", ops, f'{{ name = "b", log = "{log}" }}', 'needs = ["a"]')
                        + node("c", ops, '{ name = "c", fail = true }', 'needs = ["b"]\non_failure = "notify"'))
    res = workrun("run", wf, "--json")
    assert res.code == 4, res
    tid = ticket_of(res.json())["ticket_id"]
    assert f"workrun tickets resume {tid}" in res.err and f"workrun tickets terminate {tid}" in res.err
    res = workrun("tickets", "terminate", tid, "--json")
    assert res.code == 1, res
    view = res.json()
    assert view["status"] == "failed"
    assert statuses(view) == {"a": "succeeded", "b": "succeeded", "c": "failed"}
    assert log_names(log) == ["b", "a"]
    assert [o["compensation"]["status"] for o in view["operations"] if o["status"] == "succeeded"] == \
        ["succeeded", "succeeded"]
    t = ticket_of(view)
    assert t["status"] == "terminated" and t["history"][-1]["action"] == "terminate"
    assert t["history"][-1]["args"] == {"compensate": True}


def test_terminate_no_compensate_then_compensate_on_request(workrun, write_workflow, ops, tmp_path):
    log = tmp_path / "comp.log"
    wf = payment_workflow(write_workflow, ops, log)
    tid = ticket_of(workrun("run", wf, "--json").json())["ticket_id"]
    res = workrun("tickets", "terminate", tid, "--no-compensate", "--json")
    assert res.code == 1, res
    view = res.json()
    assert view["status"] == "terminated" and statuses(view)["ship"] == "skipped"
    assert all(o["compensation"] is None for o in view["operations"]) and log_names(log) == []
    assert view["compensation"] is None  # §16: null, not owed; R-L6's not_undone is a stopped run's alone
    res = workrun("compensate", view["run_id"], "--json")
    assert res.code == 0, res
    assert sorted(log_names(log)) == ["order", "side"] and res.json()["status"] == "terminated"


def test_resolve_closes_without_advancing_and_stop_ends_the_wait(workrun, write_workflow, ops, tmp_path):
    wf = payment_workflow(write_workflow, ops, tmp_path / "comp.log")
    view = workrun("run", wf, "--json").json()
    tid = ticket_of(view)["ticket_id"]
    res = workrun("tickets", "resolve", tid)
    assert res.code == 0, res
    assert f"`workrun stop {view['run_id']}` ends the run" in res.out, res  # what to do next
    after = workrun("runs", "show", view["run_id"], "--json").json()
    assert after["status"] == "waiting"
    assert statuses(after)["charge"] == "waiting" and statuses(after)["ship"] == "pending"
    assert ticket_of(after)["status"] == "resolved"
    res = workrun("resume", "--json")
    assert res.code == 0 and res.json() == {"runs": []}, res  # resume never advances a waiting node (R-M7)
    assert workrun("stop", view["run_id"]).code == 0
    stopped = workrun("runs", "show", view["run_id"], "--json").json()
    assert stopped["status"] == "stopped" and statuses(stopped)["charge"] == "stopped"


def test_stop_of_a_waiting_run_terminates_its_tickets(workrun, write_workflow, ops, tmp_path, journal_backend,
                                                      isolated_env):
    view = workrun("run", payment_workflow(write_workflow, ops, tmp_path / "c.log"), "--json").json()
    assert workrun("stop", view["run_id"], "--reason", "giving up").code == 0
    after = workrun("runs", "show", view["run_id"], "--json").json()
    assert after["status"] == "stopped" and ticket_of(after)["status"] == "terminated"
    assert all(o["compensation"] is None for o in after["operations"])
    from workrun.journal import open_journal
    from workrun.repair.operator import actor

    journal = open_journal(isolated_env, check=False)
    try:  # the audit row says who stopped it and why, as for a running run (R-O2)
        (event,) = journal.events_of_run(view["run_id"])
    finally:
        journal.close()
    assert (event["action"], event["args"], event["actor"]) == ("stop", {"reason": "giving up"}, actor())
    assert event["text"] == "giving up"  # the reason is shown where operator actions are (R-D4)
    shown = workrun("runs", "show", view["run_id"]).out  # ... in `runs show` too (operator review)
    assert f"operator: stop by {actor()}: giving up" in shown, shown
    # what `compensate` would do: records it has not written yet, with the ids it will write (R-L3)
    plan = workrun("compensate", view["run_id"], "--dry-run", "--json").json()
    assert plan["plan"] and all(step["planned"] and step["status"] == "pending" for step in plan["plan"]), plan
    text = workrun("compensate", view["run_id"], "--dry-run").out
    assert text.count("(planned: not in the journal until `compensate` writes it)") == len(plan["plan"]), text
    assert workrun("compensations", "show", plan["plan"][0]["compensation_id"]).code == 2  # not yet
    done = workrun("compensate", view["run_id"], "--json", env=ALLOW)
    assert [o["compensation"]["compensation_id"] for o in done.json()["operations"] if o["compensation"]] == \
        [step["compensation_id"] for step in reversed(plan["plan"])], done.out  # the ids the plan showed


def test_compensate_policy_runs_its_action_once_while_the_run_waits(workrun, write_workflow, ops, tmp_path, hook,
                                                                    journal_backend):
    policy = (f'{{ compensate = {{ method = "POST", url = "{hook.url}/refund/{{{{ nodes.order.result.name }}}}", '
              f'body = {{ order = "{{{{ nodes.order.result.value }}}}", run = "{{{{ run_id }}}}" }} }} }}')
    wf = payment_workflow(write_workflow, ops, tmp_path / "c.log", policy=policy)
    res = workrun("run", wf, "--json", env=ALLOW)
    assert res.code == 4, res
    view = res.json()
    (req,) = hook.requests("POST", "/refund/order")
    assert req.json() == {"order": "order", "run": view["run_id"]}
    t = ticket_of(view)
    assert req.headers["Idempotency-Key"] == t["ticket_id"]
    assert t["status"] == "pending" and t["action"]["status"] == "succeeded"  # success closes neither
    assert [a["http_status"] for a in t["action"]["attempts"]] == [200]
    assert view["status"] == "waiting" and statuses(view)["charge"] == "waiting"
    assert workrun("resume", env=ALLOW).code == 0
    assert len(hook.requests("POST", "/refund/order")) == 1


def test_fallback_action_goes_on_at_once(workrun, write_workflow, ops, tmp_path, hook):
    hook.route("POST", "/fallback", sequence=[{"status": 503}, {"status": 200, "json": {}}])
    policy = f'{{ fallback_action = {{ method = "POST", url = "{hook.url}/fallback", backoff = 0.05 }} }}'
    wf = write_workflow("fb", node("charge", ops, '{ name = "charge", fail = true }', f"on_failure = {policy}")
                        + node("ship", ops, '{ name = "ship" }', 'needs = ["charge"]'))
    res = workrun("run", wf, "--json", env=ALLOW)
    assert res.code == 0, res
    view = res.json()
    assert view["status"] == "succeeded" and statuses(view) == {"charge": "failed", "ship": "succeeded"}
    assert next(n for n in view["nodes"] if n["node_key"] == "charge")["handled"] is True
    t = ticket_of(view)
    assert t["status"] == "resolved" and t["action"]["status"] == "succeeded"
    assert [a["http_status"] for a in t["action"]["attempts"]] == [503, 200]
    assert len(hook.requests("POST", "/fallback")) == 2


def test_retry_then_notify_opens_the_ticket_after_the_budget(workrun, write_workflow, ops, tmp_path):
    wf = write_workflow("rn", node("charge", ops, '{ name = "charge", fail = true }',
                                   'on_failure = { retry = { attempts = 2, backoff = 0.05 }, then = "notify" }'))
    res = workrun("run", wf, "--json")
    assert res.code == 4, res
    view = res.json()
    assert [o["status"] for o in view["operations"]] == ["failed", "failed"]
    assert ticket_of(view)["status"] == "pending" and view["status"] == "waiting"


def test_terminate_policy_ends_the_run_terminated(workrun, write_workflow, ops, tmp_path):
    log = tmp_path / "comp.log"
    wf = payment_workflow(write_workflow, ops, log, policy='"terminate"')
    res = workrun("run", wf, "--json")
    assert res.code == 1, res
    view = res.json()
    assert view["status"] == "terminated" and statuses(view)["charge"] == "failed"
    assert ticket_of(view)["status"] == "terminated" and log_names(log) == []
    assert all(o["compensation"] is None for o in view["operations"])


@pytest.mark.parametrize("policy, field", [
    ('"nag"', "nodes.charge.on_failure"),
    ('{ compensate = { url = "http://127.0.0.1/" } }', "nodes.charge.on_failure.compensate.method"),
    ('{ retry = { attempts = 2 }, then = "terminate" }', "nodes.charge.on_failure.then"),
    ('{ compensate = { method = "POST", url = "ftp://x/" } }', "nodes.charge.on_failure.compensate.url"),
    ('{ compensate = { method = "POST", url = "http://{{ inputs.host }}/x" } }',
     "nodes.charge.on_failure.compensate.url"),
    ('{ compensate = { method = "POST", url = "http://127.0.0.1/", timeout = "5" } }',
     "nodes.charge.on_failure.compensate.timeout"),
    ('{ fallback_action = { method = "POST", url = "http://127.0.0.1/{{ nodes.ship.result.id }}" } }',
     "nodes.charge.on_failure.fallback_action.url"),
    ('{ compensate = { method = "POST", url = "http://127.0.0.1/", body = { t = "{{ env.HOME }}" } } }',
     "nodes.charge.on_failure.compensate.body.t"),
])
def test_bad_policies_are_refused_at_load(workrun, write_workflow, ops, tmp_path, policy, field):
    wf = payment_workflow(write_workflow, ops, tmp_path / "c.log", policy=policy)
    res = workrun("run", wf)
    assert res.code == 2, res
    assert res.err.count("\n") == 1 and res.err.startswith(f"error: {wf}: {field}: "), res.err
    assert workrun("runs", "list", "--json").json() == []


def _snapshot(workrun, run_id):
    view = workrun("runs", "show", run_id, "--json").json()
    for m in view["messages"]:
        m.pop("at")
    return view


def test_every_refusal_exits_2_with_one_line_and_changes_nothing(workrun, write_workflow, ops, tmp_path):
    view = workrun("run", payment_workflow(write_workflow, ops, tmp_path / "c.log"), "--json").json()
    tid = ticket_of(view)["ticket_id"]
    done = workrun("run", payment_workflow(write_workflow, ops, tmp_path / "d.log", name="pay2"), "--json").json()
    closed = ticket_of(done)["ticket_id"]
    assert workrun("tickets", "resolve", closed).code == 0
    before = (_snapshot(workrun, view["run_id"]), _snapshot(workrun, done["run_id"]))
    attempts = [
        ("tickets", "resume", closed),                               # not pending
        ("tickets", "resume", tid, "--result", "{bad"),              # not JSON
        ("tickets", "resume", tid, "--result", '{"id": NaN}'),       # not JSON either (only Python's json reads it)
        ("tickets", "resume", tid, "--result", '{"id": ' + "[" * 50_000 + "]" * 50_000 + "}"),  # too deep
        ("tickets", "resume", tid, "--result", '{"other": 1}'),      # lacks a field ship reads
        ("tickets", "retry", tid),                                   # no action configured
        ("tickets", "resolve", closed),                              # not pending
        ("tickets", "terminate", closed),                            # not pending
        ("tickets", "confirm", tid, "--done"),                       # action not unknown
        ("tickets", "confirm", tid),                                 # neither --done nor --not-done
        ("tickets", "show", "tkt_nope"),                             # unknown id
        ("tickets", "resume", "tkt_"),                               # ambiguous prefix
        ("tickets", "list", "--status", "open"),                     # unknown status
        ("tickets", "list", "--run", ""),                            # an empty id matches nothing
        ("compensations", "list", "--run", ""),
        ("tickets", "show", ""),
    ]
    for args in attempts:
        res = workrun(*args)
        assert res.code == 2, (args, res)
        assert res.err.count("\n") == 1 and res.err.startswith("error: "), (args, res.err)
    assert (_snapshot(workrun, view["run_id"]), _snapshot(workrun, done["run_id"])) == before


def test_note_with_attachment_is_kept_in_the_history(workrun, write_workflow, ops, tmp_path):
    view = workrun("run", payment_workflow(write_workflow, ops, tmp_path / "c.log"), "--json").json()
    tid = ticket_of(view)["ticket_id"]
    evidence = tmp_path / "bank.txt"
    evidence.write_text("refund ref 42")
    evidence.chmod(0o644)
    assert workrun("tickets", "note", tid, "called the bank", "--attach", evidence).code == 0
    t = workrun("tickets", "show", tid, "--json").json()
    note = t["history"][-1]
    assert (note["action"], note["text"], note["args"]) == ("note", "called the bank", {"attach": str(evidence)})
    assert Path(note["attachment"]).read_text() == "refund ref 42"
    modes = [stat.S_IMODE(p.stat().st_mode) for p in (Path(note["attachment"]), Path(note["attachment"]).parent)]
    assert modes == [0o600, 0o700]  # the data dir is private (SPEC §17), whatever the source's mode
    shown = workrun("tickets", "show", tid)
    assert "called the bank" in shown.out and "ways on" in shown.out


# -- kill -9 -------------------------------------------------------------------------------------------


def test_kill_after_ticket_opened_then_resume_twice(workrun, write_workflow, ops, tmp_path, hook):
    log = tmp_path / "comp.log"
    wf = payment_workflow(write_workflow, ops, log, server=hook)
    res = workrun("run", wf, env={**ALLOW, "WORKRUN_FAULT": "ticket.opened"})
    assert res.code == -signal.SIGKILL, res
    assert hook.requests("POST", "/hook") == []  # the intent is journaled; nothing was sent yet
    for _ in range(2):
        assert workrun("resume", env=ALLOW).code == 0
    (run,) = workrun("runs", "list", "--json").json()
    view = workrun("runs", "show", run["run_id"], "--json").json()
    assert view["status"] == "waiting"
    assert statuses(view) == {"order": "succeeded", "charge": "waiting", "ship": "pending", "side": "succeeded"}
    assert [o["node_key"] for o in view["operations"]].count("charge") == 1  # the waiting node never re-ran
    t = ticket_of(view)
    assert t["status"] == "pending" and [h["action"] for h in t["history"]] == ["open"]
    assert len(hook.requests("POST", "/hook")) == 1  # exactly one notification across the kill


def test_resume_exits_1_when_the_ticket_action_it_sent_failed(workrun, write_workflow, ops, tmp_path, hook):
    hook.route("POST", "/refund", status=500, json={"error": "down"})
    policy = f'{{ compensate = {{ method = "POST", url = "{hook.url}/refund", max_retries = 0 }} }}'
    wf = payment_workflow(write_workflow, ops, tmp_path / "c.log", policy=policy)
    assert workrun("run", wf, env={**ALLOW, "WORKRUN_FAULT": "ticket.opened"}).code == -signal.SIGKILL
    resumed = workrun("resume", "--json", env=ALLOW)
    assert resumed.code == 1, resumed
    (view,) = resumed.json()["runs"]
    assert ticket_of(view)["action"]["status"] == "failed" and len(hook.requests("POST", "/refund")) == 1


@pytest.mark.parametrize("idempotent", [False, True])
def test_kill_during_a_ticket_action_then_resume_twice(workrun, write_workflow, ops, tmp_path, hook, idempotent):
    policy = (f'{{ compensate = {{ method = "POST", url = "{hook.url}/refund", idempotent = {str(idempotent).lower()}'
              ' } }')
    wf = payment_workflow(write_workflow, ops, tmp_path / "c.log", policy=policy)
    res = workrun("run", wf, env={**ALLOW, "WORKRUN_FAULT": "http.answered"})
    assert res.code == -signal.SIGKILL, res
    assert len(hook.requests("POST", "/refund")) == 1
    first = workrun("resume", env=ALLOW)
    workrun("resume", env=ALLOW)
    # resume exits by the ticket action it settled, as by a compensation: 0 only when it succeeded (SPEC §10)
    assert first.code == (0 if idempotent else 1), first
    (run,) = workrun("runs", "list", "--json").json()
    view = workrun("runs", "show", run["run_id"], "--json").json()
    t = ticket_of(view)
    assert view["status"] == "waiting" and statuses(view)["charge"] == "waiting" and t["status"] == "pending"
    if idempotent:  # re-sent with the same Idempotency-Key: safe by declaration (R-R3)
        assert [r.headers["Idempotency-Key"] for r in hook.requests("POST", "/refund")] == [t["ticket_id"]] * 2
        assert t["action"]["status"] == "succeeded"
    else:
        assert len(hook.requests("POST", "/refund")) == 1  # ran once: never re-sent blindly
        assert t["action"]["status"] == "unknown"
        assert [a["status"] for a in t["action"]["attempts"]] == ["unknown"]
        assert workrun("tickets", "confirm", t["ticket_id"], "--not-done").code == 0
        assert workrun("tickets", "retry", t["ticket_id"], env=ALLOW).code == 0
        assert len(hook.requests("POST", "/refund")) == 2
        after = workrun("tickets", "show", t["ticket_id"], "--json").json()
        assert [a["trigger"] for a in after["action"]["attempts"]] == ["auto", "operator"]
        assert [h["action"] for h in after["history"]] == ["open", "confirm", "retry"]


def test_one_notification_per_dead_letter_even_across_a_kill(workrun, write_workflow, ops, tmp_path, hook):
    hook.route("POST", "/refund", status=500, body="declined")
    policy = f'{{ compensate = {{ method = "POST", url = "{hook.url}/refund", max_retries = 1, backoff = 0.05 }} }}'
    wf = write_workflow("dead", notify_table(hook)
                        + node("order", ops, '{ name = "order", comp = "fail" }')
                        + node("charge", ops, '{ name = "charge", fail = true }',
                               f'needs = ["order"]\non_failure = {policy}'))
    # killed right after the hook answered the ticket's notification (the 2nd answer: the action's first
    # attempt came first), before the answer was journaled: it is never sent again
    res = workrun("run", wf, env={**ALLOW, "WORKRUN_FAULT": "http.answered@2"})
    assert res.code == -signal.SIGKILL, res
    for _ in range(2):
        workrun("resume", env=ALLOW)
    (run,) = workrun("runs", "list", "--json").json()
    t = ticket_of(workrun("runs", "show", run["run_id"], "--json").json())
    assert t["action"]["status"] == "failed" and len(hook.requests("POST", "/refund")) == 2
    texts = [r.json()["text"] for r in hook.requests("POST", "/hook")]
    assert len(texts) == 2, texts  # ticket opened + action dead letter
    assert "waits for a person" in texts[0] and "its action failed after 2 attempt(s)" in texts[1]
    # terminate: the order's compensation fails for good -> one more notification (a compensation dead letter)
    res = workrun("tickets", "terminate", t["ticket_id"], "--json", env=ALLOW)
    assert res.code == 1, res
    workrun("resume", env=ALLOW)
    texts = [r.json()["text"] for r in hook.requests("POST", "/hook")]
    assert len(texts) == 3 and "compensation cmp_" in texts[2] and "failed after 4 attempt(s)" in texts[2]


def test_a_failed_notification_is_recorded_and_never_blocks(workrun, write_workflow, ops, tmp_path, hook):
    hook.route("POST", "/hook", status=500, body="hook down")
    wf = payment_workflow(write_workflow, ops, tmp_path / "c.log", server=hook)
    res = workrun("run", wf, "--json", env=ALLOW)
    assert res.code == 4, res
    t = ticket_of(res.json())
    assert [n["status"] for n in t["notifications"]] == ["failed"]
    assert t["history"][-1]["action"] == "notify" and "HTTP 500" in t["history"][-1]["text"]
    assert workrun("resume", env=ALLOW).code == 0
    assert len(hook.requests("POST", "/hook")) == 1  # a failed notification is not re-sent


def test_a_ticket_action_goes_through_the_outbound_guard(workrun, write_workflow, ops, tmp_path, hook):
    policy = f'{{ compensate = {{ method = "POST", url = "{hook.url}/refund", max_retries = 0 }} }}'
    wf = payment_workflow(write_workflow, ops, tmp_path / "c.log", policy=policy)
    res = workrun("run", wf, "--json")  # loopback is not allowed here (no http_allow, no WORKRUN_HTTP_ALLOW)
    assert res.code == 4, res
    action = ticket_of(res.json())["action"]
    assert action["status"] == "failed" and hook.requests() == []
    (attempt,) = action["attempts"]
    assert attempt["status"] == "failed" and attempt["http_status"] is None
    assert attempt["error"].startswith("refused by the outbound guard: 127.0.0.1 (loopback)")


def test_a_dead_letter_is_notified_once_when_the_runner_dies_right_after_it(workrun, write_workflow, ops, tmp_path,
                                                                            hook):
    hook.route("POST", "/refund", status=500, body="declined")
    policy = f'{{ compensate = {{ method = "POST", url = "{hook.url}/refund", max_retries = 0 }} }}'
    wf = payment_workflow(write_workflow, ops, tmp_path / "c.log", policy=policy, server=hook)
    # killed right after the action's only attempt was journaled failed, before its notification intent
    res = workrun("run", wf, env={**ALLOW, "WORKRUN_FAULT": "action.finished"})
    assert res.code == -signal.SIGKILL, res
    assert hook.requests("POST", "/hook") == []
    for _ in range(2):
        assert workrun("resume", env=ALLOW).code == 0
    texts = [r.json()["text"] for r in hook.requests("POST", "/hook")]
    assert len(texts) == 2 and "waits for a person" in texts[0], texts
    assert "its action failed after 1 attempt(s)" in texts[1]
    assert len(hook.requests("POST", "/refund")) == 1
