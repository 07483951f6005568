"""How things ended, as data: :class:`NodeOutcome`, :class:`Failure` and :func:`brief`.

A failure's *kind* is stored in the journal (``operations.failure``,
``attempts.failure``) next to its human message; code decides what happened
from the kind, never by reading the message.
"""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Any

from workrun.core import structs

__all__ = ["Failure", "NodeOutcome", "brief"]


class Failure(StrEnum):
    """Why a call (operation or attempt) did not succeed: stored in the journal, never parsed from a message.

    Members:
        NOT_STARTED: the process never began because the runner stopped first (does not use up a retry).
        REFUSED: refused before it began: its code snapshot is over the size bound (R-C8), or the outbound guard
            refused the address of an HTTP request (R-H3; nothing was sent).
        STOPPED: ended because the user stopped the run (R-C9).
        TIMED_OUT: ended by the watchdog at its deadline (R-A7).
        EXITED: exited with a non-zero code.
        SIGNALLED: killed by a signal Workrun did not send.
        CONTRACT: exited 0 but its result is invalid: not JSON, over 1 MiB, or against the output contract (R-A3).
        ENVIRONMENT: its uv environment could not be prepared, or the process could not be spawned (R-A8).
        UNKNOWN: gone while the runner was down, with no exit record (R-R3); an HTTP request that was sent and
            got no answer (timeout, connection lost, runner killed while it was in flight, R-H2).
        NOT_SENT: an HTTP request failed before any byte was sent (DNS, connection refused, a template without a
            value, a bound on the request) (R-H2).
        HTTP_STATUS: an HTTP request was answered with a status other than 2xx (3xx included: no redirect is
            followed) (R-H2).
        BAD_RESPONSE: an HTTP answer broke a bound: body over 1 MiB or headers over 64 KiB (R-H4).
        UNSAFE_REQUEST: not sent because a filled value would aim it elsewhere than the file wrote: an empty or
            ``null`` value in the URL (R-X3), a dot segment; final, never retried.
        MISSING_VALUE: not sent because a template of a reverse action names a value that is not there (a field
            the compensated call's journaled input or result lacks, an input the run was not given): those values
            never change, so the same request could never be filled; final, never retried.
        MAIL_REJECTED: the SMTP server answered the message (after DATA) with 5xx: final, never retried (R-K2).
        MAIL_DEFERRED: the SMTP server answered the message with 4xx: failed, retried within the attempts.
    """

    NOT_STARTED = "not_started"
    REFUSED = "refused"
    STOPPED = "stopped"
    TIMED_OUT = "timed_out"
    EXITED = "exited"
    SIGNALLED = "signalled"
    CONTRACT = "contract"
    ENVIRONMENT = "environment_unavailable"
    UNKNOWN = "unknown"
    NOT_SENT = "not_sent"
    HTTP_STATUS = "http_status"
    BAD_RESPONSE = "bad_response"
    UNSAFE_REQUEST = "unsafe_request"
    MISSING_VALUE = "missing_value"
    MAIL_REJECTED = "mail_rejected"
    MAIL_DEFERRED = "mail_deferred"

    @property
    def final(self) -> bool:
        """True when trying again cannot help: the same values would fill the same request (R-X3) or could never
        fill it, or the mail server refused the message for good (a 5xx answer after DATA, R-K2)."""
        return self in (Failure.UNSAFE_REQUEST, Failure.MISSING_VALUE, Failure.MAIL_REJECTED)

    @property
    def counts(self) -> bool:
        """True when the failure uses up one of a node's retry attempts (only a call the runner's own stop
        kept from starting does not: it simply runs on resume)."""
        return self is not Failure.NOT_STARTED


@structs.struct
class NodeOutcome:
    """How one node ended.

    Attributes:
        status: ``succeeded`` | ``failed`` | ``stopped``.
        result: the node's result (JSON value) when it succeeded.
        error: a one-line message when it did not.
    """

    status: str
    result: Any = None
    error: str | None = None


def brief(value: Any, limit: int = 160) -> str:
    """A short one-line JSON rendering of ``value`` for progress messages (at most ``limit`` characters)."""
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"
