"""Threads for a run's nodes and a run's compensation attempts (R-W1, R-C3: independent ones at once).

What the engine asks of a thread pool is small: hand a call to a thread (at most ``size`` at once), wait for
the first of several calls to end, take its result. :mod:`concurrent.futures` does that and more, but importing
it imports :mod:`logging`, and with it ``traceback``, ``tokenize``, ``textwrap`` and ``linecache``: ~6 ms of every
``workrun run``'s start-up (issue 33, SPEC §24). The semantics kept from its ``ThreadPoolExecutor``: threads are
started as calls come, up to ``size``; a call's exception (any ``BaseException``) is raised by
:meth:`Task.result`; leaving the ``with`` block waits for every call handed in, queued ones included.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar

__all__ = ["Pool", "Task"]

T = TypeVar("T")


class Task(Generic[T]):
    """One call handed to a :class:`Pool`; hashable (by identity), so it can key a dict."""

    __slots__ = ("_error", "_ended", "_value")

    def __init__(self) -> None:
        self._ended = False
        self._value: Any = None
        self._error: BaseException | None = None

    def done(self) -> bool:
        """True once the call returned or raised."""
        return self._ended

    def result(self) -> T:
        """The call's return value, once it ended (:meth:`Pool.wait_first` says when).

        Raises:
            RuntimeError: the call has not ended yet; BaseException: what the call raised.
        """
        if not self._ended:
            raise RuntimeError("the call has not ended yet")
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[no-any-return,unused-ignore]


class Pool:
    """At most ``size`` threads named ``name-N``, each running the calls handed to :meth:`submit` in turn.

    Use it as a context manager: leaving the block waits for every call handed in (queued ones run first), then
    the threads end. A call never runs after that.

    Args:
        size: the most calls running at once (>= 1).
        name: the threads' name prefix (``workrun-node``, ``workrun-comp``).
    """

    def __init__(self, size: int, name: str) -> None:
        self._size = max(1, int(size))
        self._name = name
        self._lock = threading.Lock()  # guards everything below
        self._work_came = threading.Condition(self._lock)
        self._call_ended = threading.Condition(self._lock)
        self._queue: deque[tuple[Task[Any], Callable[..., Any], tuple[Any, ...]]] = deque()
        self._threads: list[threading.Thread] = []
        self._idle = 0  # threads waiting for work
        self._closing = False

    def __enter__(self) -> Pool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def submit(self, fn: Callable[..., T], *args: Any) -> Task[T]:
        """Hand ``fn(*args)`` to a thread (a new one while fewer than ``size`` run and none is idle).

        Raises:
            RuntimeError: the pool is shut down.
        """
        task: Task[T] = Task()
        with self._lock:
            if self._closing:
                raise RuntimeError("the pool is shut down")
            self._queue.append((task, fn, args))
            if len(self._queue) > self._idle and len(self._threads) < self._size:  # more calls than idle threads
                thread = threading.Thread(target=self._work, name=f"{self._name}-{len(self._threads)}")
                self._threads.append(thread)
                thread.start()
            self._work_came.notify()
        return task

    def wait_first(self, tasks: Iterable[Task[Any]], timeout: float) -> set[Task[Any]]:
        """Wait up to ``timeout`` seconds until one of ``tasks`` (this pool's) has ended; return those that have
        (an empty set when none did in time; every ended one when some had already)."""
        wanted = list(tasks)
        with self._lock:
            ended = {t for t in wanted if t._ended}
            if not ended and wanted:
                self._call_ended.wait_for(lambda: any(t._ended for t in wanted), timeout)
                ended = {t for t in wanted if t._ended}
        return ended

    def shutdown(self) -> None:
        """Wait for every call handed in (queued ones run first), then end the threads."""
        with self._lock:
            self._closing = True
            self._work_came.notify_all()
            threads = list(self._threads)
        for thread in threads:
            thread.join()

    def _work(self) -> None:
        while True:
            with self._lock:
                while not self._queue:
                    if self._closing:  # nothing left
                        return
                    self._idle += 1
                    self._work_came.wait()
                    self._idle -= 1
                task, fn, args = self._queue.popleft()
            try:
                value = fn(*args)
            except BaseException as exc:  # the caller's to see (Task.result), as concurrent.futures does
                with self._lock:
                    task._error, task._ended = exc, True
                    self._call_ended.notify_all()
                del exc
                continue
            with self._lock:
                task._value, task._ended = value, True
                self._call_ended.notify_all()
