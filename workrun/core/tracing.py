"""OpenTelemetry traces (SPEC §20, R-F5), when the ``otel`` extra is installed and an exporter is configured.

On when ``OTEL_EXPORTER_OTLP_ENDPOINT``, ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or ``OTEL_TRACES_EXPORTER``
is set and ``OTEL_SDK_DISABLED`` is not ``true``; spans then go over OTLP (the SDK's exporter, batched
in a thread of its own: export never blocks or fails a run; an unreachable collector adds at most a few
seconds when the process ends). One trace per run: its trace id is derived from the run id, so ``resume``,
other workers and compensation continue the same trace. Spans: ``run`` (``workrun.run_id``,
``workrun.status``), ``node`` (``workrun.node_key``), ``operation`` (``workrun.operation_id``),
``http.request``, ``compensation`` and ``attempt`` (``workrun.compensation_id``, ``workrun.status``).
The protocol is ``OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL``: ``http/protobuf`` (the default, the extra's exporter) or
``grpc`` (with ``opentelemetry-exporter-otlp-proto-grpc`` installed); any other value, or ``grpc`` without that
package, exports nothing and says so once on stderr. Spans are recorded when what they stand for has ended, with
its journaled start and end times.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from workrun.core import logs
from workrun.core.digest import sha256
from workrun.core.rows import AttemptRow, CompensationRow, NodeRow, OperationRow, RunRow

__all__ = ["attempt_span", "enabled", "node_span", "operation_span", "run_span", "trace_id_of", "traceparent"]

_STATE: dict[str, Any] = {}
_LOCK = threading.Lock()
_NEXT = threading.local()  # the span id the next span of this thread gets (a call's span, known in advance)
FLUSH_SECONDS = 4.0  # at most this long spent exporting when the process ends


def trace_id_of(run_id: str) -> int:
    """The trace id of a run: the first 128 bits of sha256(run id), never 0."""
    return int(sha256(run_id.encode()).hexdigest()[:32], 16) or 1


def _span_id(*parts: str) -> int:
    return int(sha256("/".join(parts).encode()).hexdigest()[:16], 16) or 1


def traceparent(run_id: str | None, key: str) -> str | None:
    """The W3C ``traceparent`` of a call's span (``key``: its operation id, or ``COMPENSATION_ID.N`` of an attempt),
    known before the call starts: passed to its App process as ``TRACEPARENT`` and to its HTTP request as the
    ``traceparent`` header (R-F5). None when traces are off or the call belongs to no run."""
    if not run_id or not enabled():
        return None
    return f"00-{trace_id_of(run_id):032x}-{_span_id(run_id, key):016x}-01"


def enabled() -> bool:
    """True when traces are exported (configured, not disabled, the SDK importable); set up on first call."""
    if "tracer" in _STATE:
        return _STATE["tracer"] is not None
    with _LOCK:
        if "tracer" in _STATE:
            return _STATE["tracer"] is not None
        _STATE["tracer"] = _setup()
    return _STATE["tracer"] is not None


def _protocol() -> tuple[str, str]:
    """The OTLP protocol asked for and the variable that asked: ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL``, else
    ``OTEL_EXPORTER_OTLP_PROTOCOL``, else ``http/protobuf`` (OpenTelemetry's default)."""
    for name in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        value = os.environ.get(name, "").strip().lower()
        if value:
            return value, name
    return "http/protobuf", "OTEL_EXPORTER_OTLP_PROTOCOL"


def _setup() -> Any:
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    if not any(os.environ.get(k) for k in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                                           "OTEL_TRACES_EXPORTER")):
        return None
    if os.environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() in ("none", ""):
        return None
    protocol, field = _protocol()
    if protocol not in ("http/protobuf", "grpc"):
        logs.say("otel_protocol", "warning", f"{field}={protocol!r} is not supported (use http/protobuf or grpc): "
                 "no traces are exported")
        return None
    try:
        if protocol == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        else:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError:
        if protocol == "grpc":  # asked for, and not there: said once, rather than sent over HTTP to a gRPC port
            logs.say("otel_protocol", "warning", f"{field}=grpc needs the opentelemetry-exporter-otlp-proto-grpc "
                     "package: no traces are exported")
        return None  # the otel extra is not installed: no traces, nothing else changes
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
    except ImportError:  # the otel extra is not installed: no traces, nothing else changes
        return None
    import atexit

    class Known(RandomIdGenerator):
        """A call's span gets the id its ``traceparent`` promised (:func:`traceparent`)."""

        def generate_span_id(self) -> int:
            given = getattr(_NEXT, "span_id", None)
            if given is not None:
                _NEXT.span_id = None
                return int(given)
            return int(super().generate_span_id())

        def generate_trace_id(self) -> int:  # a run's root span: its trace is the run's (R-F5)
            given = getattr(_NEXT, "trace_id", None)
            if given is not None:
                _NEXT.trace_id = None
                return int(given)
            return int(super().generate_trace_id())

    provider = TracerProvider(resource=Resource.create({"service.name": "workrun"}), id_generator=Known())
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(timeout=2), schedule_delay_millis=500,
                                                   export_timeout_millis=2000))
    _STATE["provider"] = provider

    def flush() -> None:
        try:
            provider.force_flush(timeout_millis=int(FLUSH_SECONDS * 1000))
            provider.shutdown()
        except Exception:  # export never fails a run
            pass

    atexit.register(flush)
    return provider.get_tracer("workrun")


def _parent(trace_id: int, span_id: int) -> Any:
    from opentelemetry import trace
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

    ctx = SpanContext(trace_id=trace_id, span_id=span_id, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED))
    return trace.set_span_in_context(NonRecordingSpan(ctx))


def _record(name: str, trace_id: int, parent_span: int | None, start: float | None, end: float | None,
            attributes: dict[str, Any], span_id: int | None = None) -> None:
    """Record one ended span (times in epoch seconds) under ``parent_span`` of ``trace_id`` (None: the trace's root
    span), with ``span_id`` when its id is known ahead (:func:`traceparent`, or a parent's id its children name)."""
    if not enabled():
        return
    try:
        from opentelemetry.context import Context

        tracer = _STATE["tracer"]
        _NEXT.span_id = span_id
        _NEXT.trace_id = trace_id if parent_span is None else None
        now = time.time()
        begin = int((start if start is not None else now) * 1e9)
        finish = int((end if end is not None else now) * 1e9)
        span = tracer.start_span(name, context=Context() if parent_span is None else _parent(trace_id, parent_span),
                                 start_time=begin, attributes={k: v for k, v in attributes.items() if v is not None})
        span.end(end_time=max(begin, finish))
    except Exception:  # export never blocks or fails a run
        pass
    finally:
        _NEXT.span_id = _NEXT.trace_id = None


# the spans' tree (R-F5): run (the trace's root) -> node -> operation -> http.request; run -> compensation -> attempt.
# A span's id is derived from what it stands for, so a span recorded by another process (a worker, a resume) finds
# its parent's id without asking anyone.

def _run_id_span(run_id: str) -> int:
    return _span_id(run_id, "root")


def _node_id_span(run_id: str, node_key: str | None) -> int:
    return _span_id(run_id, "node", str(node_key)) if node_key else _run_id_span(run_id)


def _compensation_id_span(run_id: str, compensation_id: str | None) -> int:
    return _span_id(run_id, "compensation", str(compensation_id))


def run_span(run: RunRow) -> None:
    """A run (or the part this process drove) ended or paused: ``run`` span with its status, the trace's root."""
    rid = run["run_id"]
    _record("run", trace_id_of(rid), None, run.get("created_at"), run.get("ended_at"),
            {"workrun.run_id": rid, "workrun.status": run.get("status")}, span_id=_run_id_span(rid))


def node_span(run_id: str, node: NodeRow) -> None:
    """A node ended: ``node`` span (child of the run's)."""
    _record("node", trace_id_of(run_id), _run_id_span(run_id), node.get("started_at"), node.get("ended_at"),
            {"workrun.run_id": run_id, "workrun.node_key": node.get("node_key"), "workrun.status": node.get("status")},
            span_id=_node_id_span(run_id, node.get("node_key")))


def operation_span(op: OperationRow, *, request_method: str | None = None) -> None:
    """An operation ended: ``operation`` span in its run's trace; with ``request_method`` (an HTTP request's
    effect gives it, R-F5) also an ``http.request`` span. No operation kind is looked at here."""
    rid = op.get("run_id")
    if not rid:
        return
    attrs = {"workrun.run_id": rid, "workrun.node_key": op.get("node_key"), "workrun.operation_id":
             op.get("operation_id"), "workrun.status": op.get("status"), "workrun.kind": op.get("kind")}
    begin = op.get("started_at") or op.get("created_at")
    own = _span_id(rid, str(op.get("operation_id")))
    _record("operation", trace_id_of(rid), _node_id_span(rid, op.get("node_key")), begin, op.get("ended_at"), attrs,
            span_id=own)
    if request_method is not None:
        _record("http.request", trace_id_of(rid), own, begin, op.get("ended_at"),
                {**attrs, "http.request.method": request_method})


def attempt_span(comp: CompensationRow, attempt: AttemptRow | None, *, request_method: str | None = None) -> None:
    """A compensation attempt ended (``attempt`` span; with ``request_method``, the HTTP request it sent as an
    ``http.request`` span under it: the reverse action's effect gives it); when its compensation is final, a
    ``compensation`` span."""
    rid = comp.get("run_id")
    if not rid:
        return
    attrs = {"workrun.run_id": rid, "workrun.node_key": comp.get("node_key"),
             "workrun.compensation_id": comp.get("compensation_id"), "workrun.operation_id": comp.get("operation_id")}
    parent = _compensation_id_span(rid, comp.get("compensation_id"))
    if attempt is not None:
        own = _span_id(rid, f"{comp.get('compensation_id')}.{attempt.get('number')}")
        _record("attempt", trace_id_of(rid), parent, attempt.get("started_at"), attempt.get("ended_at"),
                {**attrs, "workrun.status": attempt.get("status"), "workrun.attempt": attempt.get("number")},
                span_id=own)
        if request_method is not None:
            _record("http.request", trace_id_of(rid), own, attempt.get("started_at"), attempt.get("ended_at"),
                    {**attrs, "workrun.status": attempt.get("status"), "http.request.method": request_method})
    if comp.get("status") in ("succeeded", "failed", "unknown", "skipped", "resolved"):
        _record("compensation", trace_id_of(rid), _run_id_span(rid), comp.get("created_at"),
                comp.get("updated_at"), {**attrs, "workrun.status": comp.get("status")}, span_id=parent)
