"""Claims of single App processes on a real PostgreSQL journal (R-S2, R-R3): node calls and compensation
attempts queued by a run's scheduler, claimed by executors with ``SELECT … FOR UPDATE SKIP LOCKED``."""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest

CALL = {"project": "/p", "entry": "main.py", "envelope": {"kind": "process", "input": {}}, "warm": None,
        "snapshot": None, "offline": False}


def _queue(j, call_id, run_id="run_1", at=0.0, timeout=60.0):
    assert j.dispatch_call(call_id, run_id, CALL, at)
    j.set_call_timeout(call_id, timeout)


@pytest.fixture
def pg(pg_url, monkeypatch, tmp_path):
    from workrun.journal import open_journal

    monkeypatch.setenv("WORKRUN_JOURNAL", pg_url)
    journals = [open_journal(tmp_path) for _ in range(2)]
    yield journals
    for j in journals:
        j.close()


def test_racing_executors_never_get_the_same_call(pg_url, monkeypatch, tmp_path):
    from workrun.journal import open_journal

    monkeypatch.setenv("WORKRUN_JOURNAL", pg_url)
    setup = open_journal(tmp_path)
    for i in range(40):
        _queue(setup, f"op_{i:03d}", at=float(i))
    won: dict[str, list[str]] = {}
    mutex = threading.Lock()

    def executor(name: str) -> None:
        j = open_journal(tmp_path)
        while True:
            got = j.claim_calls(name, "h", 100.0, 60.0, 3, "/x/exec-")
            if not got:
                break
            with mutex:
                for row in got:
                    won.setdefault(row["call_id"], []).append(name)
                    assert row["exec_dir"] == "/x/exec-" + row["call_id"] + ".1" and row["call"] == CALL
        j.close()

    threads = [threading.Thread(target=executor, args=(f"wkr_{n}",)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(won) == [f"op_{i:03d}" for i in range(40)]
    assert all(len(v) == 1 for v in won.values()), won
    assert {r["status"] for r in setup.dispatched_calls("run_1")} == {"claimed"}
    setup.close()


def test_oldest_first_and_by_run(pg):
    a, _ = pg
    _queue(a, "op_late", "run_2", 5.0)
    _queue(a, "op_early", "run_1", 1.0)
    assert [r["call_id"] for r in a.claim_calls("wkr_a", "h", 10.0, 30.0, 1, "/x/", ["run_2"])] == ["op_late"]
    _queue(a, "op_mid", "run_1", 3.0)
    a.dispatch_call("op_no_timeout_yet", "run_1", CALL, 0.5)  # its scheduler has not handed it out yet
    assert [r["call_id"] for r in a.claim_calls("wkr_a", "h", 10.0, 30.0, 5, "/x/")] == ["op_early", "op_mid"]
    assert a.dispatched_call("op_no_timeout_yet")["status"] == "queued"


def test_an_expired_claim_is_not_run_again_and_its_loser_cannot_store(pg):
    """The executor's lease passes: no other executor claims the call again; only the scheduler's R-R3
    decision on the expired claim is stored, and the late executor's outcome is refused (fencing)."""
    a, b = pg
    _queue(a, "op_1")
    [row] = a.claim_calls("wkr_a", "host-a", 10.0, 5.0, 1, "/x/")
    assert a.call_started("op_1", "wkr_a", 4242, None, 70.0)
    assert a.renew_calls("wkr_a", 12.0, 5.0, ["op_1"]) == {"op_1": False}  # lease until 17
    assert b.settle_call("op_1", "wkr_a", {"unknown": True}, {}, 16.0) is False  # lease still live
    assert b.claim_calls("wkr_b", "host-b", 30.0, 5.0, 5, "/y/") == []  # expired, but never re-claimed
    assert b.settle_call("op_1", "wkr_a", {"unknown": True}, {}, 30.0) is True  # the scheduler decides
    assert a.finish_call("op_1", "wkr_a", {"exit_code": 0}, {"result": {"x": 1}}, 31.0) is False
    assert a.renew_calls("wkr_a", 31.0, 5.0, ["op_1"]) == {}  # the executor finds out it lost the claim
    got = a.dispatched_call("op_1")
    assert (got["status"], got["decided_by"], got["outcome"], got["pid"]) == ("done", "takeover",
                                                                              {"unknown": True}, 4242)


def test_a_passed_call_lease_is_not_renewed_and_its_outcome_not_stored(pg):
    """R-F2 (break-it finding): a worker woken after its call's lease passed cannot renew it back to life (the
    run's new scheduler may be deciding it right now) nor store its outcome; the scheduler's decision stands."""
    a, b = pg
    _queue(a, "op_1")
    a.claim_calls("wkr_a", "host-a", 10.0, 5.0, 1, "/x/")  # lease until 15
    assert a.renew_calls("wkr_a", 20.0, 5.0, ["op_1"]) == {}  # woken at 20: too late, the call is lost
    assert a.finish_call("op_1", "wkr_a", {"exit_code": 0}, {}, 20.5) is False
    assert a.dispatched_call("op_1")["lease_until"] == 15.0  # not one write
    assert b.settle_call("op_1", "wkr_a", {"exit_code": 0}, {}, 21.0) is True


def test_a_fenced_call_never_starts(pg):
    a, b = pg
    _queue(a, "op_1")
    assert b.fence_call("op_1", "run_1", 1.0) is True
    assert a.claim_calls("wkr_a", "h", 2.0, 5.0, 5, "/x/") == []
    assert a.dispatch_call("op_1", "run_1", CALL, 3.0) is False  # a late dispatch cannot revive it
    assert b.fence_call("op_2", "run_1", 4.0) is True  # fenced before it was ever queued
    assert a.dispatch_call("op_2", "run_1", CALL, 5.0) is False
    _queue(a, "op_3", at=6.0)
    a.claim_calls("wkr_a", "h", 7.0, 5.0, 5, "/x/")
    assert b.fence_call("op_3", "run_1", 8.0) is False  # claimed: too late to fence, it is decided by R-R3
    assert a.finish_call("op_3", "wkr_a", {"exit_code": 0}, {}, 9.0) is True
    assert a.finish_call("op_3", "wkr_a", {"exit_code": 1}, {}, 9.5) is False  # stored once
    assert [r["status"] for r in a.dispatched_calls("run_1")] == ["fenced", "fenced", "done"]


def _scheduler_runner(journal, tmp_path):
    from workrun.cluster.dispatch import DispatchRunner
    from workrun.runner.local import LocalRunner

    return DispatchRunner(journal, LocalRunner(tmp_path / "sched"), "run_1")


@pytest.mark.parametrize("case", ["same-host-exit-record", "same-host-never-started", "other-host", "stop-queued"])
def test_scheduler_decides_an_expired_claim_by_r_r3(pg, tmp_path, case):
    """A restarted scheduler (``recover``) decides a call from its claim: an expired executor's on this
    host by its exit record; one whose process never started is fenced in the dead executor's directory
    and queued again (another executor runs it, in a fresh directory); on another host whose directory is
    out of reach: ``unknown``. ``stop`` (``end``) fences a queued call: it never starts."""
    from workrun.runner.base import Outcome

    a, b = pg
    exec_root = str(tmp_path / "exec") + "/"
    exec_dir = tmp_path / "exec" / "op_1.1"
    _queue(a, "op_1")
    if case != "stop-queued":
        host = socket.gethostname() if case.startswith("same-host") else "another-machine"
        a.claim_calls("wkr_a", host, 1.0, 1.0, 1, exec_root)
        exec_dir.mkdir(parents=True)
        if case != "same-host-never-started":
            (exec_dir / "claim").write_text("started 999999999\n")  # its supervisor, long gone
            (exec_dir / "exit.json").write_text(json.dumps({"exit_code": 0, "signal": None}))
            (exec_dir / "result.json").write_text(json.dumps({"v": 1, "result": {"done": True}}))
            a.call_started("op_1", "wkr_a", 999999999, None, 61.0)
        if case == "other-host":
            exec_dir.rename(tmp_path / "out-of-reach")
    runner = _scheduler_runner(b, tmp_path)
    call_dir = tmp_path / "sched" / "calls" / "op_1"
    if case == "stop-queued":
        b.dispatch_call("op_2", "run_1", CALL, 0.0)  # its scheduler died before journaling it as running
        assert runner.recover(None, None, tmp_path / "sched" / "calls" / "op_2", None) == Outcome(not_started=True)
        assert b.dispatched_call("op_2")["status"] == "fenced"
        assert runner.end(None, None, call_dir, None) == Outcome(stopped=True)
        assert b.dispatched_call("op_1")["status"] == "fenced"
        assert a.claim_calls("wkr_a", "h", 2.0, 5.0, 5, exec_root) == []
        return
    got: list[Outcome] = []
    waiter = threading.Thread(target=lambda: got.append(runner.recover(None, None, call_dir, None)))
    waiter.start()
    if case == "same-host-never-started":
        again = []
        for _ in range(200):
            # a live claim by the scheduler's clock (real time), so its recovery does not take it over again
            again = a.claim_calls("wkr_c", "h", time.time(), 600.0, 1, exec_root)
            if again:
                break
            waiter.join(0.05)
        assert again and again[0]["exec_dir"] == exec_root + "op_1.2"  # a fresh directory for a fresh claim
        assert (exec_dir / "claim").read_text().startswith("abandoned")  # it can never start in the old one
        assert a.finish_call("op_1", "wkr_c", {"exit_code": 0}, {"result": {"by": "c"}}, time.time())
    waiter.join(30)
    expected = {"same-host-exit-record": Outcome(exit_code=0), "same-host-never-started": Outcome(exit_code=0),
                "other-host": Outcome(unknown=True)}[case]
    assert got == [expected]
    row = b.dispatched_call("op_1")
    assert row["status"] == "done"
    if case == "same-host-exit-record":
        assert runner.collect(call_dir).result == {"done": True} and row["decided_by"] == "takeover"
        assert not exec_dir.exists()
    if case == "same-host-never-started":
        assert runner.collect(call_dir).result == {"by": "c"} and row["claims"] == 2


class _Beat:
    """The heartbeat's part an executor uses (its id, host, lease and the claims it renews)."""

    worker_id, host, lease = "wkr_x", socket.gethostname(), 30.0

    def __init__(self):
        self.calls: set[str] = set()

    def hold_call(self, call_id):
        self.calls.add(call_id)

    def drop_call(self, call_id):
        self.calls.discard(call_id)


def test_an_executor_that_cannot_prepare_the_environment_stores_a_failure(pg, tmp_path):
    """The call was journaled as running by its scheduler, so an executor that cannot start it reports a
    failed call saying why (an attempt is then retried after its backoff), never ``not_started``."""
    import time

    from workrun.cluster.dispatch import Executors

    a, _ = pg
    a.dispatch_call("cmp_1-1", "run_1", {**CALL, "project": str(tmp_path / "no-such-project")}, 0.0)
    a.set_call_timeout("cmp_1-1", 30.0)
    beat = _Beat()
    executors = Executors(tmp_path / "worker", beat, 1, lambda: ["run_1"]).start()
    try:
        for _ in range(300):
            row = a.dispatched_call("cmp_1-1")
            if row["status"] == "done":
                break
            time.sleep(0.1)
    finally:
        executors.drain()
    assert row["status"] == "done" and row["worker_id"] == "wkr_x" and row["decided_by"] == "executor"
    assert row["outcome"]["exit_code"] is None and not row["outcome"]["not_started"]
    assert row["collected"]["stderr_tail"].startswith("environment unavailable on worker wkr_x")
    assert beat.calls == set()
