"""A real SMTP server on 127.0.0.1 (aiosmtpd) for tests of email actions (R-K2).

It records every message it accepted (envelope and parsed headers) and can be told how to answer:
``mode = "accept"`` (250), ``"refuse_rcpt"`` (550 at RCPT: nothing sent), ``"defer"`` (451 after DATA),
``"reject"`` (554 after DATA), ``"drop"`` (the connection closed after the message, no answer).
"""

from __future__ import annotations

import asyncio

import socket
import time
from email import message_from_bytes, policy
from email.message import Message
from typing import Any

from aiosmtpd.controller import Controller

__all__ = ["SmtpServer"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Handler:
    def __init__(self, server: SmtpServer) -> None:
        self.server = server

    async def handle_RCPT(self, srv: Any, session: Any, envelope: Any, address: str, options: Any) -> str:  # noqa: N802
        self.server.rcpts += 1
        if self.server.mode == "refuse_rcpt":
            return "550 5.1.1 no such mailbox"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, srv: Any, session: Any, envelope: Any) -> str:  # noqa: N802
        self.server.datas += 1
        msg = message_from_bytes(envelope.content, policy=policy.default)
        self.server.received.append({"from": envelope.mail_from, "to": list(envelope.rcpt_tos), "message": msg,
                                     "at": time.time()})
        mode = self.server.mode
        if mode == "defer":
            return "451 4.3.0 try again later"
        if mode == "reject":
            return "554 5.7.1 rejected"
        if mode == "hang":  # no answer to the message for a long while (the client's timeout ends the wait)
            await asyncio.sleep(20)
            return "250 too late"
        if mode == "drop":
            session.transport = getattr(srv, "transport", None)
            if srv.transport is not None:
                srv.transport.close()
            return "250 never said"
        return "250 2.0.0 queued"


class SmtpServer:
    """``with SmtpServer() as smtp:`` an SMTP server on ``smtp.port``; ``received`` holds accepted messages."""

    __test__ = False

    def __init__(self, starttls: Any = None) -> None:
        """``starttls``: an ``ssl.SSLContext`` of the server's certificate: STARTTLS is offered and required."""
        self.port = _free_port()
        self.mode = "accept"
        self.received: list[dict[str, Any]] = []
        self.rcpts = 0
        self.datas = 0
        self.logins: list[tuple[str, str]] = []
        tls: dict[str, Any] = {"tls_context": starttls, "require_starttls": True} if starttls is not None else {}
        self._controller = Controller(_Handler(self), hostname="127.0.0.1", port=self.port,
                                      authenticator=self._authenticate, auth_require_tls=False, **tls)

    def _authenticate(self, server: Any, session: Any, envelope: Any, mechanism: str, data: Any) -> Any:
        from aiosmtpd.smtp import AuthResult, LoginPassword

        if isinstance(data, LoginPassword):
            self.logins.append((data.login.decode(), data.password.decode()))
        return AuthResult(success=True)

    def messages(self) -> list[Message]:
        """The parsed messages received so far."""
        return [r["message"] for r in self.received]

    def __enter__(self) -> SmtpServer:
        self._controller.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._controller.stop()
