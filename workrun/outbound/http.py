"""Outbound HTTP: templates, the outbound guard and one bounded request (R-H1..R-H5).

Used by ``http`` nodes and HTTP reverse actions; it knows nothing of runs or the journal.

Load time (before anything runs; every problem is a :class:`~workrun.core.errors.ConfigError`):
:func:`parse_url` keeps scheme, host and port literal (a template there is refused) and
:func:`check_templates` checks brace balance, where ``{{ env.NAME }}`` may appear (header
values only) and that every named environment variable is set.

Send time: :func:`prepare` fills templates (values placed in the path or query are
percent-encoded, so a value can never add ``/ ? # &``; ``{{ env.NAME }}`` is read now and
kept out of what is shown), then :func:`send` resolves the host once, checks every address
against the guard (:func:`check_address`), connects to a checked address with the right
``Host`` header and TLS server name, follows no redirect, bounds sizes and runs the whole
exchange under one timeout. The outcome is data (:class:`SendResult` with a
:class:`~workrun.core.outcomes.Failure` kind), never an exception.

Rules of the guard (R-H3): refused unless allowed by ``http_allow`` or ``WORKRUN_HTTP_ALLOW``:
unspecified, loopback, private (10/8, 172.16/12, 192.168/16, fc00::/7), link-local
(169.254/16, fe80::/10), carrier-grade NAT (100.64/10), multicast, reserved (anything else
that is not globally routable), and the IPv4-mapped, IPv4-compatible, 6to4 and NAT64 IPv6
forms of all of these.
"""

from __future__ import annotations

import contextlib
import contextvars
import ipaddress
import json
import os
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote

from workrun.core import settings
from workrun.core.errors import ConfigError, ConfigErrors
from workrun.core.outcomes import Failure
from workrun.core.redact import redact_value, remember
from workrun.core.structs import field, struct
from workrun.core.templates import strings
from workrun_sdk import _wire

if TYPE_CHECKING:  # socket and ssl are imported where a request is sent: a workflow load needs neither (R-P3)
    import socket
    import ssl

__all__ = [
    "ALLOW_ENV",
    "AllowList",
    "Connector",
    "ConnectorLimits",
    "EnvLater",
    "HEADERS_LIMIT",
    "METHODS",
    "PreparedRequest",
    "RequestError",
    "REQUEST_LIMIT",
    "RESPONSE_LIMIT",
    "SendResult",
    "UnsafeRequestError",
    "TAIL_LIMIT",
    "UrlTemplate",
    "action_field",
    "allow_from_env",
    "check_action",
    "check_address",
    "check_request",
    "check_relative",
    "check_templates",
    "connector_of",
    "env_names",
    "env_needed",
    "env_not_needed",
    "fill_text",
    "fill_value",
    "header_value_problem",
    "from_queued",
    "parse_allow",
    "parse_url",
    "prepare",
    "remember_declared",
    "resolve_host",
    "send",
    "send_guarded",
    "whole_reference",
]

METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
REQUEST_LIMIT = 1024 * 1024  # bytes of request body (R-H4)
RESPONSE_LIMIT = 1024 * 1024  # bytes of response body read (R-H4)
HEADERS_LIMIT = 64 * 1024  # bytes of request or response headers (R-H4)
TAIL_LIMIT = 2048  # bytes of response body kept as an attempt's ``response_tail`` (R-H7)
ALLOW_ENV = "WORKRUN_HTTP_ALLOW"
KEPT_HEADERS = ("content-type", "location", "etag")

_TEMPLATE = re.compile(r"\{\{\s*([^{}]*?)\s*\}\}")
_ENV_REF = re.compile(r"^env\.([A-Za-z_][A-Za-z0-9_]*)$")
_HEADER_NAME = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")


# -- templates --------------------------------------------------------------------------------------------------------


def _check_braces(text: str, file: str | None, field: str) -> None:
    rest = _TEMPLATE.sub("", text)
    if "{{" in rest or "}}" in rest:
        raise ConfigError("'{{' without '}}' (or the reverse): write templates as {{ NAME }}", file=file, field=field)


def env_names(text: str) -> list[str]:
    """Names of the ``{{ env.NAME }}`` templates in ``text``, in order."""
    out = []
    for m in _TEMPLATE.finditer(text):
        env = _ENV_REF.match(m.group(1))
        if env:
            out.append(env.group(1))
    return out


def remember_declared(spec: Any, environ: Mapping[str, str] | None = None) -> None:
    """Redact, in what this process stores or shows from now on, the value of every ``{{ env.NAME }}`` that
    ``spec`` (a run's recorded workflow, JSON-like) writes where the environment is read, a header value (of a
    node, a connector, a reverse action, ``[notify]``) or ``[smtp]``'s ``username`` and ``password``, and that
    is set now (R-X2): a secret comes back redacted even in an answer that arrives before any request of this
    process read it (after a restart, on another worker). ``{{ env.NAME }}`` anywhere else (an input's default)
    is data, never read, and no secret. Cheap: one walk of the spec."""
    environ = os.environ if environ is None else environ
    names: set[str] = set()
    stack: list[Any] = [spec]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            for key, inner in value.items():
                if key == "headers" and isinstance(inner, dict):
                    names.update(n for v in inner.values() if isinstance(v, str) for n in env_names(v))
                elif key == "smtp" and isinstance(inner, dict):
                    names.update(n for k in ("username", "password") if isinstance(inner.get(k), str)
                                 for n in env_names(inner[k]))
                else:
                    stack.append(inner)
        elif isinstance(value, list):
            stack.extend(value)
    remember({name: environ[name] for name in names if name in environ})


@struct(frozen=True)
class UrlTemplate:
    """A URL whose scheme, host and port are literal; only the part after them may hold templates.

    Attributes:
        scheme: ``http`` or ``https``.
        host: the host name or address, without brackets, lower-cased.
        port: the port (the scheme's default when the URL gives none).
        explicit_port: True when the URL names the port.
        rest: the path, query and fragment as written (templates not yet filled), starting with ``/``,
            ``?`` or ``#``, or empty.
    """

    scheme: str
    host: str
    port: int
    explicit_port: bool
    rest: str

    @property
    def authority(self) -> str:
        """``host[:port]`` as it goes in the ``Host`` header (IPv6 in brackets)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}" if self.explicit_port else host

    def origin(self) -> str:
        """``scheme://authority``."""
        return f"{self.scheme}://{self.authority}"

    @classmethod
    def reference(cls, text: str) -> UrlTemplate:
        """A URL that is one whole template (R-K6): resolved when the request is prepared (:func:`prepare`)."""
        return cls("", "", 0, False, text)

    @property
    def ref(self) -> str | None:
        """The reference of a whole-template URL (:meth:`reference`), else None."""
        return whole_reference(self.rest) if not self.scheme else None


def parse_url(text: str, *, file: str | None = None, field: str = "url") -> UrlTemplate:
    """Split a URL template and check its literal part (R-H3).

    Args:
        text: the URL as written in the file, e.g. ``https://shop.example/api/orders/{{ original.result.body.id }}``.

    Returns:
        The parsed :class:`UrlTemplate`.

    Raises:
        ConfigError: not ``http``/``https``; no host; a template in the scheme, host or port;
            user info (``user:pass@``) in the URL; a bad port; unbalanced braces; a control character.
    """
    if not isinstance(text, str) or not text:
        raise ConfigError("must be a non-empty string", file=file, field=field)
    _check_braces(text, file, field)
    if any(c < " " or c == "\x7f" for c in text):
        raise ConfigError("holds a control character (a line break, a tab, …): write it percent-encoded",
                          file=file, field=field)
    scheme, sep, after = text.partition("://")
    if not sep:
        raise ConfigError("must be an http:// or https:// URL", file=file, field=field)
    if "{{" in scheme:
        raise ConfigError("the scheme must be literal, not a template (R-H3)", file=file, field=field)
    scheme = scheme.lower()
    if scheme not in ("http", "https"):
        raise ConfigError(f"scheme {scheme!r} is not allowed: only http and https", file=file, field=field)
    cut = min([i for i in (after.find("/"), after.find("?"), after.find("#")) if i >= 0], default=len(after))
    netloc, rest = after[:cut], after[cut:]
    if "{{" in netloc or "}}" in netloc:
        raise ConfigError("the host and port must be literal, not a template (R-H3): templates may go in the path "
                          "or query only", file=file, field=field)
    if "@" in netloc:
        raise ConfigError("user info in the URL is not allowed: send credentials in a header with "
                          "{{ env.NAME }}", file=file, field=field)
    if not netloc:
        raise ConfigError("the URL has no host", file=file, field=field)
    if netloc.startswith("["):
        end = netloc.find("]")
        if end < 0:
            raise ConfigError("unclosed '[' in the host", file=file, field=field)
        host, port_text = netloc[1:end], netloc[end + 1:]
        if port_text and not port_text.startswith(":"):
            raise ConfigError("bad host", file=file, field=field)
        port_text = port_text[1:]
        try:
            ipaddress.IPv6Address(host.split("%")[0])
        except ValueError:
            raise ConfigError(f"{host!r} in brackets is not an IPv6 address", file=file, field=field) from None
    else:
        host, _, port_text = netloc.partition(":")
    if not host or any(c in host for c in " \t\\%") or ":" in host and not netloc.startswith("["):
        raise ConfigError(f"bad host {host!r}", file=file, field=field)
    explicit = bool(port_text)
    if explicit:
        if not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise ConfigError(f"bad port {port_text!r}", file=file, field=field)
        port = int(port_text)
    else:
        port = 443 if scheme == "https" else 80
    return UrlTemplate(scheme, host.lower(), port, explicit, rest)


def whole_reference(text: str) -> str | None:
    """The reference when ``text`` is one whole template (``{{ original.result.headers.location }}``: a URL
    reference resolved at send time, R-K6), else None."""
    whole = _TEMPLATE.fullmatch(text.strip()) if isinstance(text, str) else None
    return whole.group(1) if whole else None


@struct(frozen=True)
class ConnectorLimits:
    """What a connector's gate keeps per process (R-K1): its name, ``rate`` ``(requests, per seconds)`` and
    ``breaker`` ``(failures, reset seconds)``, each None when not set."""

    name: str
    rate: tuple[int, float] | None = None
    breaker: tuple[int, float] | None = None

    def data(self) -> dict[str, Any]:
        """JSON-safe (a request queued for a worker carries it)."""
        return {"name": self.name, "rate": list(self.rate) if self.rate else None,
                "breaker": list(self.breaker) if self.breaker else None}

    @classmethod
    def from_data(cls, data: Mapping[str, Any] | None) -> ConnectorLimits | None:
        """The limits :meth:`data` stored (None for none)."""
        if not data:
            return None
        rate, breaker = data.get("rate"), data.get("breaker")
        return cls(str(data["name"]), (int(rate[0]), float(rate[1])) if rate else None,
                   (int(breaker[0]), float(breaker[1])) if breaker else None)


@struct(frozen=True)
class Connector:
    """A ``[connectors.NAME]`` as requests use it (R-K1).

    Attributes:
        base: its ``base_url`` parsed (literal scheme, host, port and path prefix).
        headers: header name -> templated value; a request's own headers override them.
        limits: the rate limit and circuit breaker.
    """

    base: UrlTemplate
    headers: dict[str, str]
    limits: ConnectorLimits

    @property
    def name(self) -> str:
        return self.limits.name

    @property
    def prefix(self) -> str:
        """The base URL's path prefix without a trailing ``/`` ("" for none)."""
        return self.base.rest.split("?", 1)[0].split("#", 1)[0].rstrip("/")

    def url(self, relative: str) -> UrlTemplate:
        """The request's URL template: ``relative`` (``/orders/{{ … }}``) under the base URL."""
        return UrlTemplate(self.base.scheme, self.base.host, self.base.port, self.base.explicit_port,
                           self.prefix + relative)


def connector_of(connectors: Mapping[str, Any] | None, name: str | None, *, file: str | None = None,
                 field: str = "connector") -> Connector | None:
    """The connector ``name`` of a workflow's ``connectors`` (its spec JSON or models), or None for no name.

    Raises:
        ConfigError: the workflow declares no such connector, or its ``base_url`` is not a literal http(s) URL
            with no query (naming the field).
    """
    if name is None:
        return None
    spec = (connectors or {}).get(name)
    if spec is None:
        known = ", ".join(sorted(connectors or {})) or "none"
        raise ConfigError(f"unknown connector {name!r} (declared: {known})", file=file, field=field)
    data = spec.model_dump() if hasattr(spec, "model_dump") else dict(spec)
    base = parse_url(data["base_url"], file=file, field=f"connectors.{name}.base_url")
    if "{{" in base.rest or "?" in base.rest or "#" in base.rest \
            or any(_decoded(seg).strip() in (".", "..") for seg in base.rest.split("/")):
        raise ConfigError("a connector's base_url is literal, with no query, fragment or dot segment", file=file,
                          field=f"connectors.{name}.base_url")
    rate, breaker = data.get("rate_limit"), data.get("circuit_breaker")
    limits = ConnectorLimits(name, (int(rate["requests"]), float(rate["per"])) if rate else None,
                             (int(breaker["failures"]), float(breaker["reset"])) if breaker else None)
    return Connector(base, dict(data.get("headers") or {}), limits)


def check_relative(written: str, *, file: str | None, field: str) -> None:
    """A connector request's ``url`` as written (R-K1): a path starting with ``/`` (or one whole template, R-K6),
    no ``..`` segment, no ``//``, no backslash, not absolute, no template in its first path segment.

    Raises:
        ConfigError: naming the field.
    """
    if whole_reference(written) is not None:
        return
    _check_braces(written, file, field)
    path = written.split("?", 1)[0].split("#", 1)[0]
    if not written.startswith("/") or "://" in written:
        raise ConfigError("a request through a connector has a relative url starting with / (its base_url gives "
                          "scheme, host and port)", file=file, field=field)
    if written.startswith("//") or "//" in path or "\\" in written:
        raise ConfigError("'//' and '\\' are not allowed in a connector's url (same origin, R-K1)", file=file,
                          field=field)
    if any(_decoded(seg).strip() in (".", "..") for seg in path.split("/")):
        raise ConfigError("'.' and '..' segments (in any spelling) are not allowed in a connector's url (same "
                          "origin, R-K1)", file=file, field=field)
    first = path.split("/")[1] if "/" in path[1:] or len(path) > 1 else ""
    if "{{" in first:
        raise ConfigError("the first path segment of a connector's url must be literal (R-K1)", file=file,
                          field=field)


class _Gate:
    """A connector's rate limit (sliding window) and circuit breaker in this process (R-K1)."""

    def __init__(self, limits: ConnectorLimits) -> None:
        self.limits = limits
        self._lock = threading.Lock()
        # the sends of the last ``per`` seconds: [monotonic time]; a send in flight counts from its admission, one
        # that ended from its end (so the server never sees more than ``requests`` in any ``per`` seconds)
        self._sends: list[list[float]] = []
        self._failures = 0
        self._opened: float | None = None  # monotonic time the circuit opened
        self._trial = False  # a half-open trial request is out

    def admit(self, deadline: float) -> list[float] | str | None:
        """Wait for the rate limit (within ``deadline``, monotonic) and the circuit; the send's slot (or None with
        no rate limit) when it may be sent, else why not (a string)."""
        name = self.limits.name
        with self._lock:
            if self.limits.breaker is not None and self._opened is not None:
                if time.monotonic() - self._opened < self.limits.breaker[1] or self._trial:
                    return f"circuit open for connector {name}"
                self._trial = True  # half-open: this one request is the trial
        if self.limits.rate is None:
            return None
        count, per = self.limits.rate
        while True:
            with self._lock:
                now = time.monotonic()
                self._sends = [t for t in self._sends if now - t[0] < per]
                if len(self._sends) < count:
                    slot = [now]
                    self._sends.append(slot)
                    return slot
                wait = min(t[0] for t in self._sends) + per - now
            if now + wait > deadline:
                with self._lock:
                    self._trial = False
                return f"rate limit of connector {name}"
            time.sleep(max(wait, 0.001))

    def settle(self, result: SendResult, slot: list[float] | None) -> None:
        """Count the outcome: a 5xx, a timeout, a refused or lost connection is a failure; a 2xx-4xx answer
        closes the circuit. The send's rate-limit slot counts from now on."""
        with self._lock:
            if slot is not None:
                slot[0] = time.monotonic()
        if self.limits.breaker is None:
            return
        failed = (result.status is not None and result.status >= 500) or (
            result.status is None and result.failure in (Failure.NOT_SENT, Failure.UNKNOWN))
        with self._lock:
            self._trial = False
            if not failed:
                self._failures, self._opened = 0, None
                return
            self._failures += 1
            if self._opened is not None or self._failures >= self.limits.breaker[0]:
                self._opened = time.monotonic()


_GATES: dict[ConnectorLimits, _Gate] = {}
_GATES_LOCK = threading.Lock()


def _gate(limits: ConnectorLimits | None) -> _Gate | None:
    """This process's gate of a connector (one per name and limits; a new process starts closed)."""
    if limits is None or (limits.rate is None and limits.breaker is None):
        return None
    with _GATES_LOCK:
        gate = _GATES.get(limits)
        if gate is None:
            gate = _GATES[limits] = _Gate(limits)
        return gate


_ENV_NEEDED: contextvars.ContextVar[bool] = contextvars.ContextVar("workrun_env_needed", default=True)


@contextlib.contextmanager
def env_not_needed() -> Iterator[None]:
    """Within it, a workflow loads without its ``{{ env.NAME }}`` variables being set: for a command that sends
    nothing (``workrun graph``, R-L2). Every other check is made as usual."""
    token = _ENV_NEEDED.set(False)
    try:
        yield
    finally:
        _ENV_NEEDED.reset(token)


def env_needed() -> bool:
    """False within :func:`env_not_needed`: an unset ``{{ env.NAME }}`` is then not a config error."""
    return _ENV_NEEDED.get()


def check_templates(value: Any, *, file: str | None, field: str, allow_env: bool,
                    check_ref: Callable[[str, str], None], check_env: bool = True) -> None:
    """Check every template in ``value`` (a string, table or list) before anything runs.

    Args:
        value: the templated value (URL rest, a header value, a body).
        field: its field path for messages, e.g. ``nodes.order.headers.Authorization``.
        allow_env: True only for header values (R-H5).
        check_ref: called as ``check_ref(field, reference)`` for every non-``env`` reference; raises
            ConfigError when the reference is not allowed or has no value.
        check_env: also require every ``{{ env.NAME }}`` to be set now (when loading a workflow to run).

    Raises:
        ConfigError: unbalanced braces; ``{{ env.NAME }}`` outside a header value; an environment variable
            that is not set (``environment variable NAME is not set``); whatever ``check_ref`` raises.
    """
    for where, text in strings(value, field):
        _check_braces(text, file, where)
        for m in _TEMPLATE.finditer(text):
            ref = m.group(1)
            env = _ENV_REF.match(ref)
            if env:
                if not allow_env:
                    raise ConfigError(f"{{{{ {ref} }}}}: environment variables are allowed only in header values "
                                      "(R-H5), so a secret never lands in a URL or body", file=file, field=where)
                if check_env and env_needed() and env.group(1) not in os.environ:
                    raise ConfigError(f"environment variable {env.group(1)} is not set", file=file, field=where)
                continue
            if ref.startswith("env.") or ref == "env":
                raise ConfigError(f"bad template {{{{ {ref} }}}}: use env.NAME", file=file, field=where)
            check_ref(where, ref)


_ACTION_REF = re.compile(r"^(original\.(input|result)(\.[A-Za-z0-9_\-]+)*|operation_id|compensation_id|run_id|node_key"
                         r"|error|inputs\.[A-Za-z0-9_\-]+|data\.[A-Za-z0-9_\-]+)$")


def check_request(spec: Any, *, file: str | None, field: str, check_ref: Callable[[str, str], None],
                  check_env: bool = True, connectors: Mapping[str, Any] | None = None) -> UrlTemplate:
    """Check one request as written (an ``http`` node or a reverse action) before anything runs (R-H3, R-H5).

    Args:
        spec: anything with ``method``, ``url``, ``headers`` (name -> templated value) and ``body``.
        field: the field path of ``spec``, e.g. ``nodes.order`` or ``nodes.order.compensation``.
        check_ref: ``check_ref(field, reference)`` for every non-``env`` template; raises ConfigError.
        check_env: require every ``{{ env.NAME }}`` to be set now.
        connectors: the workflow's ``[connectors]``, for a request that names one (R-K1).

    Returns:
        The parsed URL (:meth:`UrlTemplate.reference` for a whole-template URL, R-K6).

    Raises:
        ConfigError: naming the field (see :func:`parse_url` and :func:`check_templates`); a header name
            that is not a token; a header Workrun sets itself (``Host``, ``Content-Length``,
            ``Idempotency-Key`` — R-H1); a header value whose text holds a line break, NUL or a character
            that is not ASCII.
    """
    problems: list[ConfigError] = []  # every error of the request, not just its first (R-L1)

    def checked(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except ConfigError as exc:
            problems.append(exc)
            return None

    def done(url: UrlTemplate | None) -> UrlTemplate:
        if problems:
            raise ConfigErrors.of(problems)
        assert url is not None
        return url

    if getattr(spec, "kind", "http") == "update_data":  # R-K4: templates in its values only
        checked(check_templates, spec.update_data.values, file=file, field=f"{field}.update_data.values",
                allow_env=False, check_ref=check_ref)
        for name in sorted(set(spec.update_data.values) - set(spec.update_data.fields)):
            problems.append(ConfigError(f"{name!r} is not one of its fields", file=file,
                                        field=f"{field}.update_data.values.{name}"))
        return done(UrlTemplate.reference(""))
    if getattr(spec, "kind", "http") == "email":  # an email action (R-K2): literal addresses, a body template
        email = spec.email
        for i, address in enumerate([*email.to, *email.cc]):
            if "{{" in address or "@" not in address or any(c in address for c in "<>,") \
                    or any(ord(c) < 32 or ord(c) == 127 for c in address):
                problems.append(ConfigError(f"{address!r} is not one literal email address", file=file,
                                            field=f"{field}.email.{'to' if i < len(email.to) else 'cc'}"))
        checked(check_templates, email.body, file=file, field=f"{field}.email.body", allow_env=False,
                check_ref=check_ref)
        return done(UrlTemplate.reference(""))
    name_of = getattr(spec, "connector", None)
    # where it is written: an sms action's in its sms table (conformance review: named as if beside it)
    written = f"{field}.sms.connector" if getattr(spec, "kind", "http") == "sms" else f"{field}.connector"
    connector = checked(connector_of, connectors, name_of, file=file, field=written) if name_of else None
    ref = whole_reference(spec.url)
    url: UrlTemplate | None = None
    if ref is not None:  # a URL reference, resolved against the original request's or connector's origin (R-K6)
        checked(check_templates, spec.url, file=file, field=f"{field}.url", allow_env=False, check_ref=check_ref)
        url = UrlTemplate.reference(spec.url)
    elif name_of is not None:
        if connector is not None:  # (an unknown connector is reported above)
            try:
                check_relative(spec.url, file=file, field=f"{field}.url")
                url = connector.url(spec.url)
            except ConfigError as exc:
                problems.append(exc)
            else:
                checked(check_templates, url.rest, file=file, field=f"{field}.url", allow_env=False,
                        check_ref=check_ref)
    else:
        url = checked(parse_url, spec.url, file=file, field=f"{field}.url")
        if url is not None:
            checked(check_templates, url.rest, file=file, field=f"{field}.url", allow_env=False, check_ref=check_ref)
    for name, value in spec.headers.items():
        checked(_check_header, name, value, file=file, where=f"{field}.headers.{name}", check_ref=check_ref,
                check_env=check_env)
    if spec.body is not None:
        checked(check_templates, spec.body, file=file, field=f"{field}.body", allow_env=False, check_ref=check_ref)
    return done(url)


def _check_header(name: str, value: Any, *, file: str | None, where: str, check_ref: Callable[[str, str], None],
                  check_env: bool) -> None:
    """One header of a request as written (see :func:`check_request`).

    Raises:
        ConfigError: naming ``where``.
    """
    if not _HEADER_NAME.match(name):
        raise ConfigError("is not a valid header name", file=file, field=where)
    if name.lower() in ("host", "content-length", "transfer-encoding", "connection", "idempotency-key"):
        raise ConfigError(f"{name} is set by Workrun, not by the file", file=file, field=where)
    if any(c in part for _, part in strings(value, where) for c in "\r\n\x00"):
        raise ConfigError("holds a line break or NUL: a header value is one line", file=file, field=where)
    if not all(part.isascii() for _, part in strings(value, where)):
        raise ConfigError("holds a character that is not ASCII: header values are ASCII (send such text in "
                          "the body)", file=file, field=where)
    check_templates(value, file=file, field=where, allow_env=True, check_ref=check_ref, check_env=check_env)


def action_field(compensation: str, action: Any) -> str:
    """Where an App's reverse action is written, under its ``compensation`` table's field ``compensation``: an
    HTTP request in its ``http`` table, an ``sms``, ``email`` or ``update_data`` action beside it (their own
    tables are named below by :func:`check_request`; conformance review: every kind was named ``….http``)."""
    return f"{compensation}.http" if getattr(action, "kind", "http") == "http" else compensation


def check_action(spec: Any, *, file: str | None, field: str, check_env: bool = True,
                 inputs: Mapping[str, Any] | None = None, connectors: Mapping[str, Any] | None = None) -> UrlTemplate:
    """Check a reverse action (R-H6): :func:`check_request` with the action's template names.

    Allowed: ``original.input.…``, ``original.result.…``, ``operation_id``, ``compensation_id``,
    ``run_id``, ``node_key``, ``inputs.NAME`` (one of ``inputs`` when given), ``error``, and
    ``env.NAME`` in header values.

    Raises:
        ConfigError: naming the field.
    """

    def ref(where: str, reference: str) -> None:
        if not _ACTION_REF.match(reference):
            raise ConfigError(f"bad template {{{{ {reference} }}}}: a reverse action may use original.input.…, "
                              "original.result.…, operation_id, compensation_id, run_id, node_key, inputs.NAME, "
                              "error, and env.NAME in header values", file=file, field=where)
        if inputs is not None and reference.startswith("inputs.") and reference.split(".", 1)[1] not in inputs:
            raise ConfigError(f"{{{{ {reference} }}}} refers to an input that is neither in [inputs] nor given with "
                              "--input", file=file, field=where)

    return check_request(spec, file=file, field=field, check_ref=ref, check_env=check_env, connectors=connectors)


def _text(value: Any) -> str:
    """A filled value as text: a string as is, ``null`` as the empty string (R-X3), anything else as JSON."""
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _fill(text: str, lookup: Callable[[str], Any], encode: bool) -> str:
    """Fill the templates of ``text`` once (R-X1): a value is placed as data, never read as a template again.

    With ``encode`` (a URL's path or query) each value is percent-encoded (it can never add ``/ ? # &``), and
    an empty, whitespace-only or ``null`` value is refused (R-X3).

    Raises:
        KeyError: a reference has no value.
        UnsafeRequestError: an empty value in the URL.
    """
    def sub(m: re.Match[str]) -> str:
        raw = lookup(m.group(1))
        value = _text(raw)
        if not encode:
            return value
        if not value.strip():
            raise UnsafeRequestError(f"empty value for {{{{ {m.group(1)} }}}} in url")
        return quote(value, safe="")

    return _TEMPLATE.sub(sub, text)


def _decoded(text: str) -> str:
    """``text`` percent-decoded until nothing changes (``%252e`` -> ``%2e`` -> ``.``): how a lenient server may
    read it."""
    for _ in range(8):
        once = unquote(text)
        if once == text:
            break
        text = once
    return text


def fill_value(value: Any, lookup: Callable[[str], Any]) -> Any:
    """Fill the templates of a JSON-like value once (R-X1): a string that is one whole template keeps the value's
    JSON type (``null`` stays ``null``); others are filled as text."""
    return _fill_value(value, lookup)


def fill_text(text: str, lookup: Callable[[str], Any]) -> str:
    """Fill the templates of a plain text once (R-X1): values as text (``null`` as empty), never filled again."""
    return _fill(text, lookup, encode=False)


def resolve_host(host: str, port: int) -> list[IPAddress]:
    """The addresses ``host`` resolves to (an address literal as itself), for the outbound guard.

    Raises:
        OSError: it does not resolve.
    """
    return _resolve(host, port)


def _fill_target(rest: str, lookup: Callable[[str], Any]) -> str:
    """The path and query as sent: templates filled and percent-encoded; a filled path segment that is ``.`` or
    ``..`` (in any spelling) is refused, for it would climb out of the path the file wrote (SPEC §19).

    Raises:
        KeyError: a reference has no value.
        UnsafeRequestError: an empty value in the URL, or a dot segment made by a value.
    """
    path, sep, query = rest.split("#", 1)[0].partition("?")
    segments = []
    for segment in path.split("/"):
        filled = _fill(segment, lookup, encode=True)
        refs = _TEMPLATE.findall(segment)
        if refs and _decoded(filled).strip() in (".", ".."):
            raise UnsafeRequestError(f"unsafe path from {{{{ {refs[0]} }}}}")
        segments.append(filled)
    return "/".join(segments) + (sep + _fill(query, lookup, encode=True) if sep else "")


def _fill_value(value: Any, lookup: Callable[[str], Any]) -> Any:
    if isinstance(value, dict):
        return {k: _fill_value(v, lookup) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill_value(v, lookup) for v in value]
    if not isinstance(value, str):
        return value
    whole = _TEMPLATE.fullmatch(value.strip())
    if whole:
        return lookup(whole.group(1))
    return _fill(value, lookup, encode=False)


# -- the request ------------------------------------------------------------------------------------------------------


@struct
class PreparedRequest:
    """One request ready to send.

    Attributes:
        method: ``GET`` | ``POST`` | ``PUT`` | ``PATCH`` | ``DELETE``.
        url: the parsed URL (literal origin).
        target: the path and query as sent, templates filled and percent-encoded (no fragment).
        headers: header name -> value as sent (secrets included; never store this).
        shown_headers: the same with ``{{ env.NAME }}`` left as template text (safe to store and show).
        body: the body's bytes (None for no body).
        shown_body: the body as journaled: a JSON value for a table, text for a string, or None.
        timeout: seconds for the whole exchange (R-H4).
        secrets: environment variable name -> the value placed in a header (redacted in every form from anything
            recorded, R-X2).
        header_parts: header name -> ``[["text", TEXT] | ["env", NAME], ...]``: the value as filled except
            that ``{{ env.NAME }}`` stays a reference (what :meth:`queued` stores; never a secret).
        connector: the connector it goes through (its rate limit and circuit breaker, R-K1), or None.
    """

    method: str
    url: UrlTemplate
    target: str
    headers: dict[str, str]
    shown_headers: dict[str, str]
    body: bytes | None
    shown_body: Any
    timeout: float
    secrets: dict[str, str] = field(default_factory=dict)
    header_parts: dict[str, list[list[str]]] = field(default_factory=dict)
    connector: ConnectorLimits | None = None

    @property
    def full_url(self) -> str:
        """The URL as sent (with the original host; never contains a secret)."""
        return self.url.origin() + self.target

    def shown(self) -> dict[str, Any]:
        """The request as journaled (R-H1): ``{method, url, headers, body}`` (and ``connector``, R-K1) with secrets
        redacted (R-H5)."""
        shown = {"method": self.method, "url": self.full_url, "headers": dict(self.shown_headers),
                 "body": self.shown_body}
        return {**shown, "connector": self.connector.name} if self.connector is not None else shown


    def queued(self) -> dict[str, Any]:
        """The request as a worker may queue it for another to send (R-S2, R-H5): everything filled except
        ``{{ env.NAME }}`` in header values, kept as references (so nothing secret is stored). JSON-safe;
        :func:`from_queued` builds the request again where it is sent."""
        return {"method": self.method, "url": self.url.origin(), "target": self.target,
                "headers": {k: [list(p) for p in v] for k, v in self.header_parts.items()},
                "body": self.body.decode("utf-8") if self.body is not None else None,
                "shown_body": self.shown_body, "timeout": self.timeout,
                "connector": self.connector.data() if self.connector is not None else None}


def from_queued(data: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> PreparedRequest:
    """Build a queued request (:meth:`PreparedRequest.queued`) again, reading ``env.NAME`` from ``environ``
    (default ``os.environ``: the sending worker's own environment) now (R-H5).

    Raises:
        RequestError: an environment variable is not set on this machine, or a filled header value holds a
            line break, NUL or a character that is not ASCII.
    """
    environ = os.environ if environ is None else environ
    sent: dict[str, str] = {}
    shown: dict[str, str] = {}
    secrets: dict[str, str] = {}
    for name, parts in data["headers"].items():
        value, text = [], []
        for kind, part in parts:
            if kind == "env":
                if part not in environ:
                    raise RequestError(f"environment variable {part} is not set on this worker")
                secrets[part] = environ[part]
                remember({part: environ[part]})  # redacted in other answers too (R-X2)
                value.append(environ[part])
                text.append("{{ env." + part + " }}")
            else:
                value.append(part)
                text.append(part)
        sent[name] = "".join(value)
        problem = header_value_problem(sent[name])
        if problem:
            raise RequestError(f"header {name}: the filled value {problem}")
        shown[name] = "".join(text)
    body = data["body"].encode("utf-8") if data["body"] is not None else None
    return PreparedRequest(data["method"], parse_url(data["url"]), data["target"], sent, shown, body,
                           data["shown_body"], float(data["timeout"]), {k: v for k, v in secrets.items() if v},
                           {k: [list(p) for p in v] for k, v in data["headers"].items()},
                           ConnectorLimits.from_data(data.get("connector")))


_CONTROL = frozenset(chr(c) for c in (*range(0x20), 0x7F)) - {"\t"}


def header_value_problem(value: str, *, ends: bool = True) -> str | None:
    """What keeps a filled header value from being sent as it is, as words after "the filled value" (None when
    nothing does): a line break or NUL, another control character, a character that is not ASCII, or a space
    or tab at either end (HTTP has no such value: the client refuses it as it starts to send, which read as a
    request sent and lost: an empty ``{{ env.TOKEN }}`` after ``Bearer``, adversarial review). Checked before
    anything is sent, so such a request is ``failed``, not sent (R-H2). ``ends=False``: the ends are not checked
    (a value prepared with :class:`EnvLater`, whose ``{{ env.NAME }}`` reads as empty until it is sent)."""
    if any(c in value for c in "\r\n\0"):
        return "holds a line break or NUL"
    if not value.isascii():
        return "holds a character that is not ASCII"
    if any(c in _CONTROL for c in value):
        return "holds a control character"
    if ends and value != value.strip(" \t"):
        return "begins or ends with a space or tab (an empty value filled in?)"
    return None


class RequestError(ValueError):
    """Raised by :func:`prepare` when the filled request cannot be sent (message names the field, no secret)."""


class UnsafeRequestError(RequestError):
    """A filled value would send the request somewhere the file did not write: an empty or ``null`` value in a
    URL path segment or query value ("empty value for {{ … }} in url", R-X3), or a path segment made ``.`` or
    ``..`` ("unsafe path from {{ … }}"). Final: the call or attempt fails, never retried (a dead letter at once).
    """


class EnvLater(Mapping[str, str]):
    """The environment a request is prepared with when ``{{ env.NAME }}`` is read later, where it is sent (a
    stored ticket action or notification, a request queued for a worker, R-H5, R-X1): every name reads as empty
    here; the header keeps the typed reference (:attr:`PreparedRequest.header_parts`)."""

    def __getitem__(self, name: str) -> str:
        return ""

    def __contains__(self, name: object) -> bool:
        return True

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


def prepare(*, method: str, url: UrlTemplate, headers: Mapping[str, str], body: Any, timeout: float,
            lookup: Callable[[str], Any], idempotency_key: str,
            environ: Mapping[str, str] | None = None, connector: Connector | None = None,
            origin: UrlTemplate | None = None) -> PreparedRequest:
    """Fill a request's templates at send time (R-H1, R-H3, R-H5).

    Args:
        method: the HTTP method (upper case).
        url: from :func:`parse_url`.
        headers: header name -> templated value; ``{{ env.NAME }}`` read from ``environ`` now.
        body: a table (sent as JSON), a string (sent as text) or None; templates filled (a string that is
            exactly one template keeps the value's type).
        timeout: seconds for the whole exchange.
        lookup: ``lookup(reference) -> value`` for non-``env`` templates; raises KeyError when missing.
        idempotency_key: sent as ``Idempotency-Key`` (the operation id, or a reverse action's compensation id).
        environ: where ``env.NAME`` is read (default ``os.environ``).
        connector: the connector the request goes through (R-K1): its headers come first (the request's own
            override them), the filled URL must stay under its base URL, its limits travel with the request.
        origin: the original request's URL, against which a whole-template URL is resolved (R-K6; a
            connector's base URL is used first).

    Returns:
        The :class:`PreparedRequest`.

    Raises:
        KeyError: a template has no value (the reference is the argument).
        RequestError: an environment variable is not set, a header value holds a line break or a character
            that is not ASCII, the headers exceed 64 KiB or the body 1 MiB.
    """
    environ = os.environ if environ is None else environ
    if connector is not None:
        own = {h.lower() for h in headers}
        headers = {**{k: v for k, v in connector.headers.items() if k.lower() not in own}, **headers}
    ref = url.ref
    if ref is not None:
        url, target = _resolve_reference(ref, lookup(ref), connector.url("") if connector is not None else origin)
    else:
        target = _fill_target(url.rest, lookup) or "/"
        if not target.startswith("/"):
            target = "/" + target
    if connector is not None and connector.prefix and not (
            target == connector.prefix or target.startswith((connector.prefix + "/", connector.prefix + "?"))):
        raise UnsafeRequestError(f"url leaves connector {connector.name}'s base_url")
    secrets: dict[str, str] = {}

    def with_env(ref: str) -> Any:
        env = _ENV_REF.match(ref)
        if env:
            if env.group(1) not in environ:
                raise RequestError(f"environment variable {env.group(1)} is not set")
            secrets[env.group(1)] = environ[env.group(1)]
            remember({env.group(1): environ[env.group(1)]})  # redacted in other answers too (R-X2)
            return environ[env.group(1)]
        return lookup(ref)

    def without_env(ref: str) -> Any:
        return "{{ " + ref + " }}" if _ENV_REF.match(ref) else lookup(ref)

    sent: dict[str, str] = {}
    shown: dict[str, str] = {}
    parts: dict[str, list[list[str]]] = {}
    for name, template in headers.items():
        value = _fill(template, with_env, encode=False)
        problem = header_value_problem(value, ends=not isinstance(environ, EnvLater))
        if problem:
            raise RequestError(f"header {name}: the filled value {problem}")
        sent[name] = value
        shown[name] = _fill(template, without_env, encode=False)
        parts[name] = _parts(template, lookup)
    shown_body = _fill_value(body, lookup) if body is not None else None
    data: bytes | None = None
    lower = {k.lower() for k in sent}
    if isinstance(shown_body, str):
        data = shown_body.encode("utf-8")
        if "content-type" not in lower:
            sent["Content-Type"] = shown["Content-Type"] = "text/plain; charset=utf-8"
    elif shown_body is not None:
        data = json.dumps(shown_body, ensure_ascii=False).encode("utf-8")
        if "content-type" not in lower:
            sent["Content-Type"] = shown["Content-Type"] = "application/json"
    if "idempotency-key" not in lower:
        sent["Idempotency-Key"] = shown["Idempotency-Key"] = idempotency_key
    for name in sent.keys() - parts.keys():  # added above: literal text
        parts[name] = [["text", sent[name]]]
    if data is not None and len(data) > REQUEST_LIMIT:
        raise RequestError(f"request body is {len(data)} bytes, over 1 MiB")
    if sum(len(k) + len(v.encode("utf-8")) + 4 for k, v in sent.items()) > HEADERS_LIMIT:
        raise RequestError("request headers over 64 KiB")
    return PreparedRequest(method, url, target, sent, shown, data, shown_body, float(timeout),
                           {k: v for k, v in secrets.items() if v}, parts,
                           connector.limits if connector is not None else None)


def _resolve_reference(ref: str, value: Any, origin: UrlTemplate | None) -> tuple[UrlTemplate, str]:
    """A whole-template URL's value as ``(url, target)`` (R-K6): a path starting with ``/`` keeps its ``/``; an
    absolute URL must have the origin's scheme, host and port; anything else is not sent.

    Raises:
        UnsafeRequestError: "url from {{ … }} is not on ORIGIN" (another origin, ``//host``, an empty value, no
            origin at all), or a path segment made ``.``/``..``.
    """
    where = origin.origin() if origin is not None else "the original request's origin (it has none)"
    refusal = UnsafeRequestError(f"url from {{{{ {ref} }}}} is not on {where}")
    if origin is None or not isinstance(value, str) or not value.strip():
        raise refusal
    given_url = value.strip()
    if any(c <= " " or c == "\x7f" for c in given_url) or "\\" in given_url:
        raise refusal
    if given_url.startswith("/") and not given_url.startswith("//"):
        target = given_url.split("#", 1)[0]
    elif given_url.lower().startswith(("http://", "https://")):
        try:
            given = parse_url(given_url)
        except ConfigError:
            raise refusal from None
        if (given.scheme, given.host, given.port) != (origin.scheme, origin.host, origin.port):
            raise refusal
        target = given.rest.split("#", 1)[0] or "/"
        if not target.startswith("/"):
            target = "/" + target
    else:
        raise refusal
    if any(_decoded(seg).strip() in (".", "..") for seg in target.split("?", 1)[0].split("/")):
        raise UnsafeRequestError(f"unsafe path from {{{{ {ref} }}}}")
    return UrlTemplate(origin.scheme, origin.host, origin.port, origin.explicit_port, ""), target


def _parts(template: str, lookup: Callable[[str], Any]) -> list[list[str]]:
    """A header template as ``["text", TEXT]`` and ``["env", NAME]`` parts, other templates filled."""
    out: list[list[str]] = []
    at = 0
    for m in _TEMPLATE.finditer(template):
        if m.start() > at:
            out.append(["text", template[at:m.start()]])
        env = _ENV_REF.match(m.group(1))
        out.append(["env", env.group(1)] if env else ["text", _text(lookup(m.group(1)))])
        at = m.end()
    if at < len(template):
        out.append(["text", template[at:]])
    return out


# -- the guard --------------------------------------------------------------------------------------------------------

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_RULES: list[tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, str]] = [
    (ipaddress.ip_network(n), rule) for n, rule in (
        ("0.0.0.0/8", "unspecified"), ("::/128", "unspecified"),
        ("127.0.0.0/8", "loopback"), ("::1/128", "loopback"),
        ("10.0.0.0/8", "private"), ("172.16.0.0/12", "private"), ("192.168.0.0/16", "private"),
        ("fc00::/7", "private"),
        ("169.254.0.0/16", "link-local"), ("fe80::/10", "link-local"),
        ("100.64.0.0/10", "carrier-grade NAT"),
        ("224.0.0.0/4", "multicast"), ("ff00::/8", "multicast"),
        ("240.0.0.0/4", "reserved"), ("fec0::/10", "reserved"),
    )
]


@struct(frozen=True)
class AllowEntry:
    """One ``http_allow`` entry: an address or network, optionally one port."""

    network: ipaddress.IPv4Network | ipaddress.IPv6Network
    port: int | None
    text: str

    def matches(self, address: IPAddress, port: int) -> bool:
        """True when ``address:port`` is allowed by this entry."""
        if self.port is not None and self.port != port:
            return False
        return address.version == self.network.version and address in self.network


@struct(frozen=True)
class AllowList:
    """Addresses the guard lets through (``http_allow`` plus ``WORKRUN_HTTP_ALLOW``)."""

    entries: tuple[AllowEntry, ...] = ()

    def __add__(self, other: AllowList) -> AllowList:
        return AllowList(self.entries + other.entries)

    def allows(self, address: IPAddress, port: int) -> bool:
        """True when some entry allows ``address:port``."""
        return any(e.matches(address, port) for e in self.entries)

    def texts(self) -> list[str]:
        """The entries as written (for storing with a run or a compensation)."""
        return [e.text for e in self.entries]


def _parse_entry(text: str) -> AllowEntry:
    network, port = settings.parse_allow_entry(text)
    return AllowEntry(network, port, text.strip())


def parse_allow(entries: Any, *, file: str | None = None, field: str = "http_allow") -> AllowList:
    """Parse ``http_allow`` (R-H3): ``["127.0.0.1:8080", "10.1.2.0/24", "[::1]:8080", "fd00::/8"]``.

    Raises:
        ConfigError: not a list of strings; an entry that is not ``ADDRESS``, ``ADDRESS:PORT``,
            ``[IPv6]:PORT`` or ``NETWORK/PREFIX`` (host names are not accepted: the guard checks addresses).
    """
    if not isinstance(entries, list) or not all(isinstance(e, str) for e in entries):
        raise ConfigError('must be a list of strings like ["127.0.0.1:8080", "10.1.2.0/24"]', file=file, field=field)
    out = []
    for i, text in enumerate(entries):
        try:
            out.append(_parse_entry(text))
        except ValueError:
            raise ConfigError(f"{text!r} is not an address, ADDRESS:PORT, [IPv6]:PORT or a network like "
                              "10.1.2.0/24", file=file, field=f"{field}[{i}]") from None
    return AllowList(tuple(out))


def allow_from_env(environ: Mapping[str, str] | None = None) -> AllowList:
    """Parse ``WORKRUN_HTTP_ALLOW`` (comma-separated, same syntax as ``http_allow``).

    Raises:
        ConfigError: naming the variable and what it accepts.
    """
    environ = os.environ if environ is None else environ
    text = environ.get(ALLOW_ENV, "")
    parts = [p.strip() for p in text.split(",") if p.strip()]
    try:
        return AllowList(tuple(_parse_entry(p) for p in parts))
    except ValueError:
        raise ConfigError("must be a comma-separated list of addresses, ADDRESS:PORT, [IPv6]:PORT or networks like "
                          f"10.1.2.0/24 (got {text!r})", field=ALLOW_ENV) from None


def _embedded_v4(address: ipaddress.IPv6Address) -> tuple[ipaddress.IPv4Address, str] | None:
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped, "IPv4-mapped"
    packed = address.packed
    if packed[:12] == bytes(12) and int(address) > 1:
        return ipaddress.IPv4Address(packed[12:]), "IPv4-compatible"
    if address.sixtofour is not None:
        return address.sixtofour, "6to4"
    if packed[:12] == bytes.fromhex("0064ff9b0000000000000000"):
        return ipaddress.IPv4Address(packed[12:]), "NAT64"
    return None


def _rule(address: IPAddress) -> str | None:
    for network, rule in _RULES:
        if address.version == network.version and address in network:
            return rule
    if isinstance(address, ipaddress.IPv6Address):
        inner = _embedded_v4(address)
        if inner is not None:  # judged by the IPv4 address it carries
            inner_rule = _rule(inner[0])
            return f"{inner_rule}, {inner[1]} {inner[0]}" if inner_rule else None
    if not address.is_global:
        return "reserved"
    return None


def check_address(address: str | IPAddress, port: int, allow: AllowList = AllowList()) -> str | None:
    """The guard's verdict on one resolved address (R-H3).

    Args:
        address: an IPv4 or IPv6 address (an IPv6 zone suffix is ignored).
        port: the destination port (``http_allow`` entries may name one).
        allow: what ``http_allow`` / ``WORKRUN_HTTP_ALLOW`` let through.

    Returns:
        None when the address may be used, else the refusal line
        ``refused by the outbound guard: ADDRESS (RULE)``.
    """
    ip = ipaddress.ip_address(address.split("%")[0]) if isinstance(address, str) else address
    rule = _rule(ip)
    if rule is None or allow.allows(ip, port):
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None and allow.allows(ip.ipv4_mapped, port):
        return None
    return f"refused by the outbound guard: {_show(ip)} ({rule})"


def _show(ip: IPAddress) -> str:
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return f"::ffff:{ip.ipv4_mapped}"
    return str(ip)


# -- sending ----------------------------------------------------------------------------------------------------------


@struct
class SendResult:
    """What happened to one request (R-H1, R-H2).

    Attributes:
        sent: True when request bytes may have reached the server (False: nothing was sent).
        status: the HTTP status, or None when no answer came.
        headers: ``content-type``, ``location`` and ``etag`` of the response (those present).
        body: the response body: parsed JSON when the response says JSON, else text (None: no answer).
        failure: None when succeeded (2xx), else why not.
        error: one line for messages when not succeeded (never holds a secret).
        response_tail: the first 2 KiB of the response body as text (R-H7).
        address: the address the connection went to (None when none was made).
        smtp_code: an email's last SMTP reply code (None for HTTP, or when no answer came, R-K2).
    """

    sent: bool
    status: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    body: Any = None
    failure: Failure | None = None
    error: str | None = None
    response_tail: str | None = None
    address: str | None = None
    smtp_code: int | None = None

    @property
    def succeeded(self) -> bool:
        """True for a 2xx answer within the bounds."""
        return self.failure is None

    def result(self) -> dict[str, Any]:
        """The operation's result (R-H1): ``{status, headers, body}``."""
        return {"status": self.status, "headers": dict(self.headers), "body": self.body}

    def data(self) -> dict[str, Any]:
        """JSON-safe fields (stored by a worker that sent the request for its scheduler, R-S2)."""
        return {"sent": self.sent, "status": self.status, "headers": dict(self.headers), "body": self.body,
                "failure": self.failure.value if self.failure is not None else None, "error": self.error,
                "response_tail": self.response_tail, "address": self.address, "smtp_code": self.smtp_code}

    @classmethod
    def from_data(cls, data: dict[str, Any]) -> SendResult:
        """The result :meth:`data` stored."""
        failure = data.get("failure")
        return cls(**{**data, "failure": Failure(failure) if failure is not None else None})

    @classmethod
    def left_in_flight(cls, status: str) -> SendResult:
        """What became of a request (or an email) this process sent itself and a runner that died left with
        journal status ``status`` (R-R3, R-H2): from ``starting`` nothing left (failure ``not_started``); from
        ``running`` it may have: ``unknown``, never re-sent blindly."""
        if status == "starting":
            return cls(False, failure=Failure.NOT_STARTED,
                       error="not started: the runner stopped before the request was sent")
        return cls(True, failure=Failure.UNKNOWN,
                   error="outcome unknown: the runner stopped while the request was in flight; verify outside "
                   "before sending it again")


def _body_text(raw: bytes, encoding: str | None) -> str:
    """A response body as text, by its declared charset (UTF-8 when none is declared or Python knows no such
    codec; a body cut at 1 MiB may end inside a character: replaced). The body and its ``response_tail`` are read
    from the same text (a UTF-16 answer read as UTF-8 for the tail once kept a secret past redaction)."""
    try:
        return raw.decode(encoding or "utf-8", errors="replace")
    except LookupError:  # a charset Python does not know
        return raw.decode("utf-8", errors="replace")


def _tail(text: str, secrets: Mapping[str, str]) -> str:
    """A response's ``response_tail``: its text redacted whole, then cut to :data:`TAIL_LIMIT` bytes (cut first, a
    secret's encoded form across the cut, or moved into the kept part by redaction before it, left a piece of
    itself behind)."""
    return redact_value(text, secrets).encode("utf-8")[:TAIL_LIMIT].decode("utf-8", errors="ignore")


def _scrub(value: Any, secrets: Mapping[str, str]) -> Any:
    """``value`` with every form of every secret replaced by ``{{ env.NAME }}`` (R-X2)."""
    return redact_value(value, secrets)


def _resolve(host: str, port: int) -> list[IPAddress]:
    try:
        return [ipaddress.ip_address(host.split("%")[0])]
    except ValueError:
        pass
    import socket

    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    out: list[IPAddress] = []
    for family, *_rest, sockaddr in infos:
        if family not in (socket.AF_INET, socket.AF_INET6):
            continue
        ip = ipaddress.ip_address(str(sockaddr[0]).split("%")[0])
        if ip not in out:
            out.append(ip)
    return out


def _decode_body(text: str, content_type: str) -> Any:
    media = content_type.split(";", 1)[0].strip().lower()
    if media == "application/json" or media.endswith("+json"):
        try:
            return _wire.loads_strict(text) if text.strip() else None
        except ValueError:  # not JSON (NaN and Infinity included): kept as the text it is
            return text
    return text


class _Exchange:
    """Watches one exchange: when its bytes start going out, and its socket so the deadline can end it."""

    def __init__(self) -> None:
        self.sent = False
        self.timed_out = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()

    def trace(self, name: str, info: dict[str, Any]) -> None:
        if name == "connection.connect_tcp.complete":
            stream = info.get("return_value")
            sock = stream.get_extra_info("socket") if stream is not None else None
            if sock is not None:
                with self._lock:
                    self._sockets.append(sock)
                    if self.timed_out:
                        self._shut(sock)
        elif name == "http11.send_request_headers.started":
            self.sent = True

    @staticmethod
    def _shut(sock: socket.socket) -> None:
        import socket

        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def expire(self) -> None:
        with self._lock:
            self.timed_out = True
            for sock in self._sockets:
                self._shut(sock)


def send(request: PreparedRequest, allow: AllowList, *, before_send: Callable[[], None] | None = None,
         verify: ssl.SSLContext | None = None) -> SendResult:
    """Send one request through its connector's rate limit and circuit breaker (R-K1, when it names a connector)
    and the outbound guard (:func:`send_guarded`); never raises for network trouble.

    A request whose wait for the rate limit would pass its timeout fails, not sent ("rate limit of connector
    NAME"); while the circuit is open it fails at once, not sent ("circuit open for connector NAME").
    """
    gate = _gate(request.connector)
    if gate is None:
        return send_guarded(request, allow, before_send=before_send, verify=verify)
    slot = gate.admit(time.monotonic() + request.timeout)
    if isinstance(slot, str):
        return SendResult(False, failure=Failure.NOT_SENT, error=f"not sent: {slot}")
    result = send_guarded(request, allow, before_send=before_send, verify=verify)
    gate.settle(result, slot)
    return result


def send_guarded(request: PreparedRequest, allow: AllowList, *, before_send: Callable[[], None] | None = None,
                 verify: ssl.SSLContext | None = None) -> SendResult:
    """Send one request through the outbound guard (R-H2..R-H4); never raises for network trouble.

    The host is resolved once and every address is checked with :func:`check_address`; the connection
    goes only to an address that passed (tried in resolver order), never to a second lookup, with the
    original ``Host`` header and TLS server name. When none passes, the request is refused naming the
    first address and its rule. No proxy from the environment, no redirect followed. The whole exchange
    (connect, send, answer, body) is bounded by ``request.timeout`` seconds.

    Args:
        request: from :func:`prepare`.
        allow: addresses the guard lets through.
        before_send: called once after the guard let the request through and before anything is sent (the
            caller commits "about to send" to its journal here); if it raises, nothing is sent.
        verify: the TLS context that checks the server's certificate (default: the system's CAs via httpx).

    Returns:
        A :class:`SendResult`: 2xx = succeeded; other status = failed naming it and the first 200
        characters of the body; 3xx = failed "redirect to LOCATION not followed"; refused or failed before
        any byte was sent = failed with ``sent`` False; timeout or connection lost after sending = ``unknown``.
    """
    import httpx  # a base dependency; imported here so the CLI starts without it

    url = request.url
    deadline = time.monotonic() + request.timeout
    try:
        addresses = _resolve(url.host, url.port)
    except (OSError, UnicodeError) as exc:
        return SendResult(False, failure=Failure.NOT_SENT, error=f"cannot resolve {url.host}: {exc}")
    if not addresses:
        return SendResult(False, failure=Failure.NOT_SENT, error=f"cannot resolve {url.host}: no address")
    verdicts = [(address, check_address(address, url.port, allow)) for address in addresses]
    checked = [address for address, refusal in verdicts if refusal is None]
    if not checked:
        return SendResult(False, failure=Failure.REFUSED, error=verdicts[0][1])
    addresses = checked  # only addresses that passed are ever connected to
    headers = {"Host": url.authority, **request.headers}
    if before_send is not None:
        before_send()
    last_error = "no address"
    for address in addresses:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        host = f"[{address}]" if address.version == 6 else str(address)
        exchange = _Exchange()
        extensions: dict[str, Any] = {"trace": exchange.trace}
        if url.scheme == "https":
            extensions["sni_hostname"] = url.host
        timer = threading.Timer(remaining, exchange.expire)
        timer.daemon = True
        try:
            tls = verify if verify is not None else (_default_tls() if url.scheme == "https" else False)
            with httpx.Client(trust_env=False, follow_redirects=False, timeout=httpx.Timeout(remaining),
                              verify=tls) as client:
                timer.start()
                req = client.build_request(request.method, f"{url.scheme}://{host}:{url.port}{request.target}",
                                           headers=headers, content=request.body, extensions=extensions)
                response = client.send(req, stream=True)
                try:
                    return _read(response, request, exchange, str(address))
                finally:
                    response.close()
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
            if exchange.sent:
                return _lost(request, exchange, str(address), exc)
            last_error = f"cannot connect to {url.authority} ({address}): {_reason(exc)}"
            if exchange.timed_out or isinstance(exc, httpx.ConnectTimeout):
                last_error = f"cannot connect to {url.authority} ({address}) within {request.timeout:g} s"
        except httpx.HTTPError as exc:
            if not exchange.sent:
                return SendResult(False, failure=Failure.NOT_SENT, address=str(address),
                                  error=_scrub(f"request not sent to {url.authority}: {_reason(exc)}",
                                               request.secrets))
            return _lost(request, exchange, str(address), exc)
        except OSError as exc:
            if exchange.sent:
                return _lost(request, exchange, str(address), exc)
            last_error = f"cannot connect to {url.authority} ({address}): {exc}"
        except Exception as exc:  # anything else ends as data too: sent -> unknown, else not sent
            if exchange.sent:
                return _lost(request, exchange, str(address), exc)
            return SendResult(False, failure=Failure.NOT_SENT, address=str(address),
                              error=_scrub(f"request not sent to {url.authority}: {type(exc).__name__}: "
                                           f"{_reason(exc)}", request.secrets))
        finally:
            timer.cancel()
    return SendResult(False, failure=Failure.NOT_SENT, error=_scrub(last_error, request.secrets))


_TLS: list[ssl.SSLContext] = []
_TLS_LOCK = threading.Lock()


def _default_tls() -> ssl.SSLContext:
    """One TLS context with httpx's default CA bundle, built once (loading the CAs costs tens of ms per build)."""
    import httpx

    with _TLS_LOCK:
        if not _TLS:
            _TLS.append(httpx.create_ssl_context())
        return _TLS[0]


def _reason(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else type(exc).__name__


def _lost(request: PreparedRequest, exchange: _Exchange, address: str, exc: BaseException) -> SendResult:
    import httpx

    if exchange.timed_out or isinstance(exc, httpx.TimeoutException):
        what = f"no answer within {request.timeout:g} s after the request was sent"
    else:
        what = f"connection lost after the request was sent ({_scrub(_reason(exc), request.secrets)})"
    return SendResult(True, failure=Failure.UNKNOWN, address=address,
                      error=f"outcome unknown: {what}; verify outside before sending it again")


def _read(response: Any, request: PreparedRequest, exchange: _Exchange, address: str) -> SendResult:
    import httpx

    size = sum(len(k) + len(v) + 4 for k, v in response.headers.raw)
    kept = _scrub({k: response.headers[k] for k in KEPT_HEADERS if k in response.headers}, request.secrets)
    status = response.status_code
    if size > HEADERS_LIMIT:
        return SendResult(True, status, kept, None, Failure.BAD_RESPONSE,
                          f"HTTP {status}: response headers over 64 KiB", None, address)
    chunks: list[bytes] = []
    total = 0
    try:
        for chunk in response.iter_bytes():
            total += len(chunk)
            if total > RESPONSE_LIMIT:
                tail = _tail(_body_text(b"".join(chunks), response.charset_encoding), request.secrets)
                return SendResult(True, status, kept, None, Failure.BAD_RESPONSE, f"HTTP {status}: response over 1 MiB",
                                  tail, address)
            chunks.append(chunk)
    except (httpx.HTTPError, OSError) as exc:
        return _lost(request, exchange, address, exc)
    text = _body_text(b"".join(chunks), response.charset_encoding)
    body = _scrub(_decode_body(text, kept.get("content-type", "")), request.secrets)
    tail = _tail(text, request.secrets)
    result = SendResult(True, status, kept, body, None, None, tail, address)
    if 200 <= status < 300:
        return result
    if 300 <= status < 400:
        result.failure = Failure.HTTP_STATUS
        result.error = f"HTTP {status}: redirect to {kept.get('location', '(no Location header)')} not followed"
        return result
    text = body if isinstance(body, str) else json.dumps(body, ensure_ascii=False)
    text = " ".join(text.split())[:200]
    result.failure = Failure.HTTP_STATUS
    result.error = f"HTTP {status}" + (f": {text}" if text else "")
    return result
