"""Property tests of the engine's pure scheduler (issue 27): on random workflows (DAGs) and random node states,
:class:`ReadySet` offers exactly the nodes that may start, in workflow order and within the free slots, and a
whole run driven through it starts every node once, each after all its dependencies."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from workrun.core.outcomes import NodeOutcome
from workrun.engine.scheduler import ReadySet, Verdict

STATUSES = ("pending", "running", "succeeded", "failed", "stopped", "skipped", "waiting")


@st.composite
def workflows(draw):
    """``(deps, standby)``: nodes n0..nk in workflow order, each depending on some earlier ones (acyclic)."""
    n = draw(st.integers(1, 9))
    keys = [f"n{i}" for i in range(n)]
    deps = {k: tuple(sorted(draw(st.sets(st.sampled_from(keys[:i]), max_size=3)))) if i else ()
            for i, k in enumerate(keys)}
    standby = draw(st.sets(st.sampled_from(keys), max_size=2))
    return deps, standby


def _row(key, status, handled=0):
    return {"node_key": key, "status": status, "handled": handled}


@settings(max_examples=300, deadline=None)
@given(workflows(), st.data())
def test_ready_offers_exactly_the_startable_nodes_in_order_within_the_slots(wf, data):
    deps, standby = wf
    known = {k: _row(k, data.draw(st.sampled_from(STATUSES)), data.draw(st.sampled_from((0, 1)))) for k in deps}
    active = data.draw(st.sets(st.sampled_from(list(deps)), max_size=3))
    slots = data.draw(st.integers(0, 5))
    plan = ReadySet.of(deps, standby)
    got = plan.ready(known, active, slots)
    startable = [k for k in deps if known[k]["status"] == "pending" and k not in standby and k not in active
                 and all(known[d]["status"] == "succeeded" or known[d]["handled"] for d in deps[k])]
    assert got == startable[:slots]  # the first ones in workflow order, at most the free slots
    assert plan.ready(known, active, slots) == startable[slots:2 * slots]  # the rest come next time


@settings(max_examples=200, deadline=None)
@given(workflows(), st.data())
def test_a_run_driven_through_it_starts_every_node_once_after_its_dependencies(wf, data):
    deps, _ = wf
    plan = ReadySet.of(deps, ())
    known = {k: _row(k, "pending") for k in deps}
    running: list[str] = []
    started: list[str] = []
    concurrency = data.draw(st.integers(1, 4))
    while True:
        for key in plan.ready(known, running, concurrency - len(running)):
            assert all(known[d]["status"] == "succeeded" for d in deps[key])
            known[key] = _row(key, "running")
            running.append(key)
            started.append(key)
        assert len(running) <= concurrency
        if not running:
            break
        done = running.pop(data.draw(st.integers(0, len(running) - 1)))  # any running node may end first
        known[done] = _row(done, "succeeded")
        plan.moved([done])
    assert sorted(started) == sorted(deps)  # every node started, none twice


def test_a_fallback_is_never_offered_and_a_handled_failure_releases_its_dependents():
    plan = ReadySet.of({"a": (), "fb": (), "b": ("a",)}, {"fb"})
    known = {"a": _row("a", "failed", handled=1), "fb": _row("fb", "pending"), "b": _row("b", "pending")}
    assert plan.ready(known, (), 5) == ["b"]


def test_the_verdict_keeps_the_first_failure_and_an_injected_one():
    v = Verdict(fail_after="b")
    v.node_ended("a", NodeOutcome("succeeded", {}))
    assert v.starts_more and v.failed_node is None
    v.node_ended("b", NodeOutcome("succeeded", {}))
    assert v.failed_node == "b" and not v.starts_more  # as if b's successor had failed (R-V1)
    v.node_ended("c", NodeOutcome("failed", error="boom"))
    assert v.failed_node == "b" and v.take_ended() == ["a", "b", "c"] and v.take_ended() == []
    t = Verdict()
    t.node_ended("x", NodeOutcome("terminated", error="policy"))
    assert t.terminated and t.failed_node is None and not t.starts_more


def test_a_verdict_resumed_from_the_journal_starts_nothing_new_after_a_failure_before_the_restart():
    """Found by a hostile test: killed right after a node's failure was journaled, ``resume`` started an
    independent node that the same run without the crash skips (R-W3)."""
    known = {"a": _row("a", "succeeded"), "x": _row("x", "failed"), "y": _row("y", "pending")}
    v = Verdict()
    v.resumed(known)
    assert v.failed_node == "x" and not v.starts_more
    handled = Verdict()
    handled.resumed({"a": _row("a", "failed", handled=1), "y": _row("y", "pending")})  # continue / fallback
    assert handled.failed_node is None and handled.starts_more
    injected = Verdict(fail_after="a")
    injected.resumed({"a": _row("a", "succeeded"), "y": _row("y", "pending")})
    assert injected.failed_node == "a"
