"""The journal: durable record of runs, operations and compensations (R-J1..R-J4).

:class:`Journal` is the contract (``base.py``); :class:`SqliteJournal` the SQLite backend
that holds all of its SQL (``sqlite.py``); ``migrations.py`` its schema steps.
"""

from workrun.journal.base import FAULT_POINTS, Journal
from workrun.journal.sqlite import SqliteJournal

__all__ = ["FAULT_POINTS", "Journal", "SqliteJournal"]
