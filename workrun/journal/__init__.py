"""The journal: durable record of runs, operations and compensations (R-J1..R-J4).

:class:`Journal` is the contract (``base.py``); :class:`SqliteJournal` the SQLite backend
that holds all of its SQL (``sqlite.py``); ``migrations.py`` its schema steps.
"""

import os
from pathlib import Path

from workrun.journal.base import FAULT_POINTS, Journal
from workrun.journal.sqlite import SqliteJournal

__all__ = ["FAULT_POINTS", "Journal", "SqliteJournal", "open_journal"]


def open_journal(data_dir: Path, *, check: bool = True, writable: bool = True) -> Journal:
    """Open (and migrate) the journal of a data directory: the one place that picks the backend.

    Args:
        data_dir: the data directory; the SQLite file is ``data_dir / "journal.sqlite3"``.
        check: run the integrity check on open.
        writable: the command writes; when False and this user cannot write the data dir, the
            journal is opened read-only (a read command still reads it; SPEC §17).

    Raises:
        JournalError: the journal cannot be opened; JournalVersionError: it is newer than this
            Workrun (both exit 2).
    """
    read_only = not writable and not os.access(data_dir, os.W_OK | os.X_OK)
    return SqliteJournal(data_dir / "journal.sqlite3", check=check, read_only=read_only)
