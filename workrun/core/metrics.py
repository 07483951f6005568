"""Prometheus metrics of a runner or worker (SPEC §20, R-F4), served on ``127.0.0.1:PORT/metrics``.

Off unless :func:`serve` was called (``workrun worker --metrics-port N``; ``workrun run``/``resume`` with
``WORKRUN_METRICS_PORT``): every ``count_*`` function is then a no-op and ``prometheus_client`` is never
imported. Families:

- ``workrun_runs_finished_total{status}``: runs this process ended (``succeeded``, ``failed``, ``stopped``,
  ``terminated``);
- ``workrun_calls_total{kind,outcome}``: operations (node and tool calls) by kind (``process``, ``tool``,
  ``http``) and outcome (``succeeded``, ``failed``, ``unknown``, ``stopped``);
- ``workrun_call_duration_seconds{kind}``: their durations (histogram);
- ``workrun_attempts_total{kind,outcome}``: compensation attempts by kind (a script's App kind, ``process`` or
  ``tool``, as calls; an action's, ``http``, ``sms``, ``email``, ``update_data``) and outcome;
- ``workrun_compensations_finished_total{status}``: compensations that reached ``succeeded``, ``failed``,
  ``unknown`` or ``skipped`` (recorded without anything to run), or became ``blocked`` (held back, or a code
  change) — each a status a person may need to know of;
- ``workrun_dispatch_queue_depth``: calls queued on a shared journal and not claimed (gauge);
- ``workrun_claims_expired_total``: expired run claims this worker took over;
- ``workrun_db_reconnects_total``: reconnections to the journal's database.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

__all__ = ["count_attempt", "count_call", "count_claim_expired", "count_compensation", "count_reconnect",
           "count_run", "enabled", "queue_depth_from", "serve"]

_LOCK = threading.Lock()
_METRICS: dict[str, Any] = {}
_SERVED: dict[tuple[str, int], Any] = {}


def enabled() -> bool:
    """True once :func:`serve` made the metrics."""
    return bool(_METRICS)


def _make() -> None:
    from prometheus_client import Counter, Gauge, Histogram

    _METRICS.update(
        runs=Counter("workrun_runs_finished", "Runs ended by this process, by status.", ["status"]),
        calls=Counter("workrun_calls", "Operations (node and tool calls) by kind and outcome.", ["kind", "outcome"]),
        duration=Histogram("workrun_call_duration_seconds", "Duration of operations in seconds, by kind.",
                           ["kind"], buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)),
        attempts=Counter("workrun_attempts", "Compensation attempts by kind and outcome.", ["kind", "outcome"]),
        comps=Counter("workrun_compensations_finished", "Compensations that reached a final status.", ["status"]),
        queue=Gauge("workrun_dispatch_queue_depth", "Calls queued on the shared journal and not claimed."),
        expired=Counter("workrun_claims_expired", "Expired run claims this worker took over."),
        reconnects=Counter("workrun_db_reconnects", "Reconnections to the journal's database."),
    )


def serve(port: int, host: str = "127.0.0.1") -> None:
    """Make the metrics (once per process) and serve them on ``http://HOST:PORT/metrics`` from a daemon thread.

    Raises:
        OSError: the address cannot be bound (in use, not allowed).
    """
    from prometheus_client import start_http_server

    with _LOCK:
        if not _METRICS:
            _make()
        if (host, port) not in _SERVED:
            _SERVED[(host, port)] = start_http_server(port, addr=host)


def count_run(status: str) -> None:
    """A run ended with ``status``."""
    if _METRICS:
        _METRICS["runs"].labels(status=status).inc()


def count_call(kind: str, outcome: str, seconds: float | None) -> None:
    """An operation of ``kind`` ended with ``outcome`` after ``seconds`` (None: not known)."""
    if _METRICS:
        _METRICS["calls"].labels(kind=kind, outcome=outcome).inc()
        if seconds is not None and seconds >= 0:
            _METRICS["duration"].labels(kind=kind).observe(seconds)


def count_attempt(kind: str, outcome: str) -> None:
    """A compensation attempt of effect ``kind`` ended with ``outcome``."""
    if _METRICS:
        _METRICS["attempts"].labels(kind=kind, outcome=outcome).inc()


def count_compensation(status: str) -> None:
    """A compensation reached ``status`` (counted for succeeded, failed, unknown, skipped and blocked)."""
    if _METRICS and status in ("succeeded", "failed", "unknown", "skipped", "blocked"):
        _METRICS["comps"].labels(status=status).inc()


def count_claim_expired() -> None:
    """This worker took over a run whose claim had expired."""
    if _METRICS:
        _METRICS["expired"].inc()


def count_reconnect() -> None:
    """The journal's database connection was made again."""
    if _METRICS:
        _METRICS["reconnects"].inc()


def queue_depth_from(read: Callable[[], float]) -> None:
    """Let the queue-depth gauge read its value from ``read`` at each scrape (a shared journal's query)."""
    if _METRICS:
        _METRICS["queue"].set_function(read)
