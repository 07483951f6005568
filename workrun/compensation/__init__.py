"""Compensation (the Saga's undo): ``planning.py`` (pure order and hold-back), ``records.py`` (what is owed),
``run.py`` (running attempts in order)."""

from workrun.compensation.planning import Item, Plan, plan
from workrun.compensation.records import compensation_id_for, plan_records
from workrun.compensation.run import compensate_run, refresh_holds

__all__ = ["Item", "Plan", "compensate_run", "compensation_id_for", "plan", "plan_records", "refresh_holds"]
