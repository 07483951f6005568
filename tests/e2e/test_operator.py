"""Operator tools end to end (issue 6): the attempt ledger (R-C7), `workrun compensations
list|show|retry|note|resolve|confirm` on each status they allow and refuse (R-O1, SPEC §10), audit
rows (R-O2), status only from real outcomes or explicit actions (R-O3). Real uv Apps, the real CLI.
"""

from __future__ import annotations

import getpass
import json
import os
import signal
import stat
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest

from _kit.ops_apps import write_project


@pytest.fixture(scope="module")
def ops(tmp_path_factory):
    """One locked project for the module (tests never change its code)."""
    return write_project(tmp_path_factory.mktemp("ops") / "ops")


@pytest.fixture
def files(tmp_path):
    log, flag, pids = tmp_path / "comp.log", tmp_path / "flag", tmp_path / "pids"
    pids.mkdir()
    return {"log": log, "flag": flag, "pids": pids, "counter": tmp_path / "counter"}


def ts(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


def comp_of(view, node):
    return next(o for o in view["operations"] if o["node_key"] == node)["compensation"]


def logged(files):
    return [json.loads(line) for line in files["log"].read_text().splitlines()] if files["log"].exists() else []


def one_error_line(res, *words):
    assert res.code == 2, res
    assert res.err.count("\n") == 1 and res.err.startswith("error: "), res.err
    for w in words:
        assert w in res.err, res.err


def chain_workflow(write_workflow, ops, files, b_app="step0"):
    """a <- b (b's compensation fails while the flag file exists), c independent; boom fails last."""
    return write_workflow("chain", f"""
        name = "chain"
        [nodes.a]
        project = "{ops}"
        app = "step"
        input = {{ name = "a", log = "{files['log']}" }}
        [nodes.b]
        project = "{ops}"
        app = "{b_app}"
        input = {{ name = "b", comp = "blocked_while", flag = "{files['flag']}", log = "{files['log']}", up = "{{{{ nodes.a.result.name }}}}" }}
        [nodes.c]
        project = "{ops}"
        app = "step"
        input = {{ name = "c", log = "{files['log']}" }}
        [nodes.boom]
        project = "{ops}"
        app = "step"
        input = {{ name = "boom", fail = true }}
        needs = ["b", "c"]
    """)


def run_chain(workrun, write_workflow, ops, files):
    files["flag"].write_text("disk is read-only")
    res = workrun("run", chain_workflow(write_workflow, ops, files), "--json")
    assert res.code == 1, res
    view = res.json()
    a, b, c = (comp_of(view, k) for k in "abc")
    assert (a["status"], b["status"], c["status"]) == ("blocked", "failed", "succeeded")
    return view, a["compensation_id"], b["compensation_id"]


# -- the ledger (R-C7) --------------------------------------------------------------------------


def test_flaky_succeeds_on_third_attempt_always_failing_exhausts_budget(workrun, write_workflow, ops, files):
    """Fails twice then succeeds -> succeeded, 3 attempts; always failing -> failed after exactly
    max_retries + 1 attempts (0 and 2); backoff between attempts; independent branches go on (R-C4)."""
    wf = write_workflow("ledger", f"""
        [nodes.a]
        project = "{ops}"
        app = "step"
        input = {{ name = "a", comp = "flaky", counter = "{files['counter']}" }}
        [nodes.f0]
        project = "{ops}"
        app = "step0"
        input = {{ name = "f0", comp = "fail" }}
        [nodes.f2]
        project = "{ops}"
        app = "step2"
        input = {{ name = "f2", comp = "fail" }}
        [nodes.boom]
        project = "{ops}"
        app = "step"
        input = {{ name = "boom", fail = true }}
        needs = ["a", "f0", "f2"]
    """)
    res = workrun("run", wf, "--json")
    assert res.code == 1, res
    view = res.json()
    assert view["status"] == "failed"  # whatever compensation does (R-C6)
    a, f0, f2 = comp_of(view, "a"), comp_of(view, "f0"), comp_of(view, "f2")

    assert a["status"] == "succeeded" and a["result"] == {"undone": "a", "attempt": 3}
    assert [x["status"] for x in a["attempts"]] == ["failed", "failed", "succeeded"]
    assert [x["exit_code"] for x in a["attempts"]] == [4, 4, 0]
    assert [x["number"] for x in a["attempts"]] == [1, 2, 3]
    assert {x["trigger"] for x in a["attempts"]} == {"auto"}
    assert "attempt 1: remote says 503" in a["attempts"][0]["stderr_tail"]
    assert "attempt 2: remote says 503" in a["attempts"][1]["stderr_tail"]
    assert files["counter"].read_text() == "3"
    for x in a["attempts"]:
        assert set(x) >= {"number", "started_at", "ended_at", "exit_code", "signal", "stderr_tail", "trigger"}
        assert ts(x["ended_at"]) >= ts(x["started_at"])
    # backoff 0.05 s doubling, jitter +-25%
    gaps = [ts(a["attempts"][i + 1]["started_at"]) - ts(a["attempts"][i]["ended_at"]) for i in range(2)]
    assert gaps[0] >= 0.05 * 0.75 and gaps[1] >= 0.1 * 0.75, gaps

    assert f0["status"] == "failed" and len(f0["attempts"]) == 1 and f0["max_attempts"] == 1
    assert f2["status"] == "failed" and len(f2["attempts"]) == 3 and f2["max_attempts"] == 3
    for f in (f0, f2):
        assert all(x["status"] == "failed" and x["exit_code"] == 4 for x in f["attempts"])
        assert "needs an operator" in f["reason"] and "cannot undo: always fails" in f["reason"]

    # list filters; each row carries operation_id and run_id (SPEC §9)
    failed = workrun("compensations", "list", "--status", "failed", "--json").json()
    assert sorted(c["compensation_id"] for c in failed) == sorted([f0["compensation_id"], f2["compensation_id"]])
    rows = workrun("compensations", "list", "--run", view["run_id"][:10], "--json").json()
    assert {c["node_key"] for c in rows} == {"a", "f0", "f2"}
    assert all(c["run_id"] == view["run_id"] and c["operation_id"].startswith("op_") for c in rows)
    assert workrun("compensations", "list", "--status", "unknown", "--json").json() == []

    # the run view says it is unfinished and points to the commands
    shown = workrun("runs", "show", view["run_id"])
    assert shown.code == 0
    assert "compensation not finished for 2 operation(s)" in shown.out
    assert f"workrun compensations list --run {view['run_id']}" in shown.out
    for comp in (f0, f2):  # and what to do with each: both failed
        assert f"{comp['compensation_id']} failed: `workrun compensations retry {comp['compensation_id']}`" in shown.out
    assert sorted(workrun("runs", "show", view["run_id"], "--json").json()["unfinished_compensations"]) == \
        sorted([f0["compensation_id"], f2["compensation_id"]])


def test_hung_compensation_is_killed_at_its_timeout_each_attempt(workrun, write_workflow, ops, files):
    """Per-attempt timeout (R-C7, R-A7): timeout 1 s, max_retries 1 -> 2 attempts, each ended by signal."""
    files["flag"].write_text("hang")
    wf = write_workflow("hung", f"""
        [nodes.h]
        project = "{ops}"
        app = "hang"
        input = {{ name = "h", comp = "hang_while", flag = "{files['flag']}", pids = "{files['pids']}" }}
        [nodes.boom]
        project = "{ops}"
        app = "step"
        input = {{ name = "boom", fail = true }}
        needs = ["h"]
    """)
    t0 = time.monotonic()
    res = workrun("run", wf, "--json")
    assert res.code == 1, res
    assert time.monotonic() - t0 < 90  # each hung attempt was ended (unended, it would hang forever)
    h = comp_of(res.json(), "h")
    assert h["status"] == "failed" and "timed out after 1 s" in h["reason"]
    assert len(h["attempts"]) == 2
    for x in h["attempts"]:
        assert x["status"] == "failed" and x["exit_code"] is None
        assert x["signal"] == signal.SIGTERM
        assert "timed out after 1 s" in x["error"]
        assert 0.9 <= ts(x["ended_at"]) - ts(x["started_at"]) <= 15.0, x  # ended at its 1 s timeout, not hung
    pgid = int((files["pids"] / "h.pid").read_text())
    with pytest.raises(ProcessLookupError):  # the whole group is gone
        os.killpg(pgid, 0)


# -- retry / resolve on failed and held-back compensations --------------------------------------


def test_retry_of_failed_holder_runs_what_it_held_back_in_same_command(workrun, write_workflow, ops, files):
    """R-C4 + SPEC §10: a is held back by b's failure; retry b (refused for a); once b succeeds, a runs
    in the same command; retrying is not completion while it still fails (R-O3)."""
    view, a_id, b_id = run_chain(workrun, write_workflow, ops, files)
    a = comp_of(view, "a")
    assert a["held_back_by"] == [b_id] and a["attempts"] == []
    assert f"b ({b_id}, failed)" in a["reason"]
    assert [e["name"] for e in logged(files)] == ["c"]  # the independent branch was compensated

    one_error_line(workrun("compensations", "retry", a_id), f"cannot retry {a_id} (blocked)", "held back by b")
    one_error_line(workrun("compensations", "confirm", b_id, "--done"), "only a compensation whose outcome is unknown")

    # the outside problem is still there: a new attempt (history kept), status stays failed, exit 1
    res = workrun("compensations", "retry", b_id, "--json")
    assert res.code == 1, res
    b = res.json()
    assert b["status"] == "failed" and [x["trigger"] for x in b["attempts"]] == ["auto", "operator"]
    assert "operator retry" in b["reason"]
    after = workrun("runs", "show", view["run_id"], "--json").json()
    assert comp_of(after, "a")["status"] == "blocked" and comp_of(after, "a")["attempts"] == []

    files["flag"].unlink()  # fixed outside
    res = workrun("compensations", "retry", b_id[:9])  # a unique prefix
    assert res.code == 0, res
    after = workrun("runs", "show", view["run_id"], "--json").json()
    a, b = comp_of(after, "a"), comp_of(after, "b")
    assert b["status"] == "succeeded" and len(b["attempts"]) == 3 and b["attempts"][-1]["trigger"] == "operator"
    assert a["status"] == "succeeded" and [x["trigger"] for x in a["attempts"]] == ["auto"]
    assert [e["name"] for e in logged(files)] == ["c", "b", "a"]  # reverse dependency order
    assert after["unfinished_compensations"] == [] and after["status"] == "failed"

    one_error_line(workrun("compensations", "retry", b_id), f"cannot retry {b_id} (succeeded)")
    one_error_line(workrun("compensations", "resolve", a_id), f"cannot resolve {a_id} (succeeded)")
    assert workrun("resume").code == 0 and [e["name"] for e in logged(files)] == ["c", "b", "a"]


def test_resolve_releases_held_back_and_resume_finishes(workrun, write_workflow, ops, files):
    """resolve = done by hand (no attempt runs); what it held back becomes pending; resume runs it."""
    view, a_id, b_id = run_chain(workrun, write_workflow, ops, files)
    res = workrun("compensations", "resolve", b_id, "--note", "deleted b by hand")
    assert res.code == 0, res
    assert f"released 1 held-back compensation(s) ({a_id})" in res.out
    b = workrun("compensations", "show", b_id, "--json").json()
    assert b["status"] == "succeeded" and len(b["attempts"]) == 1  # no new attempt: an operator's word
    assert b["reason"] == f"resolved by hand by {getpass.getuser()}: deleted b by hand"
    assert workrun("compensations", "show", a_id, "--json").json()["status"] == "pending"

    res = workrun("resume", "--json")
    assert res.code == 0, res
    a = comp_of(res.json()["runs"][0], "a")
    assert a["status"] == "succeeded" and len(a["attempts"]) == 1
    assert [e["name"] for e in logged(files)] == ["c", "a"]  # b's compensate.py never succeeded: resolved by hand

    one_error_line(workrun("compensations", "resolve", b_id), f"cannot resolve {b_id} (succeeded)", "already done")
    one_error_line(workrun("compensations", "retry", b_id), "already done")
    one_error_line(workrun("compensations", "confirm", b_id, "--not-done"), "unknown")
    events = workrun("compensations", "show", b_id, "--json").json()["events"]
    assert [(e["action"], e["actor"], e["args"], e["text"]) for e in events] == \
        [("resolve", getpass.getuser(), {"previous_status": "failed"}, "deleted b by hand")]


# -- unknown outcomes: confirm (R-R3) -------------------------------------------------------------


def test_retry_that_succeeded_exits_0_while_another_failure_still_holds_back_upstream(workrun, write_workflow, ops,
                                                                                       files, tmp_path):
    """SPEC §10 (operator review): `compensations retry` exits 0 when what it handled ended succeeded; a is still
    held back by y's failure, and only its reason was written again: that is not something retry handled."""
    other = tmp_path / "flag-y"
    files["flag"].write_text("disk is read-only")
    other.write_text("still broken")
    wf = write_workflow("diamond", f"""
        [nodes.a]
        project = "{ops}"
        app = "step"
        input = {{ name = "a", log = "{files['log']}" }}
        [nodes.b]
        project = "{ops}"
        app = "step0"
        input = {{ name = "b", comp = "blocked_while", flag = "{files['flag']}", log = "{files['log']}", up = "{{{{ nodes.a.result.name }}}}" }}
        [nodes.y]
        project = "{ops}"
        app = "step0"
        input = {{ name = "y", comp = "blocked_while", flag = "{other}", log = "{files['log']}", up = "{{{{ nodes.a.result.name }}}}" }}
        [nodes.boom]
        project = "{ops}"
        app = "step"
        input = {{ name = "boom", fail = true }}
        needs = ["b", "y"]
    """)
    view = workrun("run", wf, "--json").json()
    assert [comp_of(view, k)["status"] for k in "aby"] == ["blocked", "failed", "failed"], view
    files["flag"].unlink()
    res = workrun("compensations", "retry", comp_of(view, "b")["compensation_id"])
    assert res.code == 0, res
    after = workrun("runs", "show", view["run_id"], "--json").json()
    assert [comp_of(after, k)["status"] for k in "aby"] == ["blocked", "succeeded", "failed"], after


def test_unknown_after_kill9_confirm_done_and_not_done_then_retry(workrun, write_workflow, ops, files, tmp_path):
    """Kill -9 the runner and the compensate process groups mid-attempt -> resume says unknown; confirm
    --done settles one (releasing what it held back), --not-done makes the other retryable."""
    files["flag"].write_text("hang")
    hang = f'comp = "hang_while", flag = "{files["flag"]}", pids = "{files["pids"]}", log = "{files["log"]}"'
    wf = write_workflow("unknown", f"""
        [nodes.a0]
        project = "{ops}"
        app = "step"
        input = {{ name = "a0", log = "{files['log']}" }}
        [nodes.a1]
        project = "{ops}"
        app = "step"
        input = {{ name = "a1", {hang}, up = "{{{{ nodes.a0.result.name }}}}" }}
        [nodes.a2]
        project = "{ops}"
        app = "step"
        input = {{ name = "a2", {hang} }}
        [nodes.boom]
        project = "{ops}"
        app = "step"
        input = {{ name = "boom", fail = true }}
        needs = ["a1", "a2"]
    """)
    proc = subprocess.Popen([sys.executable, "-m", "workrun", "run", str(wf), "--json"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    pidfiles = [files["pids"] / "a1.pid", files["pids"] / "a2.pid"]
    end = time.monotonic() + 60
    while not all(p.exists() and p.read_text() for p in pidfiles):
        assert proc.poll() is None and time.monotonic() < end, proc.communicate()
        time.sleep(0.05)
    comps = {c["node_key"]: c["compensation_id"] for c in workrun("compensations", "list", "--json").json()}
    a0_id, a1_id, a2_id = comps["a0"], comps["a1"], comps["a2"]
    assert workrun("compensations", "show", a1_id, "--json").json()["status"] == "running"

    # while an attempt runs
    one_error_line(workrun("compensations", "resolve", a1_id), "(running)", "an attempt is running now")
    one_error_line(workrun("compensations", "confirm", a1_id, "--done"), "(running)")
    busy = workrun("compensations", "retry", a1_id)
    assert busy.code == 3 and f"pid {proc.pid}" in busy.err and busy.err.count("\n") == 1

    os.kill(proc.pid, signal.SIGKILL)
    for p in pidfiles:
        os.killpg(int(p.read_text()), signal.SIGKILL)
    proc.communicate()
    files["flag"].unlink()

    res = workrun("resume", "--json")
    assert res.code == 1, res
    view = res.json()["runs"][0]
    a0, a1, a2 = (comp_of(view, k) for k in ("a0", "a1", "a2"))
    assert (a1["status"], a2["status"]) == ("unknown", "unknown")
    assert a1["attempts"][0]["status"] == "unknown" and f"confirm {a1_id} --done" in a1["reason"]
    assert a0["status"] == "blocked" and a0["held_back_by"] == [a1_id]
    again = workrun("resume")  # nothing is re-sent blindly
    assert again.code == 0 and again.out.strip() == "nothing to resume", again
    assert logged(files) == []

    one_error_line(workrun("compensations", "retry", a2_id), "(unknown)", f"confirm {a2_id} --done")
    one_error_line(workrun("compensations", "confirm", a2_id), "exactly one of --done or --not-done")
    one_error_line(workrun("compensations", "confirm", a2_id, "--done", "--not-done"), "exactly one")

    res = workrun("compensations", "confirm", a1_id, "--done", "--note", "checked: a1 is gone")
    assert res.code == 0, res
    assert f"released 1 held-back compensation(s) ({a0_id})" in res.out
    a1 = workrun("compensations", "show", a1_id, "--json").json()
    assert a1["status"] == "succeeded" and a1["reason"] == f"confirmed done by {getpass.getuser()}"
    assert workrun("compensations", "show", a0_id, "--json").json()["status"] == "pending"

    res = workrun("compensations", "confirm", a2_id, "--not-done")
    assert res.code == 0, res
    a2 = workrun("compensations", "show", a2_id, "--json").json()
    assert a2["status"] == "failed" and f"compensations retry {a2_id}" in a2["reason"]
    assert len(a2["attempts"]) == 1  # confirming runs nothing

    res = workrun("compensations", "retry", a2_id, "--json")
    assert res.code == 0, res
    a2 = res.json()
    assert a2["status"] == "succeeded" and [(x["status"], x["trigger"]) for x in a2["attempts"]] == \
        [("unknown", "auto"), ("succeeded", "operator")]
    final = workrun("runs", "show", view["run_id"], "--json").json()
    assert comp_of(final, "a0")["status"] == "succeeded"
    assert sorted((e["name"], e["attempt"]) for e in logged(files)) == [("a0", 1), ("a2", 2)]
    assert final["unfinished_compensations"] == []

    one_error_line(workrun("compensations", "confirm", a1_id, "--not-done"), f"cannot confirm {a1_id} (succeeded)")
    events = {e["action"]: e for e in workrun("compensations", "show", a2_id, "--json").json()["events"]}
    assert events["confirm"]["args"] == {"done": False} and events["retry"]["args"] == {"accept_code_change": False}
    assert workrun("compensations", "show", a1_id, "--json").json()["events"][0]["text"] == "checked: a1 is gone"
    human = workrun("compensations", "show", a2_id)
    assert f"confirm (done=False) by {getpass.getuser()}" in human.out  # the audit shows the arguments
    assert f"retry (accept_code_change=False) by {getpass.getuser()}" in human.out
    assert "attempt 2 (operator): succeeded" in human.out


# -- code change (blocked for its own reason) and skipped ---------------------------------------


def test_blocked_by_code_change_and_skipped(workrun, write_workflow, tmp_path, files):
    """blocked (code changed, R-C8): retry keeps it blocked, --accept-code-change runs it, resolve settles
    it; skipped: nothing but note is allowed."""
    proj = write_project(tmp_path / "changing")
    wf = write_workflow("code", f"""
        [nodes.a]
        project = "{proj}"
        app = "step"
        input = {{ name = "a", log = "{files['log']}" }}
        [nodes.a2]
        project = "{proj}"
        app = "step"
        input = {{ name = "a2", log = "{files['log']}" }}
        [nodes.s]
        project = "{proj}"
        app = "nocomp"
        input = {{ name = "s" }}
        [nodes.boom]
        project = "{proj}"
        app = "step"
        input = {{ name = "boom", fail = true, touch = "{proj / 'extra.py'}" }}
        needs = ["a", "a2", "s"]
    """)
    res = workrun("run", wf, "--json")
    assert res.code == 1, res
    view = res.json()
    a, a2, s = comp_of(view, "a"), comp_of(view, "a2"), comp_of(view, "s")
    assert a["status"] == a2["status"] == "blocked" and a["reason"] == "code changed since the call: extra.py added"
    assert s["status"] == "skipped"
    a_id, a2_id, s_id = a["compensation_id"], a2["compensation_id"], s["compensation_id"]

    one_error_line(workrun("compensations", "confirm", a_id, "--done"), "(blocked)")
    res = workrun("compensations", "retry", a_id, "--json")
    assert res.code == 1, res
    assert res.json()["status"] == "blocked" and res.json()["attempts"] == []  # R-O3: still not done
    res = workrun("compensations", "retry", a_id, "--accept-code-change", "--json")
    assert res.code == 0, res
    assert res.json()["status"] == "succeeded" and res.json()["accept_code_change"] is True
    res = workrun("compensations", "resolve", a2_id, "--note", "undone by hand")
    assert res.code == 0, res
    assert workrun("compensations", "show", a2_id, "--json").json()["status"] == "succeeded"
    assert [e["name"] for e in logged(files)] == ["a"]

    for args in (["retry", s_id], ["resolve", s_id], ["confirm", s_id, "--done"]):
        one_error_line(workrun("compensations", *args), f"({'skipped'})")
    assert workrun("compensations", "note", s_id, "no compensation entry: nothing to undo").code == 0

    # prefixes: unique accepted, ambiguous refused
    ids = [a_id, a2_id, s_id]
    prefix = next(a_id[:n] for n in range(5, 17) if sum(i.startswith(a_id[:n]) for i in ids) == 1)
    assert workrun("compensations", "show", prefix, "--json").json()["compensation_id"] == a_id
    one_error_line(workrun("compensations", "show", "cmp_"), "'cmp_' matches several compensations")
    one_error_line(workrun("compensations", "resolve", "cmp_"), "matches several")


@pytest.mark.parametrize("args", [["show"], ["retry"], ["resolve"], ["confirm", "--done"], ["note", "--", "text"]])
def test_unknown_compensation_id_exits_2(workrun, args):
    cmd, *rest = args
    res = workrun("compensations", cmd, "cmp_doesnotexist", *rest)
    one_error_line(res, "COMPENSATION_ID", "no compensation matches 'cmp_doesnotexist'")


# -- notes, attachments and the audit trail (R-O1, R-O2) ----------------------------------------


def test_note_attachment_and_audit_rows(workrun, write_workflow, ops, files, tmp_path, isolated_env):
    view, a_id, b_id = run_chain(workrun, write_workflow, ops, files)
    evidence = tmp_path / "screenshot.txt"
    evidence.write_text("bucket policy: read-only\n")
    evidence.chmod(0o644)
    t0 = time.time()
    res = workrun("compensations", "note", b_id, "opened ticket OPS-7", "--attach", evidence)
    assert res.code == 0, res
    evidence.write_text("changed afterwards\n")
    one_error_line(workrun("compensations", "note", b_id, "x", "--attach", tmp_path / "missing.txt"),
                   "--attach", "missing.txt")
    assert workrun("compensations", "note", a_id, "waiting for b").code == 0  # any status (blocked)
    files["flag"].unlink()
    assert workrun("compensations", "retry", b_id).code == 0
    t1 = time.time()

    shown = workrun("compensations", "show", b_id, "--json").json()
    events = shown["events"]
    assert [e["action"] for e in events] == ["note", "retry"]
    for e in events:
        assert e["actor"] == getpass.getuser()
        assert t0 - 1 <= ts(e["at"]) <= t1 + 1
    note, retry = events
    assert note["text"] == "opened ticket OPS-7" and note["args"] == {"attach": str(evidence)}
    stored = Path(note["attachment"])
    assert stored.is_relative_to(isolated_env) and stored.parent.name == b_id
    assert stored.read_text() == "bucket policy: read-only\n"  # a copy, not a link
    assert [stat.S_IMODE(p.stat().st_mode) for p in (stored, stored.parent)] == [0o600, 0o700]  # SPEC §17
    assert retry["args"] == {"accept_code_change": False}
    assert shown["operation"]["input"]["name"] == "b" and shown["operation"]["status"] == "succeeded"

    human = workrun("compensations", "show", b_id)
    assert human.code == 0
    user = getpass.getuser()
    assert f"note (attach={evidence}) by {user}: opened ticket OPS-7 [attachment {stored}]" in human.out
    assert f"retry (accept_code_change=False) by {user}" in human.out
    assert "attempt 1 (auto): failed, exit 4" in human.out and "stderr: cannot delete b: disk is read-only" in human.out
    assert "attempt 2 (operator): succeeded, exit 0" in human.out
    assert "attempts: 1 automatic of at most 1, 1 by an operator" in human.out
    assert [e["action"] for e in workrun("compensations", "show", a_id, "--json").json()["events"]] == ["note"]


def test_what_a_compensation_printed_is_kept_with_its_attempt(workrun, write_workflow, make_project):
    """New-user review: a compensate.py's print() went nowhere (only stderr was kept). Each attempt keeps the tail
    of its stdout as of stderr: in --json, in `compensations show` and on the dashboard (the same view)."""
    project = make_project("talk", """
        [tool.workrun.apps.talk]
        entry = "main.py"
        compensation = { entry = "compensate.py", max_retries = 0 }
    """, {"main.py": "import sys\nfrom workrun_sdk import process\n"
                     "sys.exit(1) if process.input().get('fail') else process.result({'n': 1})\n",
          "compensate.py": "import sys\nfrom workrun_sdk import compensation\ncompensation.context()\n"
                           "print('deleted order 7', flush=True)\nprint('careful', file=sys.stderr)\n"})
    wf = write_workflow("talk", f"""
        [nodes.a]
        project = "{project}"
        app = "talk"
        [nodes.boom]
        project = "{project}"
        app = "talk"
        needs = ["a"]
        input = {{ fail = true }}
    """)
    res = workrun("run", wf, "--json")
    assert res.code == 1, res
    comp = next(o for o in res.json()["operations"] if o["node_key"] == "a")["compensation"]
    (attempt,) = comp["attempts"]
    assert attempt["stdout_tail"] == "deleted order 7\n" and attempt["stderr_tail"] == "careful\n", attempt
    shown = workrun("compensations", "show", comp["compensation_id"]).out
    assert "stdout: deleted order 7" in shown and "stderr: careful" in shown, shown


def test_compensate_of_a_failed_run_is_audited_with_its_reason(workrun):
    """R-O2, R-D4: ``compensate`` taken up again on a failed run is an operator action like stop: who and why go
    into its audit row (dashboard review: a reason given there was lost)."""
    from pathlib import Path

    tutorial = Path(__file__).resolve().parents[2] / "demo_apps" / "workflows" / "tutorial.toml"
    run = workrun("run", tutorial, "--json").json()
    from workrun.repair.operator import actor

    res = workrun("compensate", run["run_id"], "--reason", "checking it again", "--json")
    assert res.code == 0, res  # nothing left to do: every compensation is done
    shown = workrun("runs", "show", run["run_id"]).out  # the run's operator actions, who and why
    assert f"operator: compensate by {actor()}: checking it again" in shown, shown
