"""The contract between the runner of App processes and everything above it (R-A7, R-A8, R-R3).

:class:`AppRunner` is what :mod:`workrun.effects.operations` and the node executors use;
:class:`workrun.runner.local.LocalRunner` implements it with uv environments and
real process groups, and tests hand the engine a fake one. Nothing here touches
the journal: the caller journals intent before :meth:`AppRunner.start` and the
outcome after (R-J1).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from workrun.core.outcomes import Failure
from workrun.core.rows import OperationRow
from workrun.core.structs import field, struct

if TYPE_CHECKING:
    from workrun.outbound.http import PreparedRequest, SendResult

__all__ = ["CLAIM_WAIT", "RUNNING_AFTER", "AppRunner", "Collected", "Outcome", "Started"]

RUNNING_AFTER = 0.05
"""Seconds after its start when a call still going is journaled ``running`` (its pid), issue 14: a call that ends
sooner goes from ``starting`` to its outcome in one write, its process recorded with it. Recovery never needs the
pid: the call directory's claim names the supervisor (R-R3)."""

CLAIM_WAIT = 2.0
"""Seconds recovery gives a call's launcher to claim its directory before fencing it (R-R3). Every call left
behind was launched before its runner died, so one window from the start of a recovery pass covers them all:
recovery never waits this long per call (break-it finding, issue 14)."""


@struct
class Outcome:
    """How a process ended.

    Attributes:
        exit_code: the exit status, or None when killed by a signal / unknown.
        signal: the signal number that ended it, if any.
        timed_out: the watchdog ended it at its deadline.
        stopped: it was ended because the user stopped the run.
        not_started: recovery claimed the call before the launcher did (it can never start late).
        unknown: the process is gone and left no exit record.
        ended: the supervisor marked that every process of the call has ended (``ended`` after the exit
            record); without it a supervisor killed while ending the App's descendants may have left some,
            so the call's files are never reused.
        process: ``{pid, proc_start, started_at}`` of the call's supervisor as its claim names it, found by
            recovery for a call whose process was never journaled (it ended within :data:`RUNNING_AFTER`),
            to be journaled with the outcome; else None.
    """

    exit_code: int | None = None
    signal: int | None = None
    timed_out: bool = False
    stopped: bool = False
    not_started: bool = False
    unknown: bool = False
    ended: bool = False
    process: OperationRow | None = None

    @property
    def failure(self) -> Failure | None:
        """Why the process did not end well, or None when it exited 0 by itself (its result decides then)."""
        if self.not_started:
            return Failure.NOT_STARTED
        if self.unknown:
            return Failure.UNKNOWN
        if self.stopped:
            return Failure.STOPPED
        if self.timed_out:
            return Failure.TIMED_OUT
        if self.signal:
            return Failure.SIGNALLED
        if self.exit_code != 0:
            return Failure.EXITED
        return None


@struct
class Collected:
    """What an App left in its call directory.

    Attributes:
        result: the parsed result (None when the App saved none).
        resources: resources recorded with ``process.resource``.
        depends_on: operation ids recorded with ``process.depends_on``.
        error: why the result is unusable (not JSON, over 1 MiB, bad envelope), else None.
        stdout_tail / stderr_tail: the last 64 KiB of each stream, bad UTF-8 replaced.
    """

    result: Any = None
    resources: list[dict[str, Any]] = field(default_factory=list)
    depends_on: list[str] = field(default_factory=list)
    error: str | None = None
    stdout_tail: str = ""
    stderr_tail: str = ""


@struct
class Started:
    """A process :meth:`AppRunner.start` started: ``pid`` (its process group id too), ``proc_start`` (the
    kernel's start time, to tell a reused pid apart) and the runner's own ``handle``."""

    pid: int
    proc_start: str | None
    handle: Any = None


class AppRunner(Protocol):
    """Runs App code: prepares environments, starts and ends processes, reads call directories.

    Contract:

    - :meth:`prepare` returns the python of the project's environment, preparing it
      first when needed (``uv sync --locked``, never rewriting ``uv.lock``), and raises
      :class:`~workrun.core.errors.EnvironmentUnavailableError` when it cannot (R-A8).
    - :meth:`start` writes ``input.json`` into an existing empty call directory and
      starts the App's supervisor (forked by the environment's fork server, or the
      SDK's launcher spawned) in its own process group with a clean environment;
      raises ``OSError`` when it cannot. The App survives the runner dying (its
      output goes to files in the call directory, R-R3).
    - :meth:`wait` blocks until the process ends; at ``deadline`` (epoch seconds)
      or on :meth:`stop_all` its whole group is ended (SIGTERM, grace, SIGKILL), and
      the supervisor ends every descendant, also those that left the group. The
      supervisor's exit record decides the outcome; none at all: ``unknown``.
    - :meth:`recover` decides a process a dead runner left behind (R-R3).
    - :meth:`end` ends an orphaned call now (``workrun stop`` of a run without its scheduler).
    - :meth:`fence` claims a call directory as abandoned so the call can never start late.
    - :meth:`collect` never raises.
    """

    #: True when a run's calls belong to whoever holds the run's claim (a shared journal's scheduler): recovery
    #: then settles a call another process made even while that process lives (a frozen worker lost the run,
    #: R-R3, R-F2). False for a local runner: a live owner's call is left to it.
    decides_by_claim: bool

    @property
    def request_environ(self) -> Mapping[str, str] | None:
        """Where ``{{ env.NAME }}`` of an HTTP request is read when it is prepared: None (here, ``os.environ``)
        or a mapping that keeps it for the sender (a worker's executor reads its own environment, R-H5, R-S2)."""

    def send_request(self, call_id: str, request: PreparedRequest, allow: list[str], mark: dict[str, Any], *,
                     before_send: Callable[[], None]) -> SendResult:
        """Send one HTTP request through the outbound guard (R-H2..R-H4) and return what happened; never raises
        for network trouble. ``before_send`` journals "about to send" here; a shared journal's executor makes
        ``mark`` (``{"operation_id"}`` or ``{"compensation_id", "number"}``) ``running`` itself (R-S2).
        ``allow``: the run's ``http_allow`` entries (``WORKRUN_HTTP_ALLOW`` is added where it is sent)."""

    def settle_request(self, call_id: str, status: str) -> SendResult:
        """What became of a request a dead runner left in flight with journal status ``status``
        (``starting``: never sent, failure ``not_started``; ``running``: ``unknown``), or, on a shared
        journal, what its claim says (R-R3, R-H2)."""

    def prepare(self, project: Path, *, offline: bool = False) -> str:
        """Return the project environment's python (path), syncing it first if needed."""

    def start(self, python: str, project: Path, entry: Path, call_dir: Path, envelope: dict[str, Any], *,
              warm: str | None = None) -> Started:
        """Start one App process (see the class contract); ``warm``: the code fingerprint of a Tool App
        with ``warm = true`` (its module is loaded once in its fork server, R-P2), else None."""

    def wait(self, started: Started, deadline: float, *, running: Callable[[], None] | None = None) -> Outcome:
        """Wait for a started process; end its group at ``deadline`` (epoch seconds) or on stop.

        ``running`` is called once, in this thread, if the process is still going :data:`RUNNING_AFTER` seconds
        after the wait began (a runner that cannot tell calls it at once); errors it raises propagate after
        the process is no longer watched."""

    def recover(self, pid: int | None, proc_start: str | None, call_dir: Path, deadline: float | None, *,
                claim_wait: float = CLAIM_WAIT) -> Outcome:
        """Settle a call left by a runner that died: wait for a live process (until ``deadline``), then
        read its exit record; ``not_started`` when recovery fenced it first (after up to ``claim_wait`` s
        without a claim); ``unknown`` without a record."""

    def end(self, pid: int | None, proc_start: str | None, call_dir: Path, deadline: float | None) -> Outcome:
        """End a left-behind call now: a live group is ended (``stopped``); a finished one keeps its record."""

    def fence(self, call_dir: Path) -> None:
        """Claim the call directory as abandoned (the launcher then refuses to start)."""

    def collect(self, call_dir: Path) -> Collected:
        """Read result, resources, recorded dependencies and output tails of a finished call."""

    def stop_all(self) -> None:
        """End every running process group now and any started later (R-C9)."""

    def hang_up(self) -> None:
        """No call will start any more (the run is over): let what the runner holds end now, without waiting for
        it (its fork servers exit meanwhile; measured, issue 33: a 1-node run's end 7.1 -> 5.3 ms). A start after
        this fails; :meth:`close` still follows."""

    def close(self) -> None:
        """Release what the runner holds (its fork servers); calls in flight go on (R-P2)."""
