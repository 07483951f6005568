"""Redaction of secrets read at send time, in every form they can come back in (SPEC §18, R-X2).

A secret is the value of an environment variable a request read for ``{{ env.NAME }}``
in a header. A service may echo it back in many spellings; each is replaced by the
template text ``{{ env.NAME }}`` wherever anything is stored or shown:

- as is;
- JSON-string-escaped in any valid way: each character as itself, as ``\\uXXXX``
  (either case of hex, surrogate pairs for characters outside the BMP) or as a short
  escape (``\\/``, ``\\"``, ``\\\\``, ``\\n``…), mixed freely;
- percent-encoded, upper- or lower-case hex (each character's UTF-8 bytes, also mixed
  with literal characters; ``+`` for a space);
- base64, standard and URL-safe: the secret encoded alone, whole (with or without its
  padding), and at any of the three byte alignments inside a longer encoded text (only the
  characters that depend on the secret alone; at least 4).

:func:`redact` and :func:`redact_value` also redact every secret :func:`remember` was told of in this process: a
secret one request read may come back in another request's answer, an App's output or an error line (R-X2:
wherever anything is stored or shown). No I/O.
"""

from __future__ import annotations

import binascii
import functools
import re
import threading
from collections.abc import Mapping
from typing import Any

__all__ = ["forget_all", "known", "redact", "redact_value", "remember", "replacement"]

_SHORT = {'"': '\\\\"', "\\": "\\\\\\\\", "/": "\\\\/", "\b": "\\\\b", "\f": "\\\\f", "\n": "\\\\n",
          "\r": "\\\\r", "\t": "\\\\t"}
_MIN_B64 = 4  # base64 runs shorter than this are too likely to occur by chance
#: a secret shorter than this is not redacted: it would match ordinary text (a one-letter "secret" would
#: rewrite every answer and break what later templates read from it); such a value is no secret anyway
MIN_SECRET = 4


def replacement(name: str) -> str:
    """The text a secret of ``env.NAME`` is replaced by: ``{{ env.NAME }}`` (R-X2)."""
    return "{{ env." + name + " }}"


def _hex(text: str) -> str:
    """A regex matching hex digits ``text`` in either case."""
    return "".join(c if c.isdigit() else f"[{c.lower()}{c.upper()}]" for c in text)


def _json_units(c: str) -> list[str]:
    code = ord(c)
    if code > 0xFFFF:  # a surrogate pair
        code -= 0x10000
        hi, lo = 0xD800 + (code >> 10), 0xDC00 + (code & 0x3FF)
        return ["\\\\u" + _hex(f"{hi:04x}") + "\\\\u" + _hex(f"{lo:04x}")]
    return ["\\\\u" + _hex(f"{code:04x}")]


def _char(c: str) -> str:
    alts = [re.escape(c)]
    if c in _SHORT:
        alts.append(_SHORT[c])
    alts += _json_units(c)
    alts.append("".join("%" + _hex(f"{b:02x}") for b in c.encode("utf-8")))
    if c == " ":
        alts.append(r"\+")
    return "(?:" + "|".join(alts) + ")"


def _b64(data: bytes) -> str:
    """Standard base64 of ``data`` (``base64.b64encode``'s, from the C module it wraps: the module itself costs every
    command's start-up ~1 ms)."""
    return binascii.b2a_base64(data, newline=False).decode("ascii")


def _b64_cores(secret: bytes) -> list[str]:
    """The base64 characters that depend on ``secret`` alone, at each of the three alignments."""
    cores: list[str] = []
    for k in range(3):
        text = _b64(b"\0" * k + secret).rstrip("=")
        start = -(-8 * k // 6)  # the first character whose 6 bits are all the secret's
        end = (8 * (k + len(secret))) // 6  # characters before this one hold only the secret's bits
        core = text[start:end]
        if len(core) >= _MIN_B64:
            cores.append(core)
            cores.append(core.replace("+", "-").replace("/", "_"))
    return sorted(set(cores), key=len, reverse=True)


def _b64_whole(secret: bytes) -> list[str]:
    """The secret's own base64 encodings, standard and URL-safe, with and without padding: an echo of the secret
    encoded alone ends in characters that also hold padding bits, which the cores leave out (a tail such as
    ``4=`` stayed; conformance review). Longest first."""
    text = _b64(secret)
    forms = {text, text.rstrip("=")}
    forms |= {f.replace("+", "-").replace("/", "_") for f in forms}
    return sorted(forms, key=len, reverse=True)


@functools.lru_cache(maxsize=256)
def _pattern(secret: str) -> re.Pattern[str]:
    chars = "".join(_char(c) for c in secret)
    raw = secret.encode("utf-8")  # a whole encoding before the cores: at one position the first that matches wins
    b64 = [re.escape(form) for form in [*_b64_whole(raw), *_b64_cores(raw)]]
    return re.compile("|".join([chars, *b64]))


_KNOWN: dict[str, str] = {}  # value -> name of every secret read or declared in this process (R-X2)
_KNOWN_LOCK = threading.Lock()


def remember(secrets: Mapping[str, str]) -> None:
    """Redact ``secrets`` (environment variable name -> value) in everything this process redacts from now on,
    whichever request read them (R-X2): a secret echoed in another request's answer or in an error line is
    stored as ``{{ env.NAME }}`` too. Kept by value: a name whose value changed keeps both redacted. Values
    shorter than :data:`MIN_SECRET` are ignored."""
    with _KNOWN_LOCK:
        for name, value in secrets.items():
            if len(value) >= MIN_SECRET:
                _KNOWN[value] = name


def known() -> dict[str, str]:
    """The secrets :func:`remember` was told of, name -> value (the latest value of each name)."""
    with _KNOWN_LOCK:
        return {name: value for value, name in _KNOWN.items()}


def forget_all() -> None:
    """Forget what :func:`remember` was told (a test's, or an embedding program's, fresh start)."""
    with _KNOWN_LOCK:
        _KNOWN.clear()


def _pairs(secrets: Mapping[str, str]) -> list[tuple[str, str]]:
    """``(name, value)`` of ``secrets`` and of the remembered ones (one snapshot), longest value first."""
    with _KNOWN_LOCK:
        by_value = {**_KNOWN, **{value: name for name, value in secrets.items()}}
    return sorted(((name, value) for value, name in by_value.items() if len(value) >= MIN_SECRET),
                  key=lambda nv: len(nv[1]), reverse=True)


def _redacted(text: str, pairs: list[tuple[str, str]]) -> str:
    for name, value in pairs:
        text = _pattern(value).sub(replacement(name).replace("\\", "\\\\"), text)
    return text


def redact(text: str, secrets: Mapping[str, str]) -> str:
    """``text`` with every form of every secret replaced by ``{{ env.NAME }}`` (R-X2).

    Args:
        text: any text that is about to be stored or shown.
        secrets: environment variable name -> value read at send time (besides those :func:`remember` was told
            of); values shorter than :data:`MIN_SECRET` characters are ignored.

    Returns:
        The redacted text (``text`` itself when nothing matched).
    """
    return _redacted(text, _pairs(secrets)) if secrets or _KNOWN else text


def redact_value(value: Any, secrets: Mapping[str, str]) -> Any:
    """A JSON-like value with :func:`redact` applied to every string in it (keys included); the secrets are taken
    once for the whole value."""
    if not secrets and not _KNOWN:
        return value
    pairs = _pairs(secrets)
    return _redact_each(value, pairs) if pairs else value


def _redact_each(value: Any, pairs: list[tuple[str, str]]) -> Any:
    if isinstance(value, str):
        return _redacted(value, pairs)
    if isinstance(value, dict):
        return {_redacted(str(k), pairs): _redact_each(v, pairs) for k, v in value.items()}
    if isinstance(value, list):
        return [_redact_each(v, pairs) for v in value]
    return value
