"""The journal: durable record of runs, operations and compensations (R-J1..R-J4, R-S1).

:class:`Journal` is the contract (``base.py``); :class:`SqliteJournal` the SQLite backend
that holds all of its SQL (``sqlite.py``); :class:`~workrun.journal.postgres.PostgresJournal`
the shared backend on PostgreSQL (``postgres.py``, R-S1); ``migrations.py`` their schema
steps. :func:`open_journal` picks one from ``WORKRUN_JOURNAL``.
"""

from __future__ import annotations

import os
from pathlib import Path

from workrun.core import errors, settings
from workrun.journal.base import FAULT_POINTS, Journal
from workrun.journal.postgres import PostgresJournal  # cheap: psycopg itself is imported only when used
from workrun.journal.sqlite import SqliteJournal

__all__ = ["FAULT_POINTS", "Journal", "PostgresJournal", "SqliteJournal", "journal_url", "open_journal"]


def journal_url() -> str | None:
    """The PostgreSQL URL from ``WORKRUN_JOURNAL``, or None for the embedded SQLite journal (R-S1).

    Checked by :mod:`workrun.core.settings` with every other ``WORKRUN_*`` setting.

    Raises:
        ConfigError: the variable is set to something else than ``sqlite`` or a ``postgresql://`` URL (exit 2).
    """
    return settings.current().journal_url


def open_journal(data_dir: Path, *, check: bool = True, writable: bool = True) -> Journal:
    """Open (and migrate) the journal of a data directory: the one place that picks the backend, the
    SQLite file ``data_dir / "journal.sqlite3"`` or the PostgreSQL database ``WORKRUN_JOURNAL`` names.

    Args:
        data_dir: the data directory (holds the SQLite file).
        check: run the integrity check on open (SQLite).
        writable: the command writes; when False and this user cannot write the data dir, the
            SQLite journal is opened read-only (a read command still reads it; SPEC §17).

    Raises:
        ConfigError: a bad ``WORKRUN_JOURNAL``, or a PostgreSQL URL without psycopg installed (exit 2).
        JournalError: the journal cannot be opened (or migrated); JournalVersionError: it is newer than this
            Workrun (both exit 1, one line naming the file).
    """
    url = journal_url()
    if url is None:
        read_only = not writable and not os.access(data_dir, os.W_OK | os.X_OK)
        return SqliteJournal(data_dir / "journal.sqlite3", check=check, read_only=read_only)
    try:
        import psycopg  # noqa: F401
    except ImportError:
        raise errors.ConfigError("a PostgreSQL journal needs psycopg 3: install the postgres extra (from a clone: "
                                 ".venv/bin/pip install -e '.[postgres]')", field="WORKRUN_JOURNAL") from None
    return PostgresJournal(url)
