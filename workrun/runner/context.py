"""The port every layer below the use cases works through (issue 27): :class:`Context`.

Effects, node executors, compensation, the engine, recovery and repair are handed a ``Context`` and type
against this protocol only; the concrete :class:`~workrun.runner.services.Services` (which owns the journal
connection, the App runner and a call-directory janitor thread) is built at the top — by the use cases
(``workrun.app``), the dashboard and the worker loop — and handed down. An import-linter contract keeps
``workrun.runner.services`` out of the lower layers. Tests hand in fakes that satisfy the protocol.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # the port names them; nothing here runs them (``workrun check`` never loads the journal)
    from workrun.core.models import FailurePolicy, WorkflowSpec
    from workrun.core.outcomes import NodeOutcome
    from workrun.journal.base import Journal
    from workrun.runner.base import AppRunner

__all__ = ["Confirm", "Context", "Reporter", "TicketOpener", "new_id"]


def new_id(prefix: str) -> str:
    """A new random id like ``run_3f2a9c0d1e4b`` (12 hex digits: unique prefixes stay short)."""
    return f"{prefix}_{os.urandom(6).hex()}"


class Reporter(Protocol):
    """Where progress goes: the CLI prints it; tests may collect it."""

    def message(self, run_id: str | None, node_key: str | None, level: str, text: str) -> None:
        """Show one progress message."""


class Confirm(Protocol):
    """Asks a person on the terminal whether to go ahead (the CLI provides it; None = no terminal)."""

    def __call__(self, question: str) -> bool:
        """Return True when the person said yes; False on no, end of input or Ctrl-C."""


class TicketOpener(Protocol):
    """The ticket policy (:func:`workrun.repair.policy.open_ticket`), handed in by the surfaces: opens the ticket of
    a failed node whose ``on_failure`` hands it to a person, and returns the node's outcome (R-M1..R-M5)."""

    def __call__(self, svc: Context, run_id: str, spec: WorkflowSpec, key: str, policy: FailurePolicy,
                 outcome: NodeOutcome, context: dict[str, Any]) -> NodeOutcome:
        """Open the ticket; ``waiting``, ``succeeded`` (handled by a fallback action) or ``terminated``."""


class Context(Protocol):
    """What a run's work needs from its surroundings: the journal (its roles), the transport that runs App
    calls and sends requests (``runner``), the data directory, a clock, progress output and the stop signal.

    Attributes:
        data_dir: the private data directory.
        runner: the transport (local, or queued to workers on a shared journal).
        concurrency: nodes run at once (``WORKRUN_CONCURRENCY``). grace: seconds between SIGTERM and SIGKILL.
        stop_event: set once a stop was requested (Ctrl-C, SIGTERM, ``workrun stop``).
        assume_yes: ``--yes`` was given. confirm: asks a person, or None when nobody can be asked.
        reporter: where progress messages go.
        open_ticket: the ticket policy the surface handed in (None: a run that opens a ticket is a bug).
    """

    data_dir: Path
    runner: AppRunner
    concurrency: int
    grace: float
    stop_event: threading.Event
    assume_yes: bool
    confirm: Confirm | None
    reporter: Reporter
    open_ticket: TicketOpener | None

    @property
    def journal(self) -> Journal:
        """The journal (opened on first use)."""

    def call_dir(self, name: str, *, replace: bool = False) -> Path:
        """A new private directory for one call or attempt, named ``name`` (R-A3)."""

    def discard(self, path: Path, *, recycle: bool = False) -> None:
        """Hand a finished call's directory over for removal, off the call's path."""

    def tidy(self) -> None:
        """Remove the finished call directories handed over so far (while an App runs)."""

    def say(self, run_id: str | None, node_key: str | None, level: str, text: str) -> None:
        """Journal one progress message and show it."""

    def request_stop(self) -> None:
        """Ask every node and compensation to stop."""

    def stopping(self) -> bool:
        """True once a stop was requested."""

    def now(self) -> float:
        """The clock: epoch seconds."""
