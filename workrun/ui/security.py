"""The dashboard's guard (R-U5), one ASGI middleware in front of every route.

- ``Host`` must be ``127.0.0.1:PORT`` or ``localhost:PORT`` (DNS rebinding), else 403.
- Every request needs the access token: ``?token=…`` on the first visit is traded for an HttpOnly,
  SameSite=Strict session cookie and the browser is redirected to the same URL without the token;
  API clients may also send ``Authorization: Bearer TOKEN`` or keep ``?token=`` on ``/api/…``.
  Without it: 401.
- Only GET, HEAD and POST exist (405 otherwise). A POST needs a same-origin ``Origin`` header and the
  CSRF token (form field ``csrf`` or header ``X-CSRF-Token``), else 403 before any route runs, so
  nothing is changed.
- Every response carries a Content-Security-Policy that allows only the dashboard's own scripts and
  styles (no inline script), ``X-Content-Type-Options: nosniff``, ``Referrer-Policy: same-origin``
  (``no-referrer`` would make browsers send ``Origin: null`` on form posts),
  ``X-Frame-Options: DENY`` and ``Cache-Control: no-store``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qs, quote, urlencode

__all__ = ["CSP", "Guard", "csrf_token", "session_cookie"]

CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
_HEADERS = [(b"content-security-policy", CSP.encode()), (b"x-content-type-options", b"nosniff"),
            (b"referrer-policy", b"same-origin"), (b"x-frame-options", b"DENY"), (b"cache-control", b"no-store")]
MAX_FORM_BYTES = 1 << 20

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


def _same(given: str, expected: str) -> bool:
    """Constant-time comparison that accepts any text (``hmac.compare_digest`` refuses non-ASCII ``str``)."""
    return hmac.compare_digest(given.encode("utf-8", "replace"), expected.encode("utf-8"))


def _derive(token: str, purpose: str) -> str:
    return hmac.new(token.encode(), purpose.encode(), hashlib.sha256).hexdigest()


def session_cookie(token: str) -> str:
    """The session cookie's value for ``token`` (not the token itself)."""
    return _derive(token, "session")


def csrf_token(token: str) -> str:
    """The CSRF token every state-changing request must carry."""
    return _derive(token, "csrf")


class Guard:
    """ASGI middleware enforcing R-U5 in front of ``app``.

    Args:
        app: the Starlette application.
        token: the access token printed with the URL.
        port: the port the server listens on (for the Host and Origin checks).
    """

    def __init__(self, app: Any, *, token: str, port: int, read_only: bool = False) -> None:
        self.app = app
        self.read_only = read_only  # R-D7: every POST is 403
        self.token = token
        self.cookie_name = f"workrun_session_{port}"  # cookies are not per port: one per dashboard
        self.session = session_cookie(token)
        self.csrf = csrf_token(token)
        self.hosts = {f"127.0.0.1:{port}", f"localhost:{port}"}
        self.origins = {f"http://{h}" for h in self.hosts}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *_HEADERS]}
            await send(message)

        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        if headers.get("host", "") not in self.hosts:
            await _plain(send_with_headers, scope, 403,
                         "forbidden: the Host header must be 127.0.0.1:PORT or localhost:PORT")
            return
        method = scope["method"]
        if method not in ("GET", "HEAD", "POST"):
            await _plain(send_with_headers, scope, 405, "method not allowed")
            return
        if method == "POST" and self.read_only:  # R-D7: every POST, with or without credentials
            await _plain(send_with_headers, scope, 403,
                         "forbidden: this dashboard is read-only (workrun ui --read-only)")
            return
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        given = (query.get("token") or [""])[-1]
        has_session = any(_same(v, self.session) for v in _cookies(headers.get("cookie", ""),
                                                                                 self.cookie_name))
        scheme, _, credentials = headers.get("authorization", "").partition(" ")
        has_bearer = scheme.lower() == "bearer" and _same(credentials.strip(), self.token)  # the scheme: any case
        has_token = bool(given) and _same(given, self.token)
        path = scope.get("path", "/")
        if not (has_session or has_bearer or has_token):
            await _plain(send_with_headers, scope, 401,
                         "unauthorized: open the URL that `workrun ui` printed (with its token)")
            return
        if has_token and method in ("GET", "HEAD") and not path.startswith("/api/"):
            rest = {k: v for k, v in query.items() if k != "token"}
            # this origin's path, quoted as it came (a decoded "//host/..." would send the browser elsewhere, and a
            # character outside Latin-1 cannot be written in a header)
            location = "/" + quote(path.lstrip("/"), safe="/:@!$&'()*+,;=-._~") \
                + ("?" + urlencode(rest, doseq=True) if rest else "")
            await send_with_headers({"type": "http.response.start", "status": 303, "headers": [
                (b"location", location.encode("latin-1")), (b"set-cookie", self._set_cookie()),
                (b"content-type", b"text/plain; charset=utf-8")]})
            await send_with_headers({"type": "http.response.body", "body": b"see other"})
            return
        if method == "POST":
            api_client = has_bearer and "origin" not in headers  # a program holding the token, not a browser (R-D7)
            if not api_client and headers.get("origin", "") not in self.origins:
                await _plain(send_with_headers, scope, 403, "forbidden: state changes need a same-origin Origin header")
                return
            body = b""
            more = True
            while more:
                message = await receive()
                body += message.get("body", b"")
                more = message.get("more_body", False)
                if len(body) > MAX_FORM_BYTES:
                    await _plain(send_with_headers, scope, 413, "request body too large")
                    return
            form = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True) \
                if headers.get("content-type", "").startswith("application/x-www-form-urlencoded") else {}
            sent = headers.get("x-workrun-csrf") or headers.get("x-csrf-token") or (form.get("csrf") or [""])[-1]
            if not (sent and _same(sent, self.csrf)):
                await _plain(send_with_headers, scope, 403, "forbidden: missing or wrong CSRF token")
                return
            replayed = False

            async def replay() -> dict[str, Any]:
                nonlocal replayed
                if not replayed:
                    replayed = True
                    return {"type": "http.request", "body": body, "more_body": False}
                return await receive()

            receive = replay

        async def send_maybe_cookie(message: dict[str, Any]) -> None:
            if has_token and message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), (b"set-cookie", self._set_cookie())]}
            if has_bearer and message["type"] == "http.response.start":  # R-D7: a program holding the token reads the
                # CSRF value its actions need from any answer, not by scraping a form (new-user review)
                message = {**message, "headers": [*message.get("headers", []),
                                                  (b"x-workrun-csrf", self.csrf.encode("latin-1"))]}
            await send_with_headers(message)

        await self.app(scope, receive, send_maybe_cookie)

    def _set_cookie(self) -> bytes:
        return f"{self.cookie_name}={self.session}; Path=/; HttpOnly; SameSite=Strict".encode()


def _cookies(header: str, name: str) -> list[str]:
    out = []
    for part in header.split(";"):
        k, _, v = part.strip().partition("=")
        if k == name:
            out.append(v)
    return out


async def _plain(send: Send, scope: Scope, status: int, text: str) -> None:
    """Refuse a request: ``text`` as one plain line, or ``{"error": text}`` under ``/api/`` (as every other
    error of the API)."""
    if str(scope.get("path", "")).startswith("/api/"):
        body, kind = json.dumps({"error": text}).encode(), b"application/json"
    else:
        body, kind = (text + "\n").encode(), b"text/plain; charset=utf-8"
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", kind), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
