"""An App process call as a side effect (R-A1..R-A8, R-C7, R-R3): a node's or a Tool App's call, and a
compensation script's attempt. The journaling around the process lives in :mod:`workrun.effects.operations`."""

from __future__ import annotations

from pathlib import Path

from workrun.core.models import AppSpec
from workrun.core.rows import AttemptRow, CompensationRow, OperationRow
from workrun.effects.actions import knobs
from workrun.effects.base import Planned
from workrun.effects.operations import (
    Attempted,
    finish_attempt,
    finish_operation,
    process_call_dir,
    run_attempt,
    run_attempt_again,
)
from workrun.runner.context import Context

__all__ = ["AppCall"]


class AppCall:
    """App processes: started through the runner, decided by their exit record (see :class:`Effect`)."""

    name = "app"

    def settle_operation(self, svc: Context, op: OperationRow, *, claim_wait: float) -> OperationRow:
        """Wait for a live process group (bounded by its deadline), then its exit record decides; none at all:
        ``unknown`` (R-R3). A call whose launcher never claimed its directory is fenced: not started."""
        outcome = svc.runner.recover(op["pid"], op["proc_start"], process_call_dir(op), op["deadline"],
                                     claim_wait=claim_wait)
        # a call never journaled running: its supervisor, as its claim names it, is journaled with it
        return finish_operation(svc, op, outcome, process=outcome.process if op.get("pid") is None else None)

    def end_operation(self, svc: Context, op: OperationRow) -> OperationRow:
        """End the process group now (SIGTERM, grace, SIGKILL); a call that had finished keeps its outcome."""
        outcome = svc.runner.end(op["pid"], op["proc_start"], Path(op["call_dir"]), op["deadline"])
        return finish_operation(svc, op, outcome)

    def describe(self, op: OperationRow) -> str:
        return f"App {op['app']} ({op['project']})"

    def plan(self, op: OperationRow) -> Planned | None:
        """A compensation script declared by the call's App config snapshot (R-A5: adding one later never
        compensates older calls)."""
        if op.get("kind") not in ("process", "tool"):
            return None
        comp = AppSpec.model_validate(op["config"]).compensation
        if comp is None or comp.entry is None:
            return None
        return Planned(self.name, {}, knobs(comp.max_retries, comp.timeout, comp.backoff, comp.idempotent))

    def no_compensation(self, op: OperationRow) -> str:
        return f"App {op['app']!r} has no compensation entry"

    def run_attempt(self, svc: Context, comp: CompensationRow, op: OperationRow, trigger: str) -> Attempted:
        """Run the compensation script once (fingerprint checked first, R-C8)."""
        return run_attempt(svc, comp, op, trigger)

    def recover_attempt(self, svc: Context, comp: CompensationRow, attempt: AttemptRow, *,
                        claim_wait: float) -> CompensationRow:
        """As :meth:`settle_operation`, for a compensation script's attempt."""
        outcome = svc.runner.recover(attempt["pid"], attempt["proc_start"], Path(attempt["call_dir"]),
                                     attempt["deadline"], claim_wait=claim_wait)
        return finish_attempt(svc, comp, attempt, outcome)

    def run_again(self, svc: Context, comp: CompensationRow, op: OperationRow) -> str | None:
        """Run the compensation script once more with the same context (:func:`run_attempt_again`)."""
        return run_attempt_again(svc, comp, op)
