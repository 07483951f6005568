"""The Python API (SPEC §22, R-V2): each function returns exactly what the CLI's ``--json`` prints and
raises ``workrun.api.WorkrunError`` where the CLI exits 2 or 3. ``check`` (R-L1) and ``compensate
--dry-run`` (R-L3) through both surfaces."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from _kit.http_server import TestServer
from workrun import api

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def server():
    with TestServer() as srv:
        srv.route("POST", "/orders", status=201, json={"id": "7"})
        srv.route("DELETE", "/orders/7", status=204, body="")
        srv.route("POST", "/boom", status=500, body="no")
        yield srv


def _order_flow(write_workflow, server: TestServer, name: str = "orders"):
    return write_workflow(name, f"""
http_allow = ["127.0.0.1:{server.port}"]
[inputs]
who = "ann"
[nodes.order]
kind = "http"
method = "POST"
url = "{server.url}/orders"
body = {{ who = "{{{{ inputs.who }}}}" }}
compensation = {{ method = "DELETE", url = "{server.url}/orders/{{{{ original.result.body.id }}}}" }}
[nodes.boom]
kind = "http"
method = "POST"
url = "{server.url}/boom"
needs = ["order"]
""")


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_api_returns_what_the_cli_prints(server, write_workflow, workrun, isolated_env, tmp_path):
    wf = _order_flow(write_workflow, server)
    view = api.run(wf, {"who": "bob"})
    assert view["status"] == "failed" and view["inputs"]["who"] == "bob"
    rid = view["run_id"]
    comp = next(o for o in view["operations"] if o["node_key"] == "order")["compensation"]
    assert comp["status"] == "succeeded" and server.count("DELETE", "/orders/7") == 1
    assert api.show(rid) == workrun("runs", "show", rid, "--json").json() == view
    assert api.runs() == workrun("runs", "list", "--json").json()
    assert api.runs(limit=1) == workrun("runs", "list", "--json", "--limit", "1").json()
    plan = api.compensate(rid, dry_run=True)
    assert plan == workrun("compensate", rid, "--dry-run", "--json").json()
    assert [(s["place"], s["node_key"], s["status"]) for s in plan["plan"]] == [(1, "order", "succeeded")]
    assert api.check(wf) == workrun("check", wf, "--json").json() == {"ok": True, "nodes": 2, "compensable": 1}
    assert api.stop(rid)["status"] == "failed"  # nothing to stop: the run as it is
    told = workrun("stop", rid)
    assert told.code == 0 and f"run {rid} has ended (failed); nothing to stop" in told.out, told
    assert api.resume() == workrun("resume", "--json").json() == {"runs": []}
    again = api.rerun(rid)
    assert again["run_id"] != rid and again["status"] == "failed"
    other = tmp_path / "elsewhere"  # home= chooses the data directory, as WORKRUN_HOME does
    assert api.runs(home=other) == [] and api.run(wf, home=other)["status"] == "failed"
    assert len(api.runs(home=other)) == 1 and len(api.runs()) == 2
    afile = tmp_path / "afile"  # a bad home= is named as what the caller wrote, not WORKRUN_HOME (API review)
    afile.write_text("")
    with pytest.raises(api.WorkrunError) as refused:
        api.runs(home=afile)
    assert refused.value.exit_code == 2 and str(refused.value) == f"home: {afile} is not a directory"


def test_api_raises_where_the_cli_exits_2_or_3(server, write_workflow, isolated_env):
    from workrun.core.lock import SchedulerLock

    bad = write_workflow("bad", """
[nodes.a]
kind = "http"
method = "GET"
url = "http://{{ inputs.host }}/x"
[nodes.b]
kind = "nope"
""")
    with pytest.raises(api.WorkrunError) as err:
        api.run(bad)
    assert err.value.exit_code == 2
    lines = err.value.message.splitlines()
    assert len(lines) == 2 and all(str(bad) in line for line in lines), lines  # every error, each naming the file
    with pytest.raises(api.WorkrunError) as err:
        api.check(bad)
    assert err.value.exit_code == 2 and err.value.message.splitlines() == lines
    with pytest.raises(api.WorkrunError) as err:
        api.show("run_nope")
    assert err.value.exit_code == 2
    with pytest.raises(api.WorkrunError) as err:
        api.runs(limit=0)
    assert err.value.exit_code == 2
    wf = _order_flow(write_workflow, server)
    isolated_env.mkdir(parents=True, exist_ok=True)
    lock = SchedulerLock(isolated_env).acquire()
    try:
        with pytest.raises(api.WorkrunError) as err:
            api.run(wf)
        assert err.value.exit_code == 3
    finally:
        lock.release()
    assert server.requests() == []  # nothing ran


def test_check_reports_every_error_and_creates_nothing(write_workflow, workrun, tmp_path):
    """R-L1: all error lines, one per line, exit 2; no data directory or journal is created."""
    home = tmp_path / "never-made"
    bad = write_workflow("bad", """
[inputs]
n = "1"
[nodes.a]
kind = "http"
method = "GET"
url = "http://{{ inputs.host }}/x"
[nodes.b]
kind = "nope"
[nodes.c]
kind = "http"
method = "GET"
url = "http://127.0.0.1/{{ nodes.zz.result.body }}"
""")
    res = workrun("check", bad, env={"WORKRUN_HOME": str(home)})
    assert res.code == 2, res
    lines = res.err.strip().splitlines()
    assert len(lines) == 3 and all(line.startswith(f"error: {bad}: nodes.") for line in lines), lines
    as_json = workrun("check", bad, "--json", env={"WORKRUN_HOME": str(home)})
    assert as_json.code == 2 and as_json.json() == {"ok": False, "errors": [ln[len("error: "):] for ln in lines]}
    assert not home.exists()
    good = write_workflow("good", '[nodes.a]\nkind = "http"\nmethod = "GET"\nurl = "http://127.0.0.1/x"\n')
    ok = workrun("check", good, env={"WORKRUN_HOME": str(home)})
    assert ok.code == 0 and ok.out.strip() == "ok: 1 nodes, 0 compensable"
    assert not home.exists()


def test_check_goes_on_past_a_node_whose_app_is_wrong(write_workflow, workrun, marker_project, tmp_path):
    """R-L1, all at once: a node whose App is unknown, or whose project is missing, still has its own needs and
    templates checked; the errors come node by node, in the file's order, one per field (new-user review)."""
    bad = write_workflow("bad", f"""
[nodes.a]
project = "{marker_project}"
app = "no-such-app"
input = {{ x = "{{{{ inputs.nope }}}}" }}
[nodes.b]
project = "{marker_project}"
app = "mark"
needs = ["a", "zzz"]
input = {{ y = "{{{{ nodes.a.result.anything }}}}" }}
[nodes.c]
project = "{tmp_path / 'nowhere'}"
app = "x"
needs = ["c"]
""")
    res = workrun("check", bad, "--json")
    assert res.code == 2, res
    fields = [line.split(": ")[1] for line in res.json()["errors"]]
    # a's result holds what its (unknown) App says: not checked; everything else is
    assert fields == ["nodes.a.app", "nodes.a.input.x", "nodes.b.needs", "nodes.c.project", "nodes.c.needs"], res.out
    assert res.json()["errors"][-1] == f"{bad}: nodes.c.needs: a node cannot need itself"


def test_an_unknown_input_is_named_beside_a_node_whose_app_is_wrong(write_workflow, workrun, marker_project):
    """R-L1 and SPEC §17 (hostile review): a --input typo is reported with a wrong App's error, and an input used
    only by a node that could not be read, or a fallback to it, is no false error."""
    bad = write_workflow("typo", f"""
[inputs]
note = "x"
[nodes.a]
project = "{marker_project}"
app = "no-such-app"
input = {{ text = "{{{{ inputs.note }}}}" }}
[nodes.b]
project = "{marker_project}"
app = "mark"
needs = "oops"
input = {{ name = "{{{{ inputs.who }}}}" }}
[nodes.c]
project = "{marker_project}"
app = "mark"
on_failure = {{ fallback = "b" }}
""")
    res = workrun("check", bad, "--json", "--input", "nte=1", "--input", "who=me")
    assert res.code == 2, res
    assert [line.split(": ", 2)[1] for line in res.json()["errors"]] == ["--input", "nodes.a.app", "nodes.b.needs"]
    assert "unknown input 'nte'" in res.json()["errors"][0], res.json()


def test_check_reports_every_template_top_level_and_input_error_at_once(write_workflow, workrun, tmp_path):
    """R-L1 (hostile review): a node's every bad template, the workflow's own keys beside its nodes' errors, and
    every unknown --input, in one pass."""
    steps = ROOT / "demo_apps" / "steps"
    bad = write_workflow("bad", f"""
name = 3
colour = "red"
[nodes.a]
project = "{steps}"
app = "step"
input = {{ x = "{{{{ inputs.first }}}}", y = "{{{{ inputs.second }}}}", z = "{{{{ nodes.b.result.nofield }}}}" }}
[nodes.b]
project = "{steps}"
app = "step"
needs = ["ghost"]
""")
    res = workrun("check", bad, "--json")
    assert res.code == 2, res
    assert [line.split(": ", 2)[1:] for line in res.json()["errors"]] == [
        ["colour", "unknown key"],
        ["name", "must be a non-empty string"],
        ["nodes.a.input.x", "{{ inputs.first }} refers to an input that is neither in [inputs] nor given with --input"],
        ["nodes.a.input.y", "{{ inputs.second }} refers to an input that is neither in [inputs] nor given with "
                            "--input"],
        ["nodes.a.input.z", "{{ nodes.b.result.nofield }}: App 'step' declares no output field 'nofield'"],
        ["nodes.b.needs", "unknown node 'ghost'"],
    ], res.json()
    # a wrong value the node can do without (its timeout) does not hide its templates' errors; an email action's
    # every bad field is said, its body's too (conformance review)
    both = write_workflow("both", """
[smtp]
host = "127.0.0.1"
from = "shop@example.com"
[nodes.a]
kind = "http"
method = "POST"
url = "http://127.0.0.1:9/x"
timeout = "x"
body = { a = "{{ inputs.nope }}" }
compensation = { email = { to = ["ops@example.com"], cc = ["{{ inputs.cc }}"], body = "x {{ inputs.nope2 }}" } }
""")
    res = workrun("check", both, "--json")
    assert res.code == 2, res
    assert [line.split(": ", 2)[1] for line in res.json()["errors"]] == [
        "nodes.a.timeout", "nodes.a.compensation.email.cc", "nodes.a.compensation.email.body", "nodes.a.body.a"], res
    device = workrun("check", "/dev/null")  # there, but no file: said so (hostile review)
    assert device.code == 2 and device.err == "error: /dev/null: not a regular file\n", device
    long = workrun("app", "new", "a" * 300)
    assert long.code == 2 and "at most 64 characters" in long.err, long
    too_long = tmp_path / "long-key.toml"  # a valid name but too long: the line says the limit
    too_long.write_text(f'[nodes.{"a" * 65}]\nkind = "http"\nmethod = "GET"\nurl = "http://127.0.0.1:9/"\n')
    key = workrun("check", too_long)
    assert key.code == 2 and "node keys are 1 to 64 letters, digits, '_' and '-'" in key.err, key
    afile = tmp_path / "afile"
    afile.write_text("")
    for where in (afile, afile / "sub"):  # a file where the directory belongs (new-user review: internal error)
        res = workrun("app", "new", "x", "--dir", str(where))
        assert res.code == 2 and res.err.count("\n") == 1 and "--dir" in res.err and str(where) in res.err, res
    fine = write_workflow("fine", f'[nodes.a]\nproject = "{steps}"\napp = "step"\n')
    typos = workrun("check", fine, "--input", "typo1=1", "--input", "typo2=2")
    assert typos.code == 2 and typos.err == (f"error: {fine}: --input: unknown inputs 'typo1', 'typo2': this workflow "
                                             "declares or uses only: none\n"), typos


def test_names_no_system_call_takes_are_bad_values_not_internal_errors(tmp_path, workrun, isolated_env):
    """A workflow path or ``project`` with a name over 255 bytes (ENAMETOOLONG, which ``Path.is_file()`` raises),
    and a run id with an undecodable byte, are one ``error:`` line and exit 2, from the CLI and the API (§10,
    R-V2; CLI-completeness review)."""
    long = tmp_path / ("x" * 300 + ".toml")
    for args in (("check", long), ("check", long, "--json"), ("graph", long), ("graph", tmp_path / ("x" * 300))):
        res = workrun(*args)
        assert res.code == 2 and "internal error" not in res.err + res.out, res
    assert "not a usable path: File name too long" in workrun("check", long).err
    wf = tmp_path / "p.toml"
    wf.write_text(f'[nodes.a]\nproject = "{"y" * 300}"\napp = "x"\n')
    res = workrun("check", wf)
    assert res.code == 2 and res.err.startswith(f"error: {wf}: nodes.a.project: not a usable path: "), res
    with pytest.raises(api.WorkrunError):
        api.check(wf)
    for args in (("graph", "\udcff"), ("runs", "show", "\udcff")):
        res = workrun(*args)
        assert (res.code, res.err) == (2, "error: RUN: no run matches '\\udcff'\n"), res


def test_compensate_dry_run_changes_nothing_and_shows_what_compensate_would_do(server, write_workflow, workrun,
                                                                              isolated_env):
    """R-L3: a stopped run's plan before `compensate`; the journal file is byte-identical afterwards."""
    wf = _order_flow(write_workflow, server)
    view = api.run(wf)
    rid = view["run_id"]
    journal = isolated_env / "journal.sqlite3"
    before = _digest(journal)
    plan = api.compensate(rid, dry_run=True)
    text = workrun("compensate", rid, "--dry-run")
    assert text.code == 0 and "1. order" in text.out and "would:" in text.out, text
    assert _digest(journal) == before
    assert plan["run_id"] == rid and plan["plan"][0]["action"].startswith("DELETE ")
    assert plan["plan"][0]["held_back_by"] == [] and plan["plan"][0]["operation_id"].startswith("op_")


def test_the_tutorial_through_the_api(isolated_env):
    """The README's tutorial, from Python: create a file, fail, the file is removed by compensation."""
    view = api.run(ROOT / "demo_apps" / "workflows" / "tutorial.toml")
    assert view["status"] == "failed"
    create = next(o for o in view["operations"] if o["node_key"] == "create")
    assert create["compensation"]["status"] == "succeeded"
    assert not Path(create["result"]["file_path"]).exists()


def test_graph_of_a_workflow_and_of_a_run(server, write_workflow, workrun):
    """R-L2: edges from the dependency to the node that needs it, needs solid, template references dashed; a
    run's graph carries each node's status and its compensation places."""
    wf = _order_flow(write_workflow, server)
    text = wf.read_text().replace('needs = ["order"]\n', 'needs = ["order"]\n') + f"""
[nodes.look]
kind = "http"
method = "GET"
url = "{server.url}/orders/{{{{ nodes.order.result.body.id }}}}"
"""
    wf.write_text(text)
    server.route("GET", "/orders/7", status=200, json={"id": "7"})
    as_json = workrun("graph", wf, "--format", "json")
    assert as_json.code == 0, as_json
    model = as_json.json()
    assert model["nodes"] == [{"key": "order", "kind": "http"}, {"key": "boom", "kind": "http"},
                              {"key": "look", "kind": "http"}]
    assert sorted((e["from"], e["to"], e["kind"]) for e in model["edges"]) == [
        ("order", "boom", "needs"), ("order", "look", "template")]
    mermaid = workrun("graph", wf).out
    assert mermaid.startswith("flowchart TD") and "n0 --> n1" in mermaid and "n0 -.-> n2" in mermaid
    dot = workrun("graph", wf, "--format", "dot").out
    assert '"order" -> "look" [style=dashed];' in dot and '"order" -> "boom";' in dot
    rid = api.run(wf)["run_id"]
    run_model = workrun("graph", rid, "--format", "json").json()
    by_key = {n["key"]: n for n in run_model["nodes"]}
    assert by_key["order"]["status"] == "succeeded" and by_key["boom"]["status"] == "failed"
    assert by_key["order"]["compensation_places"] == [1] and "compensation_places" not in by_key["boom"]
    assert "succeeded" in workrun("graph", rid).out and "failed" in workrun("graph", rid, "--format", "dot").out
    assert workrun("graph", wf, "--format", "png").code == 2
    # a graph sends nothing: a header's secret need not be set to draw it (check and run still need it)
    wf.write_text(text + '[nodes.look.headers]\nAuthorization = "Bearer {{ env.WORKRUN_TEST_UNSET_TOKEN }}"\n')
    assert "WORKRUN_TEST_UNSET_TOKEN" not in os.environ
    drawn = workrun("graph", wf, "--format", "json")
    assert drawn.code == 0 and len(drawn.json()["nodes"]) == 3, drawn
    refused = workrun("check", wf)
    assert refused.code == 2 and "environment variable WORKRUN_TEST_UNSET_TOKEN is not set" in refused.err, refused


def test_bad_arguments_raise_workrun_error_exit_2(write_workflow, server):
    """Break-it finding: the API refuses a wrong argument type as the CLI refuses bad usage (exit 2)."""
    wf = _order_flow(write_workflow, server)
    for call in (lambda: api.run(None), lambda: api.run(5), lambda: api.check(None), lambda: api.run(wf, ["x"]),
                 lambda: api.run(wf, {"who": object()}), lambda: api.show(123), lambda: api.rerun(5),
                 lambda: api.runs(limit="x"), lambda: api.runs(limit=1.5), lambda: api.runs(home=5),
                 lambda: api.runs(home="/tmp/a\0b"), lambda: api.stop("run_x", timeout="soon")):
        with pytest.raises(api.WorkrunError) as err:
            call()
        assert err.value.exit_code == 2, err.value.message
    assert server.requests() == []


def test_deeply_nested_toml_is_exit_2(cli, tmp_path):
    path = tmp_path / "deep.toml"
    path.write_text('[nodes.a]\nkind = "http"\nmethod = "GET"\nurl = "http://127.0.0.1:9/"\nbody = '
                    + "[" * 5000 + "]" * 5000 + "\n")
    res = cli("check", path)
    assert res.code == 2 and "nested too deep" in res.err, res


def test_a_plan_held_back_by_a_failed_compensation_runs_nothing_by_itself(marker_project, write_workflow, workrun):
    """Newcomer finding (R-L3): `first` is held back by `second`, whose compensation failed: the plan says
    "nothing by itself" and names the one that needs an operator; `compensate` then says what is not finished."""
    wf = write_workflow("held", f"""
[nodes.first]
project = "{marker_project}"
app = "mark"
input = {{ name = "first" }}
[nodes.second]
project = "{marker_project}"
app = "mark"
needs = ["first"]
input = {{ name = "second", comp_fail = true }}
[nodes.boom]
project = "{marker_project}"
app = "mark"
needs = ["second"]
input = {{ name = "boom", fail = true }}
""")
    ran = workrun("run", wf, "--json")
    assert ran.code == 1, ran
    rid = ran.json()["run_id"]
    plan = workrun("compensate", rid, "--dry-run", "--json").json()
    assert {s["node_key"]: s["status"] for s in plan["plan"]} == {"second": "failed", "first": "blocked"}
    second = next(s["compensation_id"] for s in plan["plan"] if s["node_key"] == "second")
    first = next(s["compensation_id"] for s in plan["plan"] if s["node_key"] == "first")
    retry_or_resolve = (f"`workrun compensations retry {second}` or `workrun compensations resolve {second}`")
    assert plan["would"] == f"nothing by itself; 1 need(s) an operator first: {second} failed: {retry_or_resolve}"
    done = workrun("compensate", rid)
    assert done.code == 1, done
    hint = next(line for line in done.out.splitlines() if "2 compensation(s) not finished" in line)
    # what each waits for, by its status: never `resume` (it would do nothing) nor `confirm` for a failed one
    assert hint == (f"2 compensation(s) not finished: {first} held back by {second} until they are done; "
                    f"{second} failed: {retry_or_resolve} (`workrun runs show {rid}` shows each)"), hint
    # the App's compensation script changes: the plan says so before a retry is blocked by it (R-C8; hostile review)
    with (marker_project / "compensate.py").open("a") as fh:
        fh.write("# edited after the calls\n")
    plan = workrun("compensate", rid, "--dry-run", "--json").json()
    changed = "code changed since the call: compensate.py changed"
    assert {s["node_key"]: s["code_change"] for s in plan["plan"]} == {"second": changed, "first": changed}, plan
    accept = (f"code changed since the call (compensate.py changed): `workrun compensations retry {{}} "
              f"--accept-code-change` or `workrun compensations resolve {{}}`")
    assert plan["would"] == (f"nothing by itself; 2 need(s) an operator first: {second} {accept.format(second, second)};"
                             f" {first} held back by {second} until they are done; then "
                             f"{accept.format(first, first)}"), plan["would"]
    text = workrun("compensate", rid, "--dry-run").out
    assert text.count(f"; {changed}") == 2, text


def test_compensate_of_a_compensated_run_says_there_is_nothing_to_do(isolated_env, workrun):
    """`workrun compensate RUN` on a run whose compensations are all done changes nothing and says so (exit 0);
    the journal gains no message for it (new-user review)."""
    view = api.run(ROOT / "demo_apps" / "workflows" / "tutorial.toml")
    rid = view["run_id"]
    messages = len(api.show(rid)["messages"])
    done = workrun("compensate", rid)
    assert done.code == 0 and "nothing to compensate: every compensation of run" in done.out, done
    assert len(api.show(rid)["messages"]) == messages
    first = workrun("run", str(ROOT / "demo_apps" / "workflows" / "tutorial.toml"))  # compensated as it failed:
    assert "nothing to compensate" not in first.out  # never said of a run that had work


def test_check_reports_each_needs_cycle_once(write_workflow, workrun):
    """R-L1: two independent cycles are two errors; a second ring through a node already reported is not a third."""
    steps = ROOT / "demo_apps" / "steps"
    nodes = "".join(f'[nodes.{k}]\nproject = "{steps}"\napp = "step"\nneeds = {needs}\n'
                    for k, needs in (("a", '["b"]'), ("b", '["a", "c"]'), ("c", '["b"]'), ("x", '["y"]'),
                                     ("y", '["x"]'), ("z", '[]')))
    res = workrun("check", write_workflow("rings", nodes), "--json")
    assert res.code == 2, res
    assert [line.split(": ", 2)[1:] for line in res.json()["errors"]] == [
        ["nodes.a", "cycle: a -> b -> a"], ["nodes.x", "cycle: x -> y -> x"]], res.json()
