"""Every ``WORKRUN_*`` environment setting, read and checked in one place before anything runs (SPEC §17).

A bad value is a :class:`~workrun.core.errors.ConfigError` (exit 2) whose one line
names the variable and what it accepts, e.g.
``error: WORKRUN_CONCURRENCY: must be an integer from 1 to 1024, not 'abc'``.
Unset or empty means the default. ``WORKRUN_CALL_DIR`` is not a setting: the
runner sets it for App processes (and strips every ``WORKRUN_*`` from their
environment), so it is not read here.

Other modules read settings through :func:`current` (cheap: a few dict lookups
and parses), never ``os.environ`` directly.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from workrun.core.errors import ConfigError
from workrun.core.fault_points import FAULT_POINTS
from workrun.core.structs import struct

__all__ = ["VARIABLES", "Settings", "current", "parse_allow_entry", "redact_url"]


@struct(frozen=True)
class Settings:
    """The checked settings of this process.

    Attributes:
        home: ``WORKRUN_HOME``, the data directory (None: platformdirs' user data dir).
        concurrency: ``WORKRUN_CONCURRENCY``, parallel calls/compensations per run (default 4).
        grace: ``WORKRUN_GRACE``, seconds between SIGTERM and SIGKILL when ending processes (default 5).
        sync_full: ``WORKRUN_SYNC=full``, SQLite ``synchronous=FULL`` (survive power loss).
        snapshot_max_bytes: ``WORKRUN_SNAPSHOT_MAX_BYTES``, bound on one code snapshot (default 64 MiB).
        fault: ``WORKRUN_FAULT`` (test-only crash hook), ``(point, nth)`` or None.
        max_pages: ``WORKRUN_MAX_PAGES`` (test-only full disk), journal page cap or None.
        launch: ``WORKRUN_LAUNCH``, how App processes start: ``fork`` (a fork server) or ``spawn``;
            None: the runner's default.
        journal_url: ``WORKRUN_JOURNAL``, a ``postgresql://`` URL of a shared journal, or None for the
            SQLite journal in the data directory (``sqlite``, the default).
        lease: ``WORKRUN_LEASE``, seconds a worker's claim on a run lasts without a heartbeat (default 30).
        http_allow: ``WORKRUN_HTTP_ALLOW``, entries the outbound guard lets through (R-H3).
        actor: ``WORKRUN_ACTOR``, who operator actions are recorded as (the dashboard sets ``ui:<OS user>``).
        metrics_port: ``WORKRUN_METRICS_PORT``, where ``run``/``resume`` serve Prometheus metrics on
            127.0.0.1 (R-F4), or None.
        db_retry: ``WORKRUN_DB_RETRY``, seconds a process keeps reconnecting to a shared journal's database
            after losing its connection before it gives up (default 300, R-F1).
    """

    home: Path | None = None
    concurrency: int = 4
    grace: float = 5.0
    sync_full: bool = False
    snapshot_max_bytes: int = 64 * 1024 * 1024
    fault: tuple[str, int] | None = None
    max_pages: int | None = None
    launch: str | None = None
    journal_url: str | None = None
    lease: float = 30.0
    http_allow: tuple[str, ...] = ()
    metrics_port: int | None = None
    actor: str | None = None
    db_retry: float = 300.0


def _integer(lo: int, hi: int) -> tuple[Callable[[str], int], str]:
    def parse(raw: str) -> int:
        if not re.fullmatch(r"[+]?[0-9]+", raw.strip()):
            raise ValueError
        value = int(raw)
        if not lo <= value <= hi:
            raise ValueError
        return value

    return parse, f"an integer from {lo} to {hi}"


def _seconds(lo: float, hi: float) -> tuple[Callable[[str], float], str]:
    def parse(raw: str) -> float:
        if not re.fullmatch(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?", raw.strip()):
            raise ValueError  # ASCII decimals only: not 1_0, not full-width digits, not nan/inf
        value = float(raw)
        if not lo <= value <= hi:
            raise ValueError
        return value

    return parse, f"a number of seconds from {lo:g} to {hi:g}"


def _sync(raw: str) -> bool:
    if raw.strip().lower() not in ("full", "normal"):
        raise ValueError
    return raw.strip().lower() == "full"


def _fault(raw: str) -> tuple[str, int]:
    m = re.fullmatch(r"([a-z_]+(?:\.[a-z_]+)*)(?:@([1-9][0-9]{0,8}))?", raw.strip())
    if not m or m.group(1) not in FAULT_POINTS:  # a point no write commits would never fire (new-user review)
        raise ValueError
    return m.group(1), int(m.group(2) or 1)


def _launch(raw: str) -> str:
    if raw not in ("fork", "spawn"):  # exactly as runner.forkserver.launch_mode accepts it
        raise ValueError
    return raw


def redact_url(url: str) -> str:
    """``url`` for messages: its password, in the user part (up to the last ``@`` before any ``?``: a password
    may hold ``@`` or ``/``) and in a ``password=`` query value, written ``***``."""
    head, mark, query = url.partition("?")
    m = re.match(r"^([A-Za-z][A-Za-z0-9+.-]*://)([^:@/]*):(.*)@([^@]*)$", head)
    if m:
        head = f"{m.group(1)}{m.group(2)}:***@{m.group(4)}"
    return head + mark + re.sub(r"(?i)((?:^|&)password=)[^&]*", r"\1***", query)


_SSLMODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")


def _journal(raw: str) -> str | None:
    """``sqlite`` (None) or a ``postgresql://`` URL whose form libpq takes: each host's port a number in
    1..65535, no space in the host part, a known ``sslmode`` (bad input is exit 2 naming the variable, §17;
    a server that cannot be reached is found when the journal opens)."""
    from urllib.parse import parse_qs, urlsplit

    value = raw.strip()
    if value == "sqlite":
        return None
    if not value.startswith(("postgresql://", "postgres://")):
        raise ValueError
    parts = urlsplit(value)
    hosts = parts.netloc.rpartition("@")[2]
    if any(c.isspace() for c in hosts):
        raise ValueError
    for host in hosts.split(","):
        port = host.rpartition("]")[2].partition(":")[2] if host.startswith("[") else host.partition(":")[2]
        if port and not (port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):
            raise ValueError
    for mode in parse_qs(parts.query).get("sslmode", []):
        if mode not in _SSLMODES:
            raise ValueError
    return value


def parse_allow_entry(text: str) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, int | None]:
    """Parse one outbound-guard allow entry (R-H3): ``ADDRESS``, ``ADDRESS:PORT``, ``[IPv6]:PORT`` or ``NET/PREFIX``.

    Returns:
        ``(network, port)``; ``port`` None allows every port.

    Raises:
        ValueError: anything else (host names are not accepted: the guard checks addresses).
    """
    raw = text.strip()
    port: int | None = None
    host = raw
    if raw.startswith("["):
        end = raw.find("]")
        if end < 0 or (raw[end + 1:] and not raw[end + 1:].startswith(":")):
            raise ValueError("bad bracketed IPv6 entry")
        host, port_text = raw[1:end], raw[end + 2:]
        if raw[end + 1:]:
            if not port_text.isdigit():
                raise ValueError("bad port")
            port = int(port_text)
    elif raw.count(":") == 1:
        host, port_text = raw.split(":")
        if not port_text.isdigit():
            raise ValueError("bad port")
        port = int(port_text)
    if port is not None and not 0 < port < 65536:
        raise ValueError("bad port")
    return ipaddress.ip_network(host, strict=False), port


def _allow(raw: str) -> tuple[str, ...]:
    parts = tuple(p.strip() for p in raw.split(",") if p.strip())
    for part in parts:
        parse_allow_entry(part)
    return parts


def _actor(raw: str) -> str:
    if not raw.strip() or len(raw) > 200 or any(ord(ch) < 32 or ord(ch) == 127 for ch in raw):
        raise ValueError
    return raw


class _IsAFile(Exception):
    """Raised when ``WORKRUN_HOME`` names something that exists and is not a directory."""


def _home(raw: str) -> Path:
    path = Path(raw).expanduser()
    if path.exists() and not path.is_dir():
        raise _IsAFile
    return path


# name -> (Settings attribute, parser, what it accepts); the README's table lists the same variables
VARIABLES: dict[str, tuple[str, Callable[[str], Any], str]] = {
    "WORKRUN_HOME": ("home", _home, "a directory (the data directory)"),
    "WORKRUN_CONCURRENCY": ("concurrency", *_integer(1, 1024)),
    "WORKRUN_GRACE": ("grace", *_seconds(0, 3600)),
    "WORKRUN_SYNC": ("sync_full", _sync, "'full' or 'normal'"),
    "WORKRUN_SNAPSHOT_MAX_BYTES": ("snapshot_max_bytes", *_integer(1, 2**62)),
    "WORKRUN_FAULT": ("fault", _fault, "POINT or POINT@N, POINT one of workrun.testing.FAULT_POINTS (test-only; N "
                                       "from 1), e.g. op.intent@2"),
    "WORKRUN_MAX_PAGES": ("max_pages", *_integer(1, 2**31 - 1)),
    "WORKRUN_LAUNCH": ("launch", _launch, "'fork' or 'spawn'"),
    "WORKRUN_JOURNAL": ("journal_url", _journal, "'sqlite' or a postgresql:// URL"),
    # at most a day: PostgreSQL takes the lease (in ms) as a session timeout of at most 2**31 - 1 (conformance
    # review: 3e6 passed this check, then failed every connection), and parsed as every other number of seconds
    "WORKRUN_LEASE": ("lease", *_seconds(1, 86400)),
    "WORKRUN_HTTP_ALLOW": ("http_allow", _allow,
                           "comma-separated addresses, ADDRESS:PORT, [IPv6]:PORT or networks like 10.1.2.0/24"),
    "WORKRUN_ACTOR": ("actor", _actor, "1-200 printable characters (who operator actions are recorded as)"),
    "WORKRUN_METRICS_PORT": ("metrics_port", *_integer(1, 65535)),
    "WORKRUN_DB_RETRY": ("db_retry", *_seconds(0, 86400)),
}


def current(environ: Mapping[str, str] | None = None) -> Settings:
    """Read and check every ``WORKRUN_*`` setting (SPEC §17).

    Args:
        environ: the environment to read (default ``os.environ``).

    Returns:
        The :class:`Settings`; unset or empty variables keep their defaults.

    Raises:
        ConfigError: naming the first bad variable and what it accepts (exit 2).
    """
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for name, (attr, parse, accepts) in VARIABLES.items():
        raw = env.get(name, "")
        if raw == "":
            continue
        try:
            values[attr] = parse(raw)
        except _IsAFile:
            raise ConfigError(f"{raw} is a file, not a directory; it must be the data directory",
                              field=name) from None
        except (ValueError, OverflowError):
            if name == "WORKRUN_JOURNAL":  # a URL's password is never shown
                raw = redact_url(raw)
            shown = raw if len(raw) <= 60 else raw[:57] + "..."
            raise ConfigError(f"must be {accepts}, not {shown!r}", field=name) from None
    return Settings(**values)
