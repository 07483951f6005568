"""Email actions over SMTP (SPEC §19, R-K2): one message, its outcome as data.

A message is prepared once (its body template filled, R-X1) and sent through the workflow's ``[smtp]``:
the host goes through the outbound guard (R-H3, ``http_allow``/``WORKRUN_HTTP_ALLOW``), the connection
goes to the checked address (the TLS server name stays the host), ``starttls`` or implicit ``tls``,
AUTH with ``username``/``password`` (``{{ env.NAME }}`` read now, never shown: redacted from every
answer, R-X2). Outcomes (:class:`~workrun.outbound.http.SendResult`, ``smtp_code`` the last reply code):

- 2xx after the message: succeeded;
- refused before the message was sent (a refused connection; MAIL, RCPT or DATA answered 4xx/5xx):
  failed, not sent (retried within the attempts);
- 4xx after the message: failed (``mail_deferred``, retried); 5xx after it: failed for good
  (``mail_rejected``, a dead letter at once);
- the connection lost or timed out after the message was sent and before the answer: ``unknown``
  (never re-sent unless ``idempotent``).

``Message-ID: <KEY@workrun>`` stays the same for every attempt, so a receiver can de-duplicate.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from workrun.core.errors import ConfigError
from workrun.core.outcomes import Failure
from workrun.core.redact import redact, remember
from workrun.outbound.http import (
    AllowList,
    RequestError,
    SendResult,
    check_address,
    env_needed,
    fill_text,
    resolve_host,
)

if TYPE_CHECKING:
    import smtplib

__all__ = ["check_smtp", "prepare_mail", "send_mail", "wait_bound"]

_ENV = re.compile(r"^\s*\{\{\s*env\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}\s*$")


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def check_smtp(smtp: Any, *, file: str | None, check_env: bool = True) -> None:
    """``[smtp]`` as written (R-K2): ``{{ env.NAME }}`` only in ``username`` and ``password`` (and set now); AUTH
    needs ``starttls`` or ``tls`` unless the host is a loopback address; not both TLS kinds.

    Raises:
        ConfigError: naming the field.
    """
    for name in ("host", "sender", "username", "password"):
        value = getattr(smtp, name)
        field = f"smtp.{'from' if name == 'sender' else name}"
        if value is not None and any(ord(c) < 32 or ord(c) == 127 for c in value):
            raise ConfigError("holds a control character (a line break, NUL, …)", file=file, field=field)
        if name in ("host", "sender") and "{{" in value:
            raise ConfigError("must be literal, not a template", file=file, field=field)
    for name in ("username", "password"):
        value = getattr(smtp, name)
        if value is None:
            continue
        env = _ENV.match(value)
        if "{{" in value and env is None:
            raise ConfigError("only {{ env.NAME }} (the whole value) is allowed here", file=file,
                              field=f"smtp.{name}")
        if env is not None and check_env and env_needed() and env.group(1) not in os.environ:
            raise ConfigError(f"environment variable {env.group(1)} is not set", file=file, field=f"smtp.{name}")
    if smtp.starttls and smtp.tls:
        raise ConfigError("give starttls or tls, not both", file=file, field="smtp.tls")
    if (smtp.username or smtp.password) and not (smtp.starttls or smtp.tls) and not _loopback(smtp.host):
        raise ConfigError("AUTH needs starttls = true or tls = true (except to a loopback address)", file=file,
                          field="smtp.username")


def prepare_mail(email: Any, *, subject: str, message_id: str, lookup: Callable[[str], Any]) -> dict[str, Any]:
    """The message to send, filled once (R-X1): ``{"kind": "email", "to", "cc", "subject", "body",
    "message_id"}`` (JSON-safe: a ticket action or notification stores it as is).

    Raises:
        KeyError: a template of the body has no value.
    """
    data = email.model_dump() if hasattr(email, "model_dump") else dict(email)
    return {"kind": "email", "to": list(data["to"]), "cc": list(data.get("cc") or []), "subject": subject,
            "body": fill_text(data["body"], lookup), "message_id": message_id}


def _env_value(value: str | None, environ: Mapping[str, str], secrets: dict[str, str]) -> str | None:
    if value is None:
        return None
    env = _ENV.match(value)
    if env is None:
        return value
    if env.group(1) not in environ:
        raise RequestError(f"environment variable {env.group(1)} is not set")
    secrets[env.group(1)] = environ[env.group(1)]
    remember({env.group(1): environ[env.group(1)]})  # redacted in other answers too (R-X2)
    return environ[env.group(1)]


def _said(text: Any, secrets: Mapping[str, str]) -> str:
    """What an SMTP server said (a reply, an error), as stored: redacted first (R-X2), then on one line and cut to
    300 characters; cut or joined first, a secret with two spaces in it, or across the cut, came through."""
    shown = text.decode("utf-8", "replace") if isinstance(text, bytes) else str(text)
    return " ".join(redact(shown, secrets).split())[:300]


_CLIENTS: list[Any] = []


def _client(tls: bool, address: str, **kwargs: Any) -> smtplib.SMTP:
    """An SMTP client (implicit TLS when ``tls``) that connects to ``address``, which the guard checked,
    keeping the host as the TLS server name. smtplib, ssl and the email package are imported only here and
    in :func:`_message`: a run that sends no e-mail never loads them (~17 ms of start-up, issue 33)."""
    if not _CLIENTS:
        import smtplib
        import socket

        class _Pinned(smtplib.SMTP):
            def __init__(self, address: str, **kwargs: Any) -> None:
                self._address = address
                super().__init__(**kwargs)

            def _get_socket(self, host: str, port: int, timeout: float) -> socket.socket:
                self._host = host  # the name STARTTLS checks the certificate against (R-K2)
                return socket.create_connection((self._address, port), timeout)

        class _PinnedTls(smtplib.SMTP_SSL):
            def __init__(self, address: str, **kwargs: Any) -> None:
                self._address = address
                super().__init__(**kwargs)

            def _get_socket(self, host: str, port: int, timeout: float) -> socket.socket:
                sock = socket.create_connection((self._address, port), timeout)
                return self.context.wrap_socket(sock, server_hostname=host)

        _CLIENTS[:] = [_Pinned, _PinnedTls]
    client: smtplib.SMTP = _CLIENTS[1 if tls else 0](address, **kwargs)
    return client


def _message(smtp: Any, mail: Mapping[str, Any]) -> bytes:
    from email.message import EmailMessage
    from email.utils import formatdate

    msg = EmailMessage()
    msg["From"] = smtp.sender
    msg["To"] = ", ".join(mail["to"])
    if mail.get("cc"):
        msg["Cc"] = ", ".join(mail["cc"])
    msg["Subject"] = mail["subject"]
    msg["Message-ID"] = mail["message_id"]
    msg["Date"] = formatdate(localtime=True)
    msg.set_content(mail["body"], charset="utf-8")
    data = msg.as_bytes(policy=msg.policy.clone(linesep="\r\n"))
    return re.sub(rb"(?m)^\.", b"..", data)


def wait_bound(smtp: Any, timeout: float | None) -> float:
    """Seconds each wait of a message's exchange may last: the shorter of ``[smtp]``'s ``timeout`` and the action's
    own attempt ``timeout`` (R-H6; None or 0: ``[smtp]``'s alone)."""
    return float(smtp.timeout) if not timeout else min(float(smtp.timeout), float(timeout))


def send_mail(mail: Mapping[str, Any], smtp: Any, allow: AllowList, *,
              before_send: Callable[[], None] | None = None,
              environ: Mapping[str, str] | None = None, timeout: float | None = None) -> SendResult:
    """Send one prepared message (:func:`prepare_mail`) through ``smtp`` (an :class:`~workrun.core.models.SmtpSpec`);
    never raises for network or server trouble: the outcome is data (see the module doc).

    Args:
        allow: addresses the outbound guard lets through.
        before_send: called once the guard let the connection through, before anything is sent (the caller
            journals "about to send"); if it raises, nothing is sent.
        environ: where ``{{ env.NAME }}`` of ``username``/``password`` is read (default ``os.environ``).
        timeout: the action's own attempt timeout (seconds, R-H6): the shorter of it and ``[smtp]``'s is each
            wait's bound (an email action's ``timeout`` was ignored for ``[smtp]``'s, adversarial review).
    """
    import smtplib
    import ssl

    environ = os.environ if environ is None else environ
    secrets: dict[str, str] = {}
    try:
        username = _env_value(smtp.username, environ, secrets)
        password = _env_value(smtp.password, environ, secrets)
    except RequestError as exc:
        return SendResult(False, failure=Failure.NOT_SENT, error=f"not sent: {exc}")
    try:
        addresses = resolve_host(smtp.host, smtp.port)
    except (OSError, UnicodeError) as exc:
        return SendResult(False, failure=Failure.NOT_SENT, error=f"cannot resolve {smtp.host}: {exc}")
    verdicts = [(a, check_address(a, smtp.port, allow)) for a in addresses]
    checked = [a for a, refusal in verdicts if refusal is None]
    if not checked:
        return SendResult(False, failure=Failure.REFUSED,
                          error=verdicts[0][1] if verdicts else f"cannot resolve {smtp.host}")
    try:
        data = _message(smtp, mail)
    except (ValueError, TypeError) as exc:  # a header the email library refuses: nothing is sent
        return SendResult(False, failure=Failure.NOT_SENT, error=f"not sent: the message cannot be built: {exc}")
    if before_send is not None:
        before_send()
    recipients = [*mail["to"], *(mail.get("cc") or [])]
    where = f"{smtp.host}:{smtp.port}"

    def said(text: Any) -> str:
        return _said(text, secrets)

    client: smtplib.SMTP | None = None
    in_data = False
    try:
        kwargs: dict[str, Any] = {"timeout": wait_bound(smtp, timeout), "local_hostname": "workrun"}
        if smtp.tls:
            client = _client(True, str(checked[0]), context=ssl.create_default_context(), **kwargs)
        else:
            client = _client(False, str(checked[0]), **kwargs)
        client.connect(smtp.host, smtp.port)
        client.ehlo()
        if smtp.starttls:
            client.starttls(context=ssl.create_default_context())
            client.ehlo()
        if username is not None:
            client.login(username, password or "")
        code, reply = client.mail(smtp.sender)
        if code != 250:
            return SendResult(False, failure=Failure.NOT_SENT, smtp_code=code,
                              error=f"not sent: {where} refused the sender ({code} {said(reply)})")
        for rcpt in recipients:
            code, reply = client.rcpt(rcpt)
            if code not in (250, 251):
                return SendResult(False, failure=Failure.NOT_SENT, smtp_code=code,
                                  error=f"not sent: {where} refused recipient {rcpt} ({code} {said(reply)})")
        code, reply = client.docmd("DATA")
        if code != 354:
            return SendResult(False, failure=Failure.NOT_SENT, smtp_code=code,
                              error=f"not sent: {where} refused DATA ({code} {said(reply)})")
        in_data = True  # from here on, the message may have reached the server
        client.send(data + b"\r\n.\r\n")
        code, reply = client.getreply()
    except (smtplib.SMTPException, OSError, ValueError) as exc:  # ValueError: what ssl refuses to set up
        if in_data:
            return SendResult(True, failure=Failure.UNKNOWN,
                              error=f"outcome unknown: the connection to {where} ended after the message was sent "
                                    f"({said(exc)}); verify outside before sending it again")
        code_of = getattr(exc, "smtp_code", None)
        return SendResult(False, failure=Failure.NOT_SENT, smtp_code=code_of if isinstance(code_of, int) else None,
                          error=f"not sent: {where}: {said(exc)}")
    finally:
        if client is not None:
            try:
                client.quit()
            except (smtplib.SMTPException, OSError):
                client.close()
    if 200 <= code < 300:
        return SendResult(True, smtp_code=code, response_tail=said(reply))
    failure = Failure.MAIL_REJECTED if code >= 500 else Failure.NOT_SENT if code < 400 else Failure.MAIL_DEFERRED
    return SendResult(True, failure=failure, smtp_code=code, response_tail=said(reply),
                      error=f"{where} answered the message with {code} {said(reply)}")
