"""The engine with fake executors and a fake App runner: scheduling, failure policies, final failure, stop,
resume decisions and hold-back. No process is started; each test is well under a second."""

from __future__ import annotations

import os
import threading
import time

import pytest

from _kit.fakes import Call, Exit, FakeExecutor, FakeRunner, failing, hold, services, workflow, write_app_project
from workrun.compensation import compensate_run, refresh_holds
from workrun.core.outcomes import Failure, NodeOutcome
from workrun.effects import settle_operations
from workrun.engine.driver import Engine, create_run
from workrun.nodes.base import NodeJob
from workrun.nodes.process import ProcessExecutor
from workrun.runner.base import Outcome


def run(svc, spec, executors, *, eval_run=False):
    run_id = create_run(svc, spec, {}, eval_run=eval_run)
    status = Engine(svc, executors).execute(run_id)
    return run_id, status


def nodes(svc, run_id):
    return {n["node_key"]: (n["status"], bool(n["handled"])) for n in svc.journal.nodes(run_id)}


# -- scheduling ------------------------------------------------------------------


def test_a_chain_runs_in_dependency_order(tmp_path):
    svc = services(tmp_path)
    fake = FakeExecutor()
    spec = workflow({"c": {"needs": ["b"]}, "b": {"needs": ["a"]}, "a": {}})
    run_id, status = run(svc, spec, {"process": fake})
    assert status == "succeeded" and fake.started == ["a", "b", "c"]
    assert nodes(svc, run_id) == {"c": ("succeeded", False), "b": ("succeeded", False), "a": ("succeeded", False)}


def test_independent_nodes_run_at_the_same_time(tmp_path):
    svc = services(tmp_path)
    both = threading.Barrier(2, timeout=60)

    def meet(job):
        both.wait()  # only passes when the other node runs at the same time
        return NodeOutcome("succeeded", {})

    fake = FakeExecutor({"a": meet, "b": meet})
    _, status = run(svc, workflow({"a": {}, "b": {}}), {"process": fake})
    assert status == "succeeded" and fake.most_at_once == 2


def test_concurrency_is_bounded(tmp_path):
    svc = services(tmp_path, concurrency=2)
    fake = FakeExecutor({k: hold(0.3) for k in "abcde"})  # long enough for two to overlap when loaded
    _, status = run(svc, workflow({k: {} for k in "abcde"}), {"process": fake})
    assert status == "succeeded" and sorted(fake.started) == list("abcde") and fake.most_at_once == 2


def test_a_template_reference_orders_nodes_and_fills_the_input(tmp_path):
    svc = services(tmp_path)
    fake = FakeExecutor({"a": lambda job: NodeOutcome("succeeded", {"x": 7})})
    spec = workflow({"b": {"input": {"v": "{{ nodes.a.result.x }}"}}, "a": {}}, inputs={"who": "me"})
    _, status = run(svc, spec, {"process": fake})
    assert status == "succeeded" and fake.started == ["a", "b"]
    assert fake.jobs["b"].context == {"inputs": {}, "nodes": {"a": {"result": {"x": 7}}}}


def test_the_run_records_its_nodes_results(tmp_path):
    svc = services(tmp_path)
    run_id, status = run(svc, workflow({"a": {}}), {"process": FakeExecutor()})
    assert status == "succeeded"
    assert svc.journal.nodes(run_id)[0]["result"] == {"node": "a"}
    assert svc.journal.run(run_id)["status"] == "succeeded"


# -- failure policies --------------------------------------------------------------


def test_fail_ends_the_run_and_skips_what_is_downstream(tmp_path):
    svc = services(tmp_path)
    fake = FakeExecutor({"a": failing("exit 3")})
    run_id, status = run(svc, workflow({"a": {}, "b": {"needs": ["a"]}}), {"process": fake})
    assert status == "failed" and fake.started == ["a"]
    assert nodes(svc, run_id) == {"a": ("failed", False), "b": ("skipped", False)}
    assert svc.journal.run(run_id)["reason"] == "node 'a' failed"


def test_continue_absorbs_the_failure(tmp_path):
    svc = services(tmp_path)
    fake = FakeExecutor({"a": failing()})
    spec = workflow({"a": {"on_failure": "continue"}, "b": {"needs": ["a"]}})
    run_id, status = run(svc, spec, {"process": fake})
    assert status == "succeeded" and fake.started == ["a", "b"]
    assert nodes(svc, run_id) == {"a": ("failed", True), "b": ("succeeded", False)}


def test_fallback_runs_in_place_of_the_failed_node(tmp_path):
    svc = services(tmp_path)
    fake = FakeExecutor({"a": failing(), "fb": lambda job: NodeOutcome("succeeded", {"x": "from fb"})})
    spec = workflow({"a": {"on_failure": {"fallback": "fb"}}, "fb": {},
                     "b": {"input": {"v": "{{ nodes.a.result.x }}"}}})
    run_id, status = run(svc, spec, {"process": fake})
    assert status == "succeeded" and fake.started == ["a", "fb", "b"]
    assert nodes(svc, run_id)["a"] == ("failed", True)
    assert fake.jobs["b"].context["nodes"]["a"] == {"result": {"x": "from fb"}}


def test_a_fallback_node_does_not_run_when_its_primary_succeeds(tmp_path):
    svc = services(tmp_path)
    fake = FakeExecutor()
    run_id, status = run(svc, workflow({"a": {"on_failure": {"fallback": "fb"}}, "fb": {}}), {"process": fake})
    assert status == "succeeded" and fake.started == ["a"]
    assert nodes(svc, run_id)["fb"] == ("skipped", False)


def test_a_failing_fallback_fails_the_run(tmp_path):
    svc = services(tmp_path)
    fake = FakeExecutor({"a": failing(), "fb": failing("fallback broke")})
    run_id, status = run(svc, workflow({"a": {"on_failure": {"fallback": "fb"}}, "fb": {}}), {"process": fake})
    assert status == "failed" and nodes(svc, run_id)["a"] == ("failed", False)


def _process_run(tmp_path, runner, node=None, **project):
    svc = services(tmp_path, runner)
    proj = write_app_project(tmp_path / "projects", "step", **project)
    spec = workflow({"a": {"project": str(proj), "app": "step", **(node or {})}})
    run_id = create_run(svc, spec, {})
    return svc, run_id, Engine(svc, {"process": ProcessExecutor()})


def test_retry_calls_again_within_its_budget(tmp_path):
    runner = FakeRunner({"main.py": lambda c: Exit(code=5) if c.number == 0 else Exit(result={"ok": True})})
    svc, run_id, engine = _process_run(tmp_path, runner, {"on_failure": {"retry": {"attempts": 3, "backoff": 0}}})
    assert engine.execute(run_id) == "succeeded"
    ops = svc.journal.operations(run_id)
    assert [(o["status"], o["failure"]) for o in ops] == [("failed", "exited"), ("succeeded", None)]


def test_retry_gives_up_when_the_budget_is_spent(tmp_path):
    runner = FakeRunner({"main.py": lambda c: Exit(code=5)})
    svc, run_id, engine = _process_run(tmp_path, runner, {"on_failure": {"retry": {"attempts": 2, "backoff": 0}}})
    assert engine.execute(run_id) == "failed"
    assert len(runner.started) == 2 and [o["status"] for o in svc.journal.operations(run_id)] == ["failed"] * 2


def test_a_result_against_the_contract_is_a_contract_failure(tmp_path):
    runner = FakeRunner({"main.py": lambda c: Exit(result={"n": "text"})})
    svc, run_id, engine = _process_run(tmp_path, runner, output='output = { n = { type = "integer" } }')
    assert engine.execute(run_id) == "failed"
    assert svc.journal.operations(run_id)[0]["failure"] == Failure.CONTRACT


def test_an_unavailable_environment_fails_the_call_before_it_starts(tmp_path):
    runner = FakeRunner({"main.py": lambda c: Exit(result={})})
    runner.environment_error = "uv sync failed"
    svc, run_id, engine = _process_run(tmp_path, runner)
    assert engine.execute(run_id) == "failed" and runner.started == []
    op = svc.journal.operations(run_id)[0]
    assert op["failure"] == Failure.ENVIRONMENT and op["error"] == "environment unavailable: uv sync failed"


def test_a_call_directory_that_cannot_be_fenced_is_one_line_naming_it(tmp_path):
    """Hostile review (a full disk before the first call): the fence of a call that could not start raised a
    bare OSError, an internal error naming no file. It is one line naming the directory; the call stays
    ``starting`` for resume to decide, and nothing of it ran."""
    import errno

    import pytest

    from workrun.core.errors import WorkrunError

    runner = FakeRunner({"main.py": lambda c: Exit(result={})})
    runner.environment_error = "uv sync failed"

    def full(call_dir):
        raise OSError(errno.ENOSPC, "No space left on device")

    runner.fence = full
    svc, run_id, engine = _process_run(tmp_path, runner)
    with pytest.raises(WorkrunError) as err:
        engine.execute(run_id)
    (op,) = svc.journal.operations(run_id)
    assert op["status"] == "starting" and runner.started == []
    assert err.value.file == op["call_dir"] and "No space left on device" in err.value.detail


# -- final failure ------------------------------------------------------------------


def _two_calls_then_failure(tmp_path, *, eval_run=False, compensation=True):
    runner = FakeRunner({"main.py": lambda c: Exit(result={"n": c.number}) if c.number < 2 else Exit(code=1)})
    svc = services(tmp_path, runner)
    proj = write_app_project(tmp_path / "projects", "step", compensation=compensation)
    spec = workflow({k: {"project": str(proj), "app": "step", **({"needs": [d]} if d else {})}
                     for k, d in (("a", None), ("b", "a"), ("c", "b"))})
    run_id = create_run(svc, spec, {}, eval_run=eval_run)
    return svc, run_id, Engine(svc, {"process": ProcessExecutor()}).execute(run_id)


def test_final_failure_writes_a_record_per_succeeded_call(tmp_path):
    svc, run_id, status = _two_calls_then_failure(tmp_path)
    assert status == "failed"
    comps = svc.journal.compensations(run_id)
    assert [(c["node_key"], c["status"]) for c in comps] == [("a", "pending"), ("b", "pending")]
    assert comps[0]["context"]["original_result"] == {"n": 0}


def test_a_call_without_a_compensation_entry_is_skipped(tmp_path):
    svc, run_id, _ = _two_calls_then_failure(tmp_path, compensation=False)
    assert {c["status"] for c in svc.journal.compensations(run_id)} == {"skipped"}


def test_an_evaluation_run_gets_no_compensation_records(tmp_path):
    svc, run_id, status = _two_calls_then_failure(tmp_path, eval_run=True)
    assert status == "failed" and svc.journal.compensations(run_id) == []


def test_executors_act_after_a_failed_run_only(tmp_path):
    svc = services(tmp_path)
    ok, bad = FakeExecutor(), FakeExecutor({"a": failing()})
    ok_id, _ = run(svc, workflow({"a": {}}), {"process": ok})
    bad_id, _ = run(svc, workflow({"a": {}}), {"process": bad})
    assert ok.after == [] and bad.after == [bad_id]


# -- stop ------------------------------------------------------------------------------


def test_a_stop_before_scheduling_runs_nothing(tmp_path):
    svc = services(tmp_path)
    fake = FakeExecutor()
    run_id = create_run(svc, workflow({"a": {}}), {})
    svc.journal.request_stop(run_id)
    assert Engine(svc, {"process": fake}).execute(run_id) == "stopped"
    assert fake.started == [] and nodes(svc, run_id) == {"a": ("skipped", False)}
    assert svc.runner.stopped_all


def test_a_stop_during_a_node_schedules_nothing_new(tmp_path):
    svc = services(tmp_path)

    def stop_here(job: NodeJob) -> NodeOutcome:
        job.svc.journal.request_stop(job.run_id)  # `workrun stop` from another terminal
        assert job.should_stop()
        return NodeOutcome("stopped", error="stopped by the user")

    fake = FakeExecutor({"a": stop_here})
    run_id, status = run(svc, workflow({"a": {}, "b": {"needs": ["a"]}}), {"process": fake})
    assert status == "stopped" and fake.started == ["a"]
    assert nodes(svc, run_id) == {"a": ("stopped", False), "b": ("skipped", False)}
    assert svc.journal.compensations(run_id) == [] and fake.after == [run_id]


@pytest.mark.parametrize("shape", ["chain", "fan-out"])
def test_a_stop_from_another_terminal_reaches_a_node_that_is_running(tmp_path, shape):
    """R-C9 while a node runs, whether the scheduler runs it itself (the only node that can run, issue 14) or
    hands it to a node thread: the engine sees the journal's stop flag within STOP_POLL_SECONDS and stops the
    run's processes (the node here waits for that, as a call is ended by the watchdog)."""
    svc = services(tmp_path)
    other = services(tmp_path)  # another terminal: its own journal connection
    seen: list[float] = []

    def wait_for_stop(job: NodeJob) -> NodeOutcome:
        if job.node.key == "a":
            other.journal.request_stop(job.run_id)
            t0 = time.monotonic()
            if job.svc.stop_event.wait(5):
                seen.append(time.monotonic() - t0)
                return NodeOutcome("stopped", error="stopped by the user")
            return NodeOutcome("failed", error="no stop seen")
        return NodeOutcome("succeeded", {})

    fake = FakeExecutor({"a": wait_for_stop, "b": wait_for_stop})
    nodes_of = {"a": {}, "b": {"needs": ["a"]}} if shape == "chain" else {"a": {}, "b": {}}
    run_id, status = run(svc, workflow(nodes_of), {"process": fake})
    assert status == "stopped" and seen and seen[0] < 2, seen
    assert svc.runner.stopped_all


def test_a_stop_asked_while_the_run_is_being_ended_does_not_turn_it_into_a_stopped_command(tmp_path, monkeypatch):
    """Break-it finding: once no node runs and the run is being ended (its final state written), a stop asked
    from another terminal no longer applies: the caller's thread stops looking, so the command does not
    report a succeeded run as stopped."""
    svc = services(tmp_path)
    fake = FakeExecutor()
    finish = Engine.finish

    def slow_finish(self, run_id, failed_node, **kwargs):
        status = finish(self, run_id, failed_node, **kwargs)
        self.svc.journal.request_stop(run_id)  # `workrun stop` lands just after the final state
        time.sleep(0.3)  # several STOP_POLL_SECONDS
        return status

    monkeypatch.setattr(Engine, "finish", slow_finish)
    run_id, status = run(svc, workflow({"a": {}}), {"process": fake})
    assert status == "succeeded" and not svc.stopping()


def test_a_stopped_call_is_not_retried(tmp_path):
    runner = FakeRunner({"main.py": lambda c: Exit(stopped=True)})
    svc, run_id, engine = _process_run(tmp_path, runner, {"on_failure": {"retry": {"attempts": 3, "backoff": 0}}})
    assert engine.execute(run_id) == "stopped"
    assert len(runner.started) == 1 and svc.journal.operations(run_id)[0]["failure"] == Failure.STOPPED


# -- resume decisions ------------------------------------------------------------------


def _resumed(tmp_path, prior_status, *, idempotent=False, failure=None):
    """A run whose node ``a`` was running with one call ``prior_status`` when the runner died."""
    runner = FakeRunner({"main.py": lambda c: Exit(result={"again": True})})
    svc, run_id, engine = _process_run(tmp_path, runner, idempotent=idempotent)
    svc.journal.start_node(run_id, "a", at=1.0)
    from workrun.effects.operations import call_app  # the real journaled call, through the fake runner
    from workrun.runner.apps import load_app
    proj = tmp_path / "projects" / "step"
    op = call_app(svc, project=proj, app=load_app(proj, "step"), input={}, run_id=run_id, node_key="a",
                  depends_on=[])
    if prior_status != "succeeded":  # rewrite it into the state found after a crash
        svc.journal._tx([("UPDATE operations SET status = ?, failure = ?, error = 'x' WHERE operation_id = ?",
                          (prior_status, failure, op["operation_id"]))], None)
    runner.started.clear()
    return svc, run_id, engine, runner


def test_resume_reuses_a_succeeded_call(tmp_path):
    svc, run_id, engine, runner = _resumed(tmp_path, "succeeded")
    assert engine.execute(run_id) == "succeeded" and runner.started == []
    assert svc.journal.nodes(run_id)[0]["result"] == {"again": True}


def test_resume_does_not_resend_an_unknown_outcome(tmp_path):
    svc, run_id, engine, runner = _resumed(tmp_path, "unknown", failure="unknown")
    assert engine.execute(run_id) == "failed" and runner.started == []


def test_resume_resends_an_unknown_outcome_when_the_app_is_idempotent(tmp_path):
    svc, run_id, engine, runner = _resumed(tmp_path, "unknown", idempotent=True, failure="unknown")
    assert engine.execute(run_id) == "succeeded" and len(runner.started) == 1


def test_a_call_the_runner_never_started_does_not_use_up_the_budget(tmp_path):
    svc, run_id, engine, runner = _resumed(tmp_path, "failed", failure="not_started")
    assert engine.execute(run_id) == "succeeded" and len(runner.started) == 1


@pytest.mark.parametrize("found, status", [(Outcome(exit_code=0), "succeeded"), (Outcome(exit_code=4), "failed"),
                                           (Outcome(unknown=True), "unknown"),
                                           (Outcome(not_started=True), "failed")])
def test_an_in_flight_call_is_settled_from_what_recovery_finds(tmp_path, found, status):
    runner = FakeRunner({"main.py": lambda c: Exit(result={"n": 1})})
    svc, run_id, _ = _process_run(tmp_path, runner)
    proj = tmp_path / "projects" / "step"
    from workrun.effects.operations import call_app
    from workrun.runner.apps import load_app

    op = call_app(svc, project=proj, app=load_app(proj, "step"), input={}, run_id=run_id, node_key="a",
                  depends_on=[])
    # the call was in flight when its owner (the runner that made it) died: no owner alive any more
    svc.journal._tx([("UPDATE operations SET status = 'running', result = NULL, owner_pid = NULL, "
                      "owner_start = NULL WHERE operation_id = ?", (op["operation_id"],))], None)
    (tmp_path / "data" / "calls" / op["operation_id"]).mkdir(parents=True)
    (tmp_path / "data" / "calls" / op["operation_id"] / "result.json").write_text('{"v": 1, "result": {"n": 1}}')
    runner.recovered[op["operation_id"]] = found
    (settled,) = settle_operations(svc, run_id)
    assert settled["status"] == status
    assert settled["failure"] == (None if status == "succeeded" else found.failure)


def test_recovery_gives_every_unclaimed_call_of_a_pass_one_shared_claim_window(tmp_path):
    """Break-it finding: calls left ``starting`` without a claim were each given CLAIM_WAIT seconds, one after
    the other (a resume of 8 such calls took 17 s); they were all launched before the runner died, so one window
    from the start of the pass is enough for all of them."""
    import time

    from workrun.runner.base import CLAIM_WAIT

    waits: list[float] = []

    class Unclaimed(FakeRunner):
        def recover(self, pid, proc_start, call_dir, deadline, *, claim_wait=CLAIM_WAIT):
            waits.append(claim_wait)
            time.sleep(claim_wait)  # what LocalRunner does when no claim comes: wait it out, then fence
            return Outcome(not_started=True)

    runner = Unclaimed({"main.py": lambda c: Exit(result={"n": 1})})
    svc, run_id, _ = _process_run(tmp_path, runner)
    proj = tmp_path / "projects" / "step"
    from workrun.effects.operations import call_app
    from workrun.runner.apps import load_app

    for _ in range(3):
        op = call_app(svc, project=proj, app=load_app(proj, "step"), input={}, run_id=run_id, node_key="a",
                      depends_on=[])
        svc.journal._tx([("UPDATE operations SET status = 'starting', result = NULL, pid = NULL, owner_pid = NULL, "
                          "owner_start = NULL WHERE operation_id = ?", (op["operation_id"],))], None)
    settled = settle_operations(svc, run_id)
    assert [s["status"] for s in settled] == ["failed"] * 3
    assert len(waits) == 3 and CLAIM_WAIT - 0.5 < waits[0] <= CLAIM_WAIT
    assert sum(waits) <= CLAIM_WAIT + 0.05, waits


@pytest.mark.parametrize("app", [Exit(result={"n": 1}), Exit(code=5, stderr="boom\n"), Exit(stopped=True),
                                 Exit(result=[1, 2])], ids=["succeeded", "exited", "stopped", "contract"])
def test_the_row_a_live_call_returns_is_the_journaled_row(tmp_path, app):
    """call_app returns the finished row without reading it back (issue 14): it must equal what was journaled."""
    runner = FakeRunner({"main.py": lambda c: app})
    svc, run_id, _ = _process_run(tmp_path, runner)
    proj = tmp_path / "projects" / "step"
    from workrun.effects.operations import call_app
    from workrun.runner.apps import load_app

    op = call_app(svc, project=proj, app=load_app(proj, "step"), input={"x": [1]}, run_id=run_id, node_key="a",
                  depends_on=["op_before"])
    assert op == svc.journal.operation(op["operation_id"])


def test_an_in_flight_call_whose_owner_lives_is_left_alone(tmp_path):
    """Issue 10, item 8: recovery settles only calls whose owner is gone (here: this very process owns it)."""
    runner = FakeRunner({"main.py": lambda c: Exit(result={"n": 1})})
    svc, run_id, _ = _process_run(tmp_path, runner)
    proj = tmp_path / "projects" / "step"
    from workrun.effects.operations import call_app
    from workrun.runner.apps import load_app

    op = call_app(svc, project=proj, app=load_app(proj, "step"), input={}, run_id=run_id, node_key="a",
                  depends_on=[])
    assert op["owner_pid"] == os.getpid() and op["owner_start"]
    svc.journal._tx([("UPDATE operations SET status = 'running', result = NULL WHERE operation_id = ?",
                      (op["operation_id"],))], None)
    runner.recovered[op["operation_id"]] = Outcome(exit_code=0)
    assert settle_operations(svc, run_id) == []
    assert svc.journal.operation(op["operation_id"])["status"] == "running"
    # once adopted by another owner, a second recoverer that saw the old owner cannot adopt it too
    assert svc.journal.adopt_operation(op["operation_id"], owner_pid=1, owner_start="x",
                                       seen_pid=op["owner_pid"], seen_start=op["owner_start"])
    assert not svc.journal.adopt_operation(op["operation_id"], owner_pid=2, owner_start="y",
                                           seen_pid=op["owner_pid"], seen_start=op["owner_start"])


# -- compensation: order and hold-back ---------------------------------------------------


def _failed_chain(tmp_path, compensate):
    runner = FakeRunner({"main.py": lambda c: Exit(result={"n": c.number}) if c.number < 2 else Exit(code=1),
                         "compensate.py": compensate})
    svc = services(tmp_path, runner)
    proj = write_app_project(tmp_path / "projects", "step")
    spec = workflow({k: {"project": str(proj), "app": "step", **({"needs": [d]} if d else {})}
                     for k, d in (("a", None), ("b", "a"), ("c", "b"))})
    run_id = create_run(svc, spec, {})
    assert Engine(svc, {"process": ProcessExecutor()}).execute(run_id) == "failed"
    runner.started.clear()
    return svc, run_id, runner


def test_compensation_runs_in_reverse_dependency_order(tmp_path):
    svc, run_id, runner = _failed_chain(tmp_path, lambda c: Exit(result={"undone": True}))
    comps = compensate_run(svc, run_id)
    assert [c["status"] for c in comps] == ["succeeded", "succeeded"]
    undone = [e["context"]["node_key"] for name, e in runner.started]
    assert undone == ["b", "a"]


def test_a_failed_compensation_holds_back_those_upstream(tmp_path):
    def undo(c: Call) -> Exit:
        return Exit(code=1) if c.envelope["context"]["node_key"] == "b" else Exit(result={})

    svc, run_id, runner = _failed_chain(tmp_path, undo)
    comps = {c["node_key"]: c for c in compensate_run(svc, run_id)}
    assert comps["b"]["status"] == "failed" and comps["a"]["status"] == "blocked"
    assert comps["a"]["held_back_by"] == [comps["b"]["compensation_id"]]
    assert "held back by b (" in comps["a"]["reason"]
    assert [e["context"]["node_key"] for _, e in runner.started] == ["b", "b"]  # 2 attempts, a never ran


def test_an_operators_retry_that_fails_again_never_releases_the_held_back_one(tmp_path):
    """SPEC §10 (conformance review): ``a`` is released only when ``b``'s retry succeeds; a retry that fails
    again left a journaled ``pending`` for ``a`` in between. A retry that succeeds then releases and runs it."""
    from workrun.repair.operator import retry

    fail = {"b": True}

    def undo(c: Call) -> Exit:
        return Exit(code=1) if fail.get(c.envelope["context"]["node_key"]) else Exit(result={})

    svc, run_id, runner = _failed_chain(tmp_path, undo)
    comps = {c["node_key"]: c for c in compensate_run(svc, run_id)}
    a, b = comps["a"]["compensation_id"], comps["b"]["compensation_id"]
    said_before = len(svc.journal.messages(run_id))
    assert retry(svc, b)["status"] == "failed"
    assert svc.journal.compensation(a)["status"] == "blocked"
    texts = [m["text"] for m in svc.journal.messages(run_id)[said_before:]]
    assert not [t for t in texts if t.startswith(f"compensation {a}") and ": pending" in t], texts
    fail["b"] = False
    assert retry(svc, b)["status"] == "succeeded"
    assert svc.journal.compensation(a)["status"] == "succeeded"  # released, then run


def test_resolving_the_holder_releases_the_held_back_one(tmp_path):
    svc, run_id, _ = _failed_chain(tmp_path, lambda c: Exit(code=1) if c.envelope["context"]["node_key"] == "b"
                                   else Exit(result={}))
    comps = {c["node_key"]: c for c in compensate_run(svc, run_id)}
    svc.journal.set_compensation_status(comps["b"]["compensation_id"], "succeeded", reason="by hand", at=1.0,
                                        seen="failed")
    _, _, released = refresh_holds(svc, run_id)
    assert released == {comps["a"]["compensation_id"]}
    assert svc.journal.compensation(comps["a"]["compensation_id"])["status"] == "pending"


def test_an_unavailable_environment_leaves_the_compensation_pending(tmp_path):
    svc, run_id, runner = _failed_chain(tmp_path, lambda c: Exit(result={}))
    runner.environment_error = "offline"
    comps = compensate_run(svc, run_id)
    assert [(c["status"], c["reason"]) for c in comps if c["node_key"] == "b"] == [
        ("pending", "environment unavailable: offline")]
    assert runner.started == []


def test_an_edit_between_two_calls_in_one_process_changes_the_fingerprint_and_config(tmp_path, monkeypatch):
    """The per-process caches (issue 14) never hide a change: the second call journals the new code."""
    from workrun.core import filestamps
    from workrun.effects.operations import call_app
    from workrun.runner.apps import load_app

    runner = FakeRunner({"main.py": lambda c: Exit(result={"n": 1})})
    svc, run_id, _ = _process_run(tmp_path, runner)
    proj = tmp_path / "projects" / "step"
    monkeypatch.setattr(filestamps, "RACY_SECONDS", 0.05)  # the files count as settled soon: the caches are used
    time.sleep(0.1)

    def call() -> dict:
        op = call_app(svc, project=proj, app=load_app(proj, "step"), input={}, run_id=run_id, node_key="a",
                      depends_on=[])
        return svc.journal.operation(op["operation_id"])

    first = call()
    assert call()["fingerprint"] == first["fingerprint"]
    (proj / "main.py").write_text((proj / "main.py").read_text() + "#\n")
    (proj / "pyproject.toml").write_text((proj / "pyproject.toml").read_text() + "\n")
    second = call()
    assert first["fingerprint"] != second["fingerprint"]
    assert first["fingerprint_files"]["main.py"] != second["fingerprint_files"]["main.py"]
    assert first["fingerprint_files"]["pyproject.toml"] != second["fingerprint_files"]["pyproject.toml"]


def test_a_ticket_resumed_by_another_process_during_the_run_lets_its_dependents_run(tmp_path):
    """The scheduler reads only the rows its own threads changed while no other connection wrote (issue 14);
    a person resuming a ticket from another process (another connection) is still seen at the next look."""
    from workrun.effects.ticket_records import event_row
    from workrun.journal.sqlite import SqliteJournal

    svc = services(tmp_path)
    release = threading.Event()

    def slow(job: NodeJob) -> NodeOutcome:
        assert release.wait(60)
        return NodeOutcome("succeeded", {"node": "slow"})

    fake = FakeExecutor({"t": failing(), "slow": slow})
    spec = workflow({"t": {"on_failure": "notify"}, "after": {"needs": ["t"]}, "slow": {}})
    run_id = create_run(svc, spec, {})
    done: list[str] = []
    engine = threading.Thread(target=lambda: done.append(Engine(svc, {"process": fake}).execute(run_id)))
    engine.start()
    other = SqliteJournal(tmp_path / "journal.sqlite3")  # the operator's `workrun tickets resume`
    try:
        end = time.monotonic() + 30
        while not other.tickets(run_id) and time.monotonic() < end:
            time.sleep(0.01)
        ticket = other.tickets(run_id)[0]
        time.sleep(0.3)  # the scheduler has looked again (every 0.1 s) since the ticket opened
        other.resume_ticket(ticket["ticket_id"], {"by": "hand"}, event_row(ticket["ticket_id"], run_id, "op",
                            "resume", {}, time.time()), at=time.time())
        end = time.monotonic() + 30
        while "after" not in fake.started and time.monotonic() < end:
            time.sleep(0.01)
    finally:
        release.set()
        engine.join(60)
        other.close()
    assert "after" in fake.started and done == ["succeeded"]
    assert fake.jobs["after"].context["nodes"]["t"] == {"result": {"by": "hand"}}


@pytest.mark.parametrize("fallback_was", ["running", "succeeded"])
def test_a_fallback_left_by_a_dead_runner_runs_at_most_once_more_and_resume_finishes(tmp_path, fallback_was):
    """A runner killed while a fallback ran (or just after it ended, its primary not yet ended): resume drives
    the fallback only through its primary (never also as a node of its own), and one that ended is not run
    again; the run finishes (issue 14 break-it: it ran twice, or every resume failed on a transition)."""
    svc = services(tmp_path)
    fake = FakeExecutor({"a": failing(), "fb": lambda job: NodeOutcome("succeeded", {"x": "again"})})
    spec = workflow({"a": {"on_failure": {"fallback": "fb"}}, "fb": {}, "b": {"input": {"v": "{{ nodes.a.result.x }}"},
                                                                               "needs": ["a"]}})
    run_id = create_run(svc, spec, {})
    svc.journal.start_node(run_id, "a", at=1.0)
    svc.journal.start_node(run_id, "fb", at=2.0)
    if fallback_was == "succeeded":
        svc.journal.finish_node(run_id, "fb", status="succeeded", handled=False, result={"x": "first"}, at=3.0)
    assert Engine(svc, {"process": fake}).execute(run_id) == "succeeded"
    assert fake.started.count("fb") == (1 if fallback_was == "running" else 0)
    want = "again" if fallback_was == "running" else "first"
    assert nodes(svc, run_id)["a"] == ("failed", True)
    assert fake.jobs["b"].context["nodes"]["a"] == {"result": {"x": want}}


def test_after_run_asks_only_the_kinds_the_workflow_uses(tmp_path):
    """Issue 27: a failed run of process nodes asks no other kind's executor (their modules stay unloaded)."""
    from _kit.fakes import FakeExecutor, failing, services, workflow
    from workrun.engine.driver import Engine, create_run

    process = FakeExecutor(behaviours={"a": failing()})
    other = FakeExecutor()
    svc = services(tmp_path)
    run_id = create_run(svc, workflow({"a": {}}), {})
    engine = Engine(svc, {"process": process, "remote_agent": other})
    assert engine.execute(run_id) == "failed"
    engine.after_run(run_id)
    assert set(process.after) == {run_id} and other.after == []
    svc.close()



def test_a_run_just_created_is_driven_from_its_spec_and_any_other_from_its_journaled_snapshot(tmp_path):
    """Issue 33: the spec a run was created from in this process is not validated again from the journal (its
    snapshot is compared instead); a run created elsewhere, or whose snapshot differs, is validated from the
    journal, which stays the source of truth."""
    from workrun.engine import driver

    svc = services(tmp_path)
    spec = workflow({"b": {"needs": ["a"]}, "a": {}})
    first = create_run(svc, spec, {})
    assert driver._spec_of(svc.journal.run(first)) is spec
    second = create_run(svc, workflow({"a": {}}), {})  # only the last run created is kept
    assert driver._spec_of(svc.journal.run(first)) is not spec
    assert driver._spec_of(svc.journal.run(first)) == spec
    changed = {**svc.journal.run(second), "spec": {**svc.journal.run(second)["spec"], "name": "other"}}
    assert driver._spec_of(changed).name == "other"
