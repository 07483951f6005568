"""``workrun.core.pool`` (issue 33): the engine's thread pool, in place of concurrent.futures (whose logging
import cost every run ~6 ms). What the engine relies on: at most ``size`` calls at once, a call's result or
exception through its task, waiting for the first of several, and a ``with`` block that waits for every call."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

from workrun.core.pool import Pool


def test_results_and_exceptions_come_back_through_the_task():
    with Pool(2, "t") as pool:
        ok = pool.submit(lambda a, b: a + b, 2, 3)
        bad = pool.submit(lambda: 1 / 0)
        while len(pool.wait_first([ok, bad], timeout=1.0)) < 2:
            pass
    assert ok.done() and ok.result() == 5
    with pytest.raises(ZeroDivisionError):
        bad.result()


def test_a_task_not_ended_has_no_result_yet():
    gate = threading.Event()
    with Pool(1, "t") as pool:
        task = pool.submit(gate.wait)
        assert pool.wait_first([task], timeout=0.05) == set() and not task.done()
        with pytest.raises(RuntimeError):
            task.result()
        gate.set()
        assert pool.wait_first([task], timeout=5.0) == {task}


def test_at_most_size_calls_run_at_once_and_each_gets_a_thread_while_there_are_fewer():
    running, most, lock = [0], [0], threading.Lock()
    names: set[str] = set()

    def call() -> None:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
            names.add(threading.current_thread().name)
        time.sleep(0.05)
        with lock:
            running[0] -= 1

    with Pool(3, "workrun-node") as pool:
        tasks = [pool.submit(call) for _ in range(9)]
    assert all(t.done() for t in tasks)
    assert most[0] == 3 and names == {"workrun-node-0", "workrun-node-1", "workrun-node-2"}


def test_calls_submitted_together_run_together():
    """Two calls handed in at once to a pool of two run at the same time (an idle thread is not counted twice)."""
    barrier = threading.Barrier(2, timeout=5)
    with Pool(2, "t") as pool:
        first = pool.submit(barrier.wait)
        pool.wait_first([first], timeout=0.01)
        second = pool.submit(barrier.wait)
        third = pool.submit(barrier.wait)
        fourth = pool.submit(barrier.wait)
    for task in (first, second, third, fourth):
        task.result()  # a BrokenBarrierError had one waited alone


def test_leaving_the_block_waits_for_queued_calls_and_no_call_runs_after():
    done: list[int] = []
    with Pool(1, "t") as pool:
        for i in range(5):
            pool.submit(lambda i=i: (time.sleep(0.01), done.append(i)))
    assert done == [0, 1, 2, 3, 4]
    with pytest.raises(RuntimeError):
        pool.submit(print)


def test_importing_the_engine_imports_neither_concurrent_futures_nor_logging():
    probe = ("import sys\nimport workrun.engine.driver, workrun.compensation.run\n"
             "print(sorted(m for m in ('concurrent.futures', 'logging', 'tokenize') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
