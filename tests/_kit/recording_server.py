"""A real HTTP server on loopback that records every request it receives (hook and action targets).

``RecordingServer()`` binds 127.0.0.1 on a free port and serves in a thread. Each request is
recorded as ``{method, path, headers, body, json}``. Per path, answers can be scripted:
``server.answer("/refund", 500, 500, 200)`` answers 500 twice then 200 (the last repeats);
``server.delay("/slow", 3.0)`` holds the answer that many seconds. Default: 200 ``{"ok": true}``.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["RecordingServer"]


class RecordingServer:
    """A recording loopback HTTP server (see module doc). Use as a context manager or call ``close()``."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self._answers: dict[str, list[int]] = {}
        self._delays: dict[str, float] = {}
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                path = self.path.split("?")[0]
                try:
                    parsed = json.loads(raw) if raw else None
                except ValueError:
                    parsed = None
                with outer._lock:
                    outer.requests.append({"method": self.command, "path": self.path, "headers": dict(self.headers),
                                           "body": raw.decode("utf-8", "replace"), "json": parsed, "at": time.time()})
                    script = outer._answers.get(path, [200])
                    status = script.pop(0) if len(script) > 1 else script[0]
                delay = outer._delays.get(path, 0.0)
                if delay:
                    time.sleep(delay)
                body = json.dumps({"ok": 200 <= status < 300, "path": path}).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:
                    pass  # the client went away (killed runner)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def answer(self, path: str, *statuses: int) -> None:
        """Script the statuses answered on ``path`` (the last one repeats)."""
        with self._lock:
            self._answers[path] = list(statuses)

    def delay(self, path: str, seconds: float) -> None:
        """Hold each answer on ``path`` for ``seconds``."""
        self._delays[path] = seconds

    def seen(self, path: str) -> list[dict[str, Any]]:
        """Requests received on ``path`` (query string ignored), in order."""
        with self._lock:
            return [r for r in self.requests if r["path"].split("?")[0] == path]

    def close(self) -> None:
        """Stop serving and free the port."""
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> "RecordingServer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
