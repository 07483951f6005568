"""A real threaded HTTP server on 127.0.0.1 (port 0) for tests of outbound requests.

It records every request (method, path with query as received, headers, body) and counts them per
(method, path). What it answers is set per route with :meth:`TestServer.route`:

    server.route("POST", "/api/orders", status=201, json={"id": 7})
    server.route("DELETE", "/api/orders/7", status=500, body="broken")   # 4xx/5xx
    server.route("GET", "/old", status=302, headers={"Location": "http://127.0.0.1:1/new"})
    server.route("POST", "/slow", hang=30)        # reads the request, then says nothing for 30 s
    server.route("POST", "/flaky", sequence=[{"status": 500}, {"status": 200, "json": {}}])

Unrouted requests get 404. ``hang`` answers nothing (the request was fully received first), which is
the "sent but unanswered" case; :meth:`TestServer.release` ends every hang early.
"""

from __future__ import annotations

import json as _json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["Received", "TestServer"]


@dataclass
class Received:
    """One request as the server received it."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    at: float = field(default_factory=time.time)

    def json(self) -> Any:
        return _json.loads(self.body)


class TestServer:
    """A loopback HTTP server; use as a context manager or call :meth:`close`."""

    __test__ = False  # not a test class for pytest

    def __init__(self) -> None:
        self.received: list[Received] = []
        self._routes: dict[tuple[str, str], list[dict[str, Any]]] = {}
        self._lock = threading.Lock()
        self._released = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                rec = Received(self.command, self.path, {k: v for k, v in self.headers.items()}, body)
                with server._lock:
                    server.received.append(rec)
                    answer = server._answer(self.command, self.path)
                if answer.get("hang"):
                    server._released.wait(float(answer["hang"]))
                    self.close_connection = True
                    return
                payload = answer.get("raw")
                given = answer.get("headers") or {}
                headers = list(given.items()) if isinstance(given, dict) else [tuple(h) for h in given]
                typed = any(k.lower() == "content-type" for k, _ in headers)
                if payload is None and "json" in answer:
                    payload = _json.dumps(answer["json"]).encode()
                    headers += [] if typed else [("Content-Type", "application/json")]
                elif payload is None:
                    payload = str(answer.get("body", "")).encode()
                    headers += [] if typed else [("Content-Type", "text/plain; charset=utf-8")]
                self.send_response(int(answer.get("status", 200)))
                for k, v in headers:
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle  # noqa: N815 - http.server's names

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    def _answer(self, method: str, path: str) -> dict[str, Any]:
        route = self._routes.get((method, path)) or self._routes.get((method, path.split("?", 1)[0]))
        if route is None:
            return {"status": 404, "body": f"no route {method} {path}"}
        return route.pop(0) if len(route) > 1 else route[0]

    def route(self, method: str, path: str, *, sequence: list[dict[str, Any]] | None = None,
              **answer: Any) -> None:
        """Set what ``method path`` answers: ``status``, ``json`` or ``body`` or ``raw`` (bytes), ``headers`` (a
        dict, or a list of ``(name, value)`` pairs to send a header twice),
        ``hang`` (seconds of silence after reading the request); or a ``sequence`` of such answers (the last
        one repeats)."""
        with self._lock:
            self._routes[(method, path)] = list(sequence) if sequence else [answer]

    def count(self, method: str, path: str) -> int:
        """How many ``method path`` requests arrived (path compared without the query)."""
        with self._lock:
            return sum(1 for r in self.received if r.method == method and r.path.split("?", 1)[0] == path)

    def requests(self, method: str | None = None, path: str | None = None) -> list[Received]:
        """The requests received, optionally filtered (path compared without the query)."""
        with self._lock:
            return [r for r in self.received if (method is None or r.method == method)
                    and (path is None or r.path.split("?", 1)[0] == path)]

    def wait_for(self, method: str, path: str, n: int = 1, timeout: float = 60.0) -> bool:
        """Wait until ``n`` such requests arrived; True when they did."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.count(method, path) >= n:
                return True
            time.sleep(0.05)
        return False

    def release(self) -> None:
        """End every current and future hang at once."""
        self._released.set()

    def close(self) -> None:
        """Stop serving and free the port."""
        self.release()
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> TestServer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
