"""OpenTelemetry traces (SPEC §20, R-F5): spans over OTLP/HTTP to a real receiver on loopback; one trace per run,
its id derived from the run id; a disabled SDK and an unreachable collector never fail or block a run."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the otel extra is not installed (it is in the test extra)")

from opentelemetry.proto.collector.trace.v1 import trace_service_pb2  # noqa: E402

from _kit.http_server import TestServer  # noqa: E402
from workrun.core.tracing import trace_id_of  # noqa: E402


class Receiver:
    """An OTLP/HTTP trace receiver: ``spans`` holds ``(name, trace_id, {attribute: value})``."""

    def __init__(self) -> None:
        self.spans: list[tuple[str, int, dict]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_POST(self):  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                req = trace_service_pb2.ExportTraceServiceRequest()
                req.ParseFromString(body)
                for rs in req.resource_spans:
                    for ss in rs.scope_spans:
                        for span in ss.spans:
                            attrs = {a.key: a.value.string_value or a.value.int_value for a in span.attributes}
                            attrs["_span_id"] = int.from_bytes(span.span_id, "big")
                            attrs["_parent"] = int.from_bytes(span.parent_span_id, "big") if span.parent_span_id \
                                else None
                            receiver.spans.append((span.name, int.from_bytes(span.trace_id, "big"), attrs))
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


FLOW = """
http_allow = ["127.0.0.1:{port}"]
[nodes.order]
kind = "http"
method = "POST"
url = "{url}/orders"
compensation = {{ method = "DELETE", url = "{url}/orders/1" }}
[nodes.boom]
kind = "http"
method = "POST"
url = "{url}/boom"
needs = ["order"]
"""


@pytest.fixture
def shop():
    with TestServer() as server:
        server.route("POST", "/orders", status=201, json={"id": 1})
        server.route("DELETE", "/orders/1", status=204, body="")
        server.route("POST", "/boom", status=500, body="no")
        yield server


def _run(wf, env):
    return subprocess.run([sys.executable, "-m", "workrun", "run", str(wf), "--json"], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=120)


def test_a_run_exports_its_spans_in_one_trace(shop, write_workflow):
    receiver = Receiver()
    try:
        wf = write_workflow("traced", FLOW.format(port=shop.port, url=shop.url))
        res = _run(wf, {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{receiver.port}"})
        assert res.returncode == 1, res.stderr
        import json

        run_id = json.loads(res.stdout)["run_id"]
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not any(s[0] == "run" for s in receiver.spans):
            time.sleep(0.1)
    finally:
        receiver.close()
    names = [s[0] for s in receiver.spans]
    for name in ("run", "node", "operation", "http.request", "compensation", "attempt"):
        assert name in names, names
    assert {s[1] for s in receiver.spans} == {trace_id_of(run_id)}  # one trace, derived from the run id
    run = next(s for s in receiver.spans if s[0] == "run")
    assert run[2]["workrun.run_id"] == run_id and run[2]["workrun.status"] == "failed"
    assert any(s[0] == "node" and s[2].get("workrun.node_key") == "order" for s in receiver.spans)
    assert any(s[0] == "operation" and str(s[2].get("workrun.operation_id", "")).startswith("op_")
               for s in receiver.spans)
    comp = next(s for s in receiver.spans if s[0] == "compensation")
    assert comp[2]["workrun.status"] == "succeeded" and comp[2]["workrun.compensation_id"].startswith("cmp_")
    # one tree (conformance review): run is the root; node, compensation under it; operation under its node;
    # http.request under its operation; attempt under its compensation
    ids = {s[2]["_span_id"]: s for s in receiver.spans}
    assert run[2]["_parent"] is None

    def parent(span):
        return ids[span[2]["_parent"]][0]

    for span in receiver.spans:
        if span[0] != "run":
            want = {"node": ("run",), "compensation": ("run",), "operation": ("node",),
                    "http.request": ("operation", "attempt"), "attempt": ("compensation",)}[span[0]]
            assert parent(span) in want, (span, want)
    # the reverse action's DELETE is an http.request under its attempt (hostile review)
    assert any(s[0] == "http.request" and parent(s) == "attempt" and s[2].get("http.request.method") == "DELETE"
               for s in receiver.spans), receiver.spans
    op = next(s for s in receiver.spans if s[0] == "operation" and s[2].get("workrun.node_key") == "order")
    assert ids[op[2]["_parent"]][2]["workrun.node_key"] == "order"


def test_disabled_or_unreachable_never_fails_or_blocks_a_run(shop, write_workflow):
    wf = write_workflow("quiet", FLOW.format(port=shop.port, url=shop.url))
    t0 = time.monotonic()
    base = _run(wf, {})
    plain = time.monotonic() - t0
    off = _run(wf, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9", "OTEL_SDK_DISABLED": "true"})
    t0 = time.monotonic()
    gone = _run(wf, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"})  # nothing listens there
    unreachable = time.monotonic() - t0
    assert base.returncode == off.returncode == gone.returncode == 1, gone.stderr
    assert unreachable < plain + 5.5, (plain, unreachable)


TRACED_APP = """
[tool.workrun.apps.traced]
kind = "process"
entry = "main.py"
"""
TRACED_MAIN = """
import os
from workrun_sdk import process
process.result({"traceparent": os.environ.get("TRACEPARENT")})
"""


def test_calls_carry_the_traceparent_of_their_span(shop, write_workflow, make_project):
    """R-F5: an App process gets TRACEPARENT, an HTTP request the traceparent header, of the call's own span."""
    import json

    project = make_project("traced", TRACED_APP, {"main.py": TRACED_MAIN})
    receiver = Receiver()
    try:
        wf = write_workflow("parents", FLOW.format(port=shop.port, url=shop.url) + f"""
[nodes.app]
project = "{project}"
app = "traced"
""")
        res = _run(wf, {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{receiver.port}"})
        assert res.returncode == 1, res.stderr
        view = json.loads(res.stdout)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not any(s[0] == "run" for s in receiver.spans):
            time.sleep(0.1)
    finally:
        receiver.close()
    trace = trace_id_of(view["run_id"])
    ops = {s[2]["workrun.operation_id"]: s[2]["_span_id"] for s in receiver.spans if s[0] == "operation"}
    app_op = next(o for o in view["operations"] if o["node_key"] == "app")
    version, trace_hex, span_hex, flags = app_op["result"]["traceparent"].split("-")
    assert (version, int(trace_hex, 16), flags) == ("00", trace, "01")
    assert int(span_hex, 16) == ops[app_op["operation_id"]]
    [order] = shop.requests("POST", "/orders")
    order_op = next(o for o in view["operations"] if o["node_key"] == "order")
    _, trace_hex, span_hex, _ = order.headers["traceparent"].split("-")
    assert int(trace_hex, 16) == trace and int(span_hex, 16) == ops[order_op["operation_id"]]
    [undo] = shop.requests("DELETE", "/orders/1")
    attempts = {s[2]["_span_id"] for s in receiver.spans if s[0] == "attempt"}
    assert int(undo.headers["traceparent"].split("-")[2], 16) in attempts


def test_the_otlp_protocol_asked_for_is_used_or_refused_in_one_line(shop, write_workflow):
    """``OTEL_EXPORTER_OTLP_PROTOCOL``: ``http/protobuf`` exports as the default does; a protocol that cannot be
    served (``http/json``, ``grpc`` without its exporter package) exports nothing and says so in one stderr line,
    rather than sending OTLP/HTTP to what expects another protocol. The run is not affected."""
    import importlib.util

    receiver = Receiver()
    try:
        wf = write_workflow("proto", FLOW.format(port=shop.port, url=shop.url))
        endpoint = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{receiver.port}"}
        res = _run(wf, {**endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"})
        assert res.returncode == 1 and "OTEL_" not in res.stderr, res.stderr
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not any(s[0] == "run" for s in receiver.spans):
            time.sleep(0.1)
        assert any(s[0] == "run" for s in receiver.spans)
        receiver.spans.clear()
        refused = [("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"), ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "HTTP/JSON")]
        if importlib.util.find_spec("opentelemetry.exporter.otlp.proto.grpc") is None:
            refused.append(("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"))
        for name, value in refused:
            res = _run(wf, {**endpoint, name: value})
            assert res.returncode == 1, res.stderr
            said = [line for line in res.stderr.splitlines() if name in line]
            assert len(said) == 1 and "no traces are exported" in said[0], res.stderr
        time.sleep(1.0)  # a batch would have gone within 0.5 s
        assert receiver.spans == []
    finally:
        receiver.close()
