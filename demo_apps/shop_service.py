#!/usr/bin/env python3
"""A tiny local shop service for the HTTP demo (standard library only).

    python3 demo_apps/shop_service.py [PORT]      # default port 8765, listens on 127.0.0.1

    POST   /api/orders        {"item": ..., "qty": ...}  -> 201 {"id": N, ...}
    GET    /api/orders                                   -> 200 [orders]
    GET    /api/orders/N                                 -> 200 order | 404
    DELETE /api/orders/N                                 -> 200 {"deleted": N} | 404
    POST   /api/payments                                 -> 402 {"error": "payment declined"} (always:
                                                            the demo's failing step)

Orders live in memory. A repeated POST with the same ``Idempotency-Key`` returns the order it
created the first time instead of creating another one. It prints its URL on start.
"""

from __future__ import annotations

import itertools
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

ORDERS: dict[int, dict[str, Any]] = {}
BY_KEY: dict[str, int] = {}
LOCK = threading.Lock()
IDS = itertools.count(1)


class Shop(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _send(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _order_id(self) -> int | None:
        tail = self.path.split("?", 1)[0].removeprefix("/api/orders/")
        return int(tail) if tail.isdigit() else None

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b"{}"
        if self.path.split("?", 1)[0] == "/api/payments":
            print("payment declined", flush=True)
            return self._send(402, {"error": "payment declined"})
        if self.path.split("?", 1)[0] != "/api/orders":
            return self._send(404, {"error": "not found"})
        try:
            data = json.loads(raw or b"{}")
        except ValueError:
            return self._send(400, {"error": "body is not JSON"})
        key = self.headers.get("Idempotency-Key")
        with LOCK:
            if key and key in BY_KEY:
                return self._send(201, ORDERS[BY_KEY[key]])
            order_id = next(IDS)  # never reused, even after a delete (a late reverse action hits no other order)
            ORDERS[order_id] = {"id": order_id, **(data if isinstance(data, dict) else {"data": data})}
            if key:
                BY_KEY[key] = order_id
            order = ORDERS[order_id]
        print(f"created order {order_id}: {json.dumps(order)}", flush=True)
        self._send(201, order)

    def do_GET(self) -> None:  # noqa: N802
        if self.path.split("?", 1)[0] == "/api/orders":
            with LOCK:
                return self._send(200, list(ORDERS.values()))
        order_id = self._order_id()
        with LOCK:
            order = ORDERS.get(order_id) if order_id is not None else None
        self._send(200, order) if order else self._send(404, {"error": "no such order"})

    def do_DELETE(self) -> None:  # noqa: N802
        order_id = self._order_id()
        with LOCK:
            found = order_id is not None and ORDERS.pop(order_id, None) is not None
        if not found:
            return self._send(404, {"error": "no such order"})
        print(f"deleted order {order_id}", flush=True)
        self._send(200, {"deleted": order_id})

    def log_message(self, *args: Any) -> None:
        pass


def main(argv: list[str]) -> int:
    port = int(argv[0]) if argv else 8765
    server = ThreadingHTTPServer(("127.0.0.1", port), Shop)
    print(f"shop service listening on http://127.0.0.1:{server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
