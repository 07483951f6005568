"""Node failure policies end to end (R-W7, issue 6): continue, retry, retry exhausted, fallback, and
invalid policies refused before anything runs (SPEC §10). Real uv Apps, the real CLI.
"""

from __future__ import annotations

import json
import re
from datetime import datetime

import pytest

from _kit.ops_apps import write_project


@pytest.fixture(scope="module")
def ops(tmp_path_factory):
    return write_project(tmp_path_factory.mktemp("ops") / "ops")


def ts(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


def nodes(view):
    return {n["node_key"]: (n["status"], n["handled"]) for n in view["nodes"]}


def ops_of(view, node):
    return [o for o in view["operations"] if o["node_key"] == node]


def texts(view, node):
    return [m["text"] for n in view["nodes"] if n["node_key"] == node for m in n["messages"]]


def retry_delays(view, node, call):
    """Seconds announced in the node's ``retrying (call N of M) in X s`` messages."""
    pattern = re.compile(rf"retrying \({call}\) in ([0-9.e-]+) s \(on_failure = retry\)")
    return [float(m.group(1)) for t in texts(view, node) for m in [pattern.fullmatch(t)] if m]


def node(key, ops, inp, extra=""):
    return f'[nodes.{key}]\nproject = "{ops}"\napp = "step"\ninput = {inp}\n{extra}\n'


def test_continue_marks_node_handled_and_run_succeeds(workrun, write_workflow, ops):
    wf = write_workflow("cont", node("up", ops, '{ name = "up" }')
                        + node("cont", ops, '{ name = "cont", fail = true }', 'on_failure = "continue"')
                        + node("down", ops, '{ name = "down" }', 'needs = ["cont", "up"]'))
    res = workrun("run", wf, "--json")
    assert res.code == 0, res
    view = res.json()
    assert view["status"] == "succeeded"
    assert nodes(view) == {"up": ("succeeded", False), "cont": ("failed", True), "down": ("succeeded", False)}
    assert [o["status"] for o in ops_of(view, "cont")] == ["failed"]  # one call: continue does not retry
    assert any("handled by on_failure = continue" in t for t in texts(view, "cont"))
    assert all(o["compensation"] is None for o in view["operations"])  # the run succeeded: nothing undone
    assert workrun("compensations", "list", "--json").json() == []


def test_retry_reruns_a_failed_call_with_backoff(workrun, write_workflow, ops, tmp_path):
    counter = tmp_path / "counter"
    wf = write_workflow("retry", node("flaky", ops, f'{{ name = "flaky", fail_first = 1, counter = "{counter}" }}',
                                      "on_failure = { retry = { attempts = 3, backoff = 0.3 } }"))
    res = workrun("run", wf, "--json")
    assert res.code == 0, res
    view = res.json()
    calls = ops_of(view, "flaky")
    assert [o["status"] for o in calls] == ["failed", "succeeded"]
    assert calls[0]["exit_code"] == 5 and "call 1 fails on purpose" in calls[0]["error"]
    assert ts(calls[1]["started_at"]) - ts(calls[0]["ended_at"]) >= 0.3 * 0.75  # backoff jittered ±25 %
    assert calls[1]["operation_id"] != calls[0]["operation_id"]
    assert counter.read_text() == "2"
    assert nodes(view)["flaky"] == ("succeeded", False)
    assert [0.22 <= d <= 0.38 for d in retry_delays(view, "flaky", "call 2 of 3")] == [True]


def test_retry_exhausted_fails_the_run_and_compensates(workrun, write_workflow, ops, tmp_path):
    log = tmp_path / "comp.log"
    wf = write_workflow("exhaust", node("up", ops, f'{{ name = "up", log = "{log}" }}')
                        + node("bad", ops, '{ name = "bad", fail = true }',
                               'needs = ["up"]\non_failure = { retry = { attempts = 2, backoff = 0.05 } }'))
    res = workrun("run", wf, "--json")
    assert res.code == 1, res
    view = res.json()
    assert view["status"] == "failed" and view["reason"] == "node 'bad' failed"
    calls = ops_of(view, "bad")
    assert [o["status"] for o in calls] == ["failed", "failed"]  # exactly `attempts` calls
    assert ts(calls[1]["started_at"]) - ts(calls[0]["ended_at"]) >= 0.05 * 0.75  # backoff jittered ±25 %
    assert all(o["compensation"] is None for o in calls)
    assert nodes(view)["bad"] == ("failed", False)
    up = ops_of(view, "up")[0]["compensation"]
    assert up["status"] == "succeeded"
    assert [json.loads(line)["name"] for line in log.read_text().splitlines()] == ["up"]
    assert [0.0375 <= d <= 0.0625 for d in retry_delays(view, "bad", "call 2 of 2")] == [True]


def fallback_workflow(write_workflow, ops, log, alt_fails=False):
    """primary fails -> alt runs in its place; down reads primary's result; boom fails when --input boom=yes."""
    return write_workflow("fallback", '[inputs]\nboom = ""\n'
                          + node("primary", ops, '{ name = "primary", fail = true }',
                                 'on_failure = { fallback = "alt" }')
                          + node("alt", ops, f'{{ name = "alt", value = "from-alt", fail = {str(alt_fails).lower()}, '
                                             f'log = "{log}" }}')
                          + node("down", ops, f'{{ name = "down", value = "{{{{ nodes.primary.result.value }}}}", '
                                              f'log = "{log}" }}')
                          + node("boom", ops, '{ name = "boom", fail = "{{ inputs.boom }}" }', 'needs = ["down"]'))


def test_fallback_runs_in_place_and_downstream_reads_its_result(workrun, write_workflow, ops, tmp_path):
    log = tmp_path / "comp.log"
    res = workrun("run", fallback_workflow(write_workflow, ops, log), "--json")
    assert res.code == 0, res
    view = res.json()
    assert nodes(view) == {"primary": ("failed", True), "alt": ("succeeded", False), "down": ("succeeded", False),
                           "boom": ("succeeded", False)}
    alt_op, down_op = ops_of(view, "alt")[0], ops_of(view, "down")[0]
    assert down_op["input"]["value"] == "from-alt"  # read through the primary's template
    assert next(n for n in view["nodes"] if n["node_key"] == "primary")["result"] == alt_op["result"]
    assert down_op["depends_on"] == [alt_op["operation_id"]]
    assert any("fallback 'alt' runs in its place" in t for t in texts(view, "primary"))

    # the same workflow failing later: the fallback's call is compensated after the call that read it (R-C3)
    res = workrun("run", fallback_workflow(write_workflow, ops, log), "--input", "boom=yes", "--json")
    assert res.code == 1, res
    view = res.json()
    assert [json.loads(line)["name"] for line in log.read_text().splitlines()] == ["down", "alt"]
    assert ops_of(view, "primary")[0]["compensation"] is None


@pytest.mark.parametrize("fault", ["node.running@2", "node.finished@1"])
def test_a_runner_killed_around_a_fallback_is_resumed_with_the_fallback_run_once(workrun, write_workflow, ops,
                                                                                tmp_path, fault):
    """kill -9 as the fallback starts, or right after it ended while its primary had not: ``resume`` finishes the
    run and the fallback's App has run exactly once (it was run again, or resume failed on every try)."""
    wf = fallback_workflow(write_workflow, ops, tmp_path / "comp.log")
    res = workrun("run", wf, "--json", env={"WORKRUN_FAULT": fault})
    assert res.code != 0, res
    res = workrun("resume", "--json")
    assert res.code == 0, res
    view = workrun("runs", "show", workrun("runs", "list", "--json").json()[0]["run_id"], "--json").json()
    assert view["status"] == "succeeded"
    assert nodes(view) == {"primary": ("failed", True), "alt": ("succeeded", False), "down": ("succeeded", False),
                           "boom": ("succeeded", False)}
    alt = ops_of(view, "alt")  # killed right after the fallback's start and its call's intent (one write): that
    assert alt[-1]["status"] == "succeeded"  # call never started and is recorded so; the App ran once
    assert all(o["status"] == "failed" and o["error"].startswith("not started") for o in alt[:-1]), alt
    assert len(alt) == (2 if fault.startswith("node.running") else 1)
    assert ops_of(view, "down")[0]["input"]["value"] == "from-alt"


def test_fallback_that_fails_too_fails_the_run(workrun, write_workflow, ops, tmp_path):
    res = workrun("run", fallback_workflow(write_workflow, ops, tmp_path / "comp.log", alt_fails=True), "--json")
    assert res.code == 1, res
    view = res.json()
    assert nodes(view) == {"primary": ("failed", False), "alt": ("failed", False), "down": ("skipped", False),
                           "boom": ("skipped", False)}
    assert not (tmp_path / "comp.log").exists()


BAD = [
    ('on_failure = "ignore"', "nodes.p.on_failure", 'must be "fail", "continue"'),
    ("on_failure = { retry = 3 }", "nodes.p.on_failure.retry", "must be a table"),
    ("on_failure = { retry = { attempts = 0 } }", "nodes.p.on_failure.retry.attempts", "greater than or equal to 1"),
    ("on_failure = { retry = { attempts = 2, tries = 1 } }", "nodes.p.on_failure.retry.tries", "unknown key"),
    ('on_failure = { retry = { attempts = 2 }, fallback = "q" }', "nodes.p.on_failure", "must be"),
    ('on_failure = { fallback = "nope" }', "nodes.p.on_failure.fallback", "'nope' is not another node"),
    ('on_failure = { fallback = "p" }', "nodes.p.on_failure.fallback", "'p' is not another node"),
    ('on_failure = { fallback = "q" }\n[nodes.q]\nproject = "{ops}"\napp = "step"\non_failure = { fallback = "p" }',
     "nodes.p.on_failure.fallback", "fallback cycle: p -> q -> p"),
    ('on_failure = { fallback = "q" }\n[nodes.q]\nproject = "{ops}"\napp = "step"\n'
     '[nodes.d]\nproject = "{ops}"\napp = "step"\ninput = { v = "{{ nodes.q.result.value }}" }',
     "nodes.d", "the fallback of 'p'"),
    ('on_failure = { fallback = "q" }\n[nodes.q]\nproject = "{ops}"\napp = "step"\nneeds = ["d"]\n'
     '[nodes.d]\nproject = "{ops}"\napp = "step"',
     "nodes.p.on_failure.fallback", "depends on 'd', which is not upstream of 'p'"),
]


@pytest.mark.parametrize("policy,field,words", BAD, ids=[b[2][:24] for b in BAD])
def test_invalid_policies_are_config_errors_before_anything_runs(workrun, write_workflow, ops, tmp_path,
                                                                 policy, field, words):
    marker = tmp_path / "ran"
    wf = write_workflow("bad", f'[nodes.p]\nproject = "{ops}"\napp = "step"\n'
                        f'input = {{ name = "p", touch = "{marker}" }}\n' + policy.replace("{ops}", str(ops)) + "\n")
    res = workrun("run", wf)
    assert res.code == 2, res
    assert res.err.count("\n") == 1 and res.err.startswith(f"error: {wf}: {field}: "), res.err
    assert words in res.err, res.err
    assert workrun("runs", "list", "--json").json() == []  # no run was created
    assert not marker.exists()


def test_a_fallbacks_call_depends_on_what_its_primarys_did(workrun, write_workflow, ops, tmp_path):
    """Found by a hostile test: a fallback runs in its primary's place, after what the primary needed, so its
    call depends on the operations the primary's depended on and is compensated before them (R-C3), even when
    the fallback itself declares no ``needs``."""
    log = tmp_path / "comp.log"
    wf = write_workflow("fallback_deps", node("up", ops, f'{{ name = "up", log = "{log}" }}')
                        + node("primary", ops, '{ name = "primary", fail = true }',
                               'needs = ["up"]\non_failure = { fallback = "alt" }')
                        + node("alt", ops, f'{{ name = "alt", log = "{log}" }}')
                        + node("boom", ops, '{ name = "boom", fail = true }', 'needs = ["primary"]'))
    res = workrun("run", wf, "--json")
    assert res.code == 1, res
    view = res.json()
    up_op, alt_op = ops_of(view, "up")[0], ops_of(view, "alt")[0]
    assert alt_op["depends_on"] == [up_op["operation_id"]]
    assert [json.loads(line)["name"] for line in log.read_text().splitlines()] == ["alt", "up"]


def test_a_retry_resumed_after_a_restart_still_waits_its_backoff(workrun, write_workflow, ops, tmp_path):
    """R-W7 (conformance review): killed -9 right after a call failed (its outcome committed), while it waited
    its 2 s backoff, then resumed at once: the next call started at once; it waits what is left."""
    counter = tmp_path / "counter"
    wf = write_workflow("retry", node("flaky", ops, f'{{ name = "flaky", fail_first = 1, counter = "{counter}" }}',
                                      "on_failure = { retry = { attempts = 3, backoff = 2 } }"))
    killed = workrun("run", wf, "--json", env={"WORKRUN_FAULT": "op.finished"})
    assert killed.code != 0 and counter.read_text() == "1", killed
    res = workrun("resume", "--json")
    assert res.code == 0, res
    view = workrun("runs", "show", workrun("runs", "list", "--json").json()[0]["run_id"], "--json").json()
    calls = ops_of(view, "flaky")
    assert [o["status"] for o in calls] == ["failed", "succeeded"], calls
    assert ts(calls[1]["started_at"]) - ts(calls[0]["ended_at"]) >= 2 * 0.75, calls  # backoff jittered ±25 %
    assert any("(on_failure = retry; resumed)" in t for t in texts(view, "flaky")), texts(view, "flaky")
