"""JSON log lines (SPEC §20, R-F6): ``workrun worker --log-format json`` writes one JSON object per line on stderr.

Each line has ``ts`` (ISO 8601 with its UTC offset), ``level``, ``event`` and ``worker``, and ``run_id``,
``node_key``, ``operation_id``, ``compensation_id`` on every line about them. Events: ``message`` (a run's
progress line, its text in ``message``), ``worker_started``, ``worker_stopped``, ``claim_lost``,
``db_reconnected``.
"""

from __future__ import annotations

import json
import re
import sys
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime
from typing import Any

__all__ = ["JsonReporter", "about", "emit", "enable", "enabled", "ids_in", "say"]

_STATE: dict[str, Any] = {"on": False, "worker": None}
_LOCK = threading.Lock()
_IDS = {"operation_id": re.compile(r"\bop_[0-9a-f]{12}\b"), "compensation_id": re.compile(r"\bcmp_[0-9a-f]{12}\b")}
_ABOUT: ContextVar[dict[str, str]] = ContextVar("workrun_log_about", default={})  # noqa: B039 (never mutated)


@contextmanager
def about(row: Mapping[str, Any]) -> Iterator[None]:
    """Within the block (in this thread), progress lines are about ``row``'s ``operation_id`` and ``compensation_id``
    too (a compensation's row): its lines carry its operation's id, which their text does not name (R-F6: the ids
    "on every line about them", conformance review)."""
    token = _ABOUT.set({**_ABOUT.get(), **{name: row[name] for name in _IDS if row.get(name)}})
    try:
        yield
    finally:
        _ABOUT.reset(token)


def enable(worker: str | None) -> None:
    """Write JSON log lines from now on, naming ``worker`` on each."""
    _STATE.update(on=True, worker=worker)


def enabled() -> bool:
    """True when JSON log lines are on (:func:`enable`)."""
    return bool(_STATE["on"])


def emit(event: str, level: str = "info", **fields: Any) -> None:
    """Write one JSON object on stderr: ``ts``, ``level``, ``event``, ``worker`` and ``fields`` (None left out)."""
    line = {"ts": datetime.now().astimezone().isoformat(timespec="milliseconds"), "level": level, "event": event,
            "worker": _STATE["worker"], **{k: v for k, v in fields.items() if v is not None}}
    text = json.dumps(line, ensure_ascii=False, default=str)
    with _LOCK:
        try:
            sys.stderr.write(text + "\n")
            sys.stderr.flush()
        except (OSError, ValueError):  # stderr closed: logs are optional, the work goes on
            pass


def ids_in(text: str) -> dict[str, str | None]:
    """``{"operation_id", "compensation_id"}``: the first operation and compensation id in ``text`` (a message, a
    call's id), None where there is none: a log line's fields about them (R-F6)."""
    return {name: (m.group(0) if (m := pattern.search(text)) else None) for name, pattern in _IDS.items()}


def say(event: str, level: str, text: str, *, prefix: str = "workrun", **fields: Any) -> None:
    """Tell the operator something on stderr: a JSON line (:func:`emit`, the text as ``message``) when JSON logs
    are on, else one plain line ``PREFIX: TEXT`` (R-F6: with ``--log-format json`` every line is JSON)."""
    if enabled():
        emit(event, level, message=text, **fields)
        return
    with _LOCK:  # one write of the whole line: print's text and newline, two writes, interleaved between threads
        try:
            sys.stderr.write(f"{prefix}: {text}\n")
            sys.stderr.flush()
        except (OSError, ValueError):  # stderr closed: the work goes on
            pass


class JsonReporter:
    """A :class:`~workrun.runner.context.Reporter` writing each progress message as a JSON ``message`` line; the ids
    of the operation or compensation the line is about are given as fields."""

    def message(self, run_id: str | None, node_key: str | None, level: str, text: str) -> None:
        """One JSON line for one progress message: the ids of what it is about (:func:`about`), else those its text
        names."""
        found, known = ids_in(text), _ABOUT.get()
        emit("message", level, run_id=run_id, node_key=node_key, message=text,
             **{name: known.get(name) or value for name, value in found.items()})
