"""The journal's named fault points (issue 3, R-V3): each journal write commits under one of these names (one more
marks a moment between two writes), and
``WORKRUN_FAULT=POINT[@N]`` (:mod:`workrun.core.faults`) or ``workrun.testing.crash_at`` kills the runner right
after the N-th commit of one. A leaf, so the settings check can refuse a name that is none of them."""

from __future__ import annotations

__all__ = ["FAULT_POINTS"]

FAULT_POINTS = (
    "run.created", "node.running", "op.intent", "op.started", "op.finished", "node.finished",
    "run.failed", "run.succeeded", "run.stopped", "comp.status", "attempt.intent", "attempt.started",
    "attempt.finished", "remote.intent", "remote.task", "remote.cancel",
    "run.waiting", "run.terminated", "ticket.opened", "ticket.changed", "action.intent", "action.sending",
    "action.finished", "notify.intent", "notify.sending", "notify.finished", "run.claimed", "call.claimed",
    "http.answered",
)
"""Every fault point, in about the order a run meets them. ``http.answered`` is the one that is not a commit: a
ticket action's request answered, its answer not yet journaled."""
