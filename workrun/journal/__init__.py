"""The journal: durable record of runs, operations and compensations (R-J1..R-J4)."""

from workrun.journal.sqlite import FAULT_POINTS, Journal

__all__ = ["FAULT_POINTS", "Journal"]
