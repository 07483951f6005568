"""JSON for the call files without importing :mod:`json` (issue 33, SPEC §24 R-P4).

``import json`` imports ``re``, and ``re`` imports ``enum``, ``functools`` and ``collections``: about 8 ms of
every spawned App call's start-up (``WORKRUN_LAUNCH=spawn``), more than the supervisor's own work. The reading and
writing themselves are done by the interpreter's C accelerator ``_json`` (the same code :mod:`json` runs), driven
here directly. Only the success path lives here: whenever the accelerator refuses a value, or is missing (an
interpreter without it), the same call is made through :mod:`json` itself, so every error (type, message,
position) is exactly :mod:`json`'s, and so is every value read or text written.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

__all__ = ["Reader", "dumps", "loads"]

_SPACE = " \t\n\r"  # JSON's whitespace (RFC 8259 §2), what json.decoder's WHITESPACE pattern matches

_c: Any = None
try:
    import _json as _c
except ImportError:  # pragma: no cover - CPython always has it
    pass
_c_scanner: Any = getattr(_c, "make_scanner", None)
_c_encoder: Any = getattr(_c, "make_encoder", None)
_c_basestring: Any = getattr(_c, "encode_basestring", None)
_c_basestring_ascii: Any = getattr(_c, "encode_basestring_ascii", None)


_CONSTANTS = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}  # shared, as json's are


class _Context:
    """The attributes ``_json.make_scanner`` reads from a ``json.JSONDecoder``."""

    def __init__(self, parse_float: Callable[[str], Any] | None, parse_constant: Callable[[str], Any] | None):
        self.strict = True
        self.object_hook = None
        self.object_pairs_hook = None
        self.parse_float = parse_float or float
        self.parse_int = int
        self.parse_constant = parse_constant or _CONSTANTS.__getitem__
        self.memo: dict[str, str] = {}


class Reader:
    """``json.loads`` with fixed ``parse_float`` and ``parse_constant`` hooks, its C scanner made once (a reader
    made at import serves every call; see :func:`loads`). Safe to share between threads (the scanner keeps
    nothing between calls).

    The hooks should be pure: when the text turns out not to be JSON, it is read again by :mod:`json` for its
    error, so a hook may be called twice for the same number or constant.
    """

    def __init__(self, parse_float: Callable[[str], Any] | None = None,
                 parse_constant: Callable[[str], Any] | None = None) -> None:
        self.parse_float, self.parse_constant = parse_float, parse_constant
        self._scan = _c_scanner(_Context(parse_float, parse_constant)) if _c_scanner is not None else None

    def loads(self, text: str | bytes) -> Any:
        """``json.loads(text, parse_float=..., parse_constant=...)``: the same value, or the same error (bytes are
        read by :mod:`json` itself, which tells their encoding).

        Raises:
            json.JSONDecodeError (a ValueError): ``text`` is not JSON; whatever a hook raises; RecursionError:
            nested deeper than the interpreter's recursion limit; TypeError: ``text`` is no str or bytes.
        """
        if self._scan is not None and isinstance(text, str):
            start = len(text) - len(text.lstrip(_SPACE))
            try:
                value, end = self._scan(text, start)
            except (StopIteration, ValueError):
                pass  # json.loads below raises json's own error
            else:
                if end == len(text.rstrip(_SPACE)):
                    return value
        import json

        return json.loads(text, parse_float=self.parse_float, parse_constant=self.parse_constant)


_PLAIN = Reader()


def loads(text: str | bytes, *, parse_float: Callable[[str], Any] | None = None,
          parse_constant: Callable[[str], Any] | None = None) -> Any:
    """``json.loads(text, parse_float=..., parse_constant=...)``: the same value, or the same error (see
    :class:`Reader`, which a caller with hooks of its own makes once).

    Raises:
        As :meth:`Reader.loads`.
    """
    if parse_float is None and parse_constant is None:
        return _PLAIN.loads(text)
    return Reader(parse_float, parse_constant).loads(text)


def _refuse(value: object) -> object:
    raise TypeError(f"Object of type {value.__class__.__name__} is not JSON serializable")


def dumps(value: Any, *, ensure_ascii: bool = True, allow_nan: bool = True) -> str:
    """``json.dumps(value, ensure_ascii=..., allow_nan=...)``: the same text, or the same error.

    Raises:
        TypeError: a value of a type JSON has no form for; ValueError: a circular reference, or ``nan`` / ``inf``
        with ``allow_nan=False``; RecursionError: nested deeper than the interpreter's recursion limit.
    """
    if _c_encoder is not None:
        if isinstance(value, str):
            return _c_basestring_ascii(value) if ensure_ascii else _c_basestring(value)
        try:
            encode = _c_encoder({}, _refuse, _c_basestring_ascii if ensure_ascii else _c_basestring, None, ": ",
                                ", ", False, False, allow_nan)
            return "".join(encode(value, 0))
        except (TypeError, ValueError):
            pass  # json.dumps below raises json's own error
    import json

    return json.dumps(value, ensure_ascii=ensure_ascii, allow_nan=allow_nan)
