"""The whole exception tree of the runner. The CLI maps classes to exit codes in one place.

    WorkrunError                                  exit 1 unless a subclass says otherwise
      ConfigError(WorkrunError, ValueError)       exit 2: bad App config, workflow or input (R-I2)
        ConfigErrors                              several of them found in one pass (R-L1)
      UsageError(WorkrunError, ValueError)        exit 2: bad command-line usage
      NotFoundError(WorkrunError, LookupError)    exit 2: unknown run / compensation id
      ActionRefusedError(WorkrunError)            exit 2: operator action not allowed in this status
      SchedulerBusyError(WorkrunError)            exit 3: another scheduler holds the data dir (R-J3)
      JournalError(WorkrunError)                  exit 1: the journal cannot be read or written
        JournalVersionError                       the journal is newer than this Workrun
        InvalidTransitionError                    a status change outside workrun/core/states.py (a bug)
        StaleStatusError                          a conditional write found the row changed meanwhile
      EnvironmentUnavailableError(WorkrunError)   exit 1: an App's uv environment cannot be prepared
"""

from __future__ import annotations

__all__ = [
    "ActionRefusedError",
    "ClaimLostError",
    "ConfigError",
    "ConfigErrors",
    "DatabaseUnreachableError",
    "EnvironmentUnavailableError",
    "JournalError",
    "JournalVersionError",
    "InvalidTransitionError",
    "NotFoundError",
    "SchedulerBusyError",
    "StaleStatusError",
    "UsageError",
    "WorkrunError",
]


class WorkrunError(Exception):
    """Raised for any failure the CLI reports as one line (``workrun.api.WorkrunError``, R-V2).

    Attributes:
        exit_code: what the CLI exits with (class attribute: 1, 2 or 3).
        detail: the message without file and field.
        file, field: where, when it is about a file (None otherwise).
        message: every error line, ``FILE: FIELD: detail``, one per line (what the CLI prints after ``error:``).
    """

    exit_code = 1

    def __init__(self, message: str, *, file: str | None = None, field: str | None = None) -> None:
        self.file = file
        self.field = field
        self.detail = message
        super().__init__(self.line())

    @property
    def message(self) -> str:
        """Every error line (``FILE: FIELD: detail``), one per line."""
        return "\n".join(self.lines())

    def line(self) -> str:
        """Return ``FILE: FIELD: message`` with the parts that apply (SPEC §10)."""
        parts = [p for p in (self.file, self.field) if p]
        return ": ".join([*parts, self.detail])

    def lines(self) -> list[str]:
        """Every error line this error stands for (one, unless it gathers several: :class:`ConfigErrors`)."""
        return [self.line()]


class ConfigError(WorkrunError, ValueError):
    """Raised when an App config, workflow file or input is invalid (exit 2)."""

    exit_code = 2


class ConfigErrors(ConfigError):
    """Several config errors found in one pass (``workrun check`` and ``run`` report them all, R-L1; exit 2).

    Attributes:
        errors: the errors, in the order found (at least one).
    """

    def __init__(self, errors: list[ConfigError]) -> None:
        self.errors = list(errors)
        first = self.errors[0]
        super().__init__(first.detail, file=first.file, field=first.field)

    @classmethod
    def of(cls, errors: list[ConfigError]) -> ConfigError:
        """The one error of ``errors``, or all of them as one :class:`ConfigErrors` (``errors``: at least one)."""
        return errors[0] if len(errors) == 1 else cls(errors)

    def lines(self) -> list[str]:
        """One ``FILE: FIELD: message`` line per error; an error found twice (two nodes using one bad App
        project) is said once."""
        return list(dict.fromkeys(line for e in self.errors for line in e.lines()))


class UsageError(WorkrunError, ValueError):
    """Raised when a command is used wrongly (exit 2)."""

    exit_code = 2


class NotFoundError(WorkrunError, LookupError):
    """Raised when a run or compensation id matches nothing, or a prefix matches several (exit 2)."""

    exit_code = 2


class ActionRefusedError(WorkrunError):
    """Raised when an operator action is not allowed in the current status (exit 2)."""

    exit_code = 2


class SchedulerBusyError(WorkrunError):
    """Raised when another scheduler holds the data directory's lock (exit 3)."""

    exit_code = 3


class JournalError(WorkrunError):
    """Raised when the journal cannot be opened, checked or written."""


class ClaimLostError(JournalError):
    """Raised when a write for a run is refused because another worker has claimed the run since this one
    did (its claim epoch moved on, R-F2): nothing was written, and this process must stop driving the run."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        super().__init__(f"run {run_id}: another worker has claimed this run since (this worker's lease passed); "
                         "nothing was written and this worker stops driving it")


class DatabaseUnreachableError(JournalError):
    """Raised when a shared journal's database stayed away longer than ``WORKRUN_DB_RETRY`` seconds (R-F1): the
    process ends (exit 1) and its claims pass on after their lease."""


class JournalVersionError(JournalError):
    """Raised when the journal's schema is newer than this Workrun knows."""


class EnvironmentUnavailableError(WorkrunError):
    """Raised when an App project's uv environment cannot be prepared (sync failed, uv missing).

    Args:
        detail: what went wrong; the message is ``environment unavailable: DETAIL``.
    """

    def __init__(self, detail: str, *, file: str | None = None, field: str | None = None) -> None:
        self.detail = detail
        super().__init__(f"environment unavailable: {detail}", file=file, field=field)


class InvalidTransitionError(JournalError):
    """Raised when code asks the journal for a status change the state machine does not allow."""


class StaleStatusError(JournalError):
    """Raised when a conditional write finds the row no longer in the status the caller saw; nothing was written."""
