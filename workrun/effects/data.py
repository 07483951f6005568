"""An ``update_data`` reverse action as a side effect (SPEC §19, R-K4): a write to the run's own ``data``.

A local write, with a receipt: the attempt's intent is journaled, then its values are filled and the write
and the attempt's success are committed in one transaction, so a write is never applied twice (also
across kill -9 and resume: an attempt that died before that transaction is ``not_started`` and runs again).
"""

from __future__ import annotations

from typing import cast

from workrun.core.models import HttpRequestSpec
from workrun.core.outcomes import Failure
from workrun.core.rows import AttemptRow, CompensationRow, OperationRow
from workrun.core.templates import missing_value
from workrun.effects.actions import action_lookup, finish_http_attempt, not_sent, recover_http_attempt
from workrun.effects.base import ActionOnly
from workrun.effects.operations import Attempted
from workrun.effects.ticket_records import run_data
from workrun.outbound.http import SendResult, fill_value
from workrun.runner.context import Context

__all__ = ["DataUpdate"]


class DataUpdate(ActionOnly):
    """``update_data`` reverse actions (see :class:`~workrun.effects.base.Effect`)."""

    name = "data"

    def run_attempt(self, svc: Context, comp: CompensationRow, op: OperationRow, trigger: str) -> Attempted:
        """Intent; then the write and the attempt's success in one transaction (the receipt)."""
        cid = comp["compensation_id"]
        attempt = self.begin_attempt(svc, comp, trigger)
        if attempt is None:
            return Attempted(svc.journal.compensation(cid), None)
        action = HttpRequestSpec.model_validate(comp["context"]["reverse_action"])
        spec = action.update_data
        assert spec is not None
        lookup = action_lookup(svc, comp, op)
        try:
            updates = {f: fill_value(spec.values[f], lookup) if f in spec.values else None for f in spec.fields}
        except KeyError as exc:
            return not_sent(svc, comp, attempt, missing_value(exc), Failure.MISSING_VALUE)
        merged = {**run_data(svc.journal.run(comp["run_id"])), **updates}
        got = SendResult(True, body={"data": updates})
        after = finish_http_attempt(svc, comp, attempt, got, run_data=(comp["run_id"], merged))
        svc.say(comp["run_id"], comp["node_key"], "info", f"compensation {cid}: data updated: {', '.join(updates)}")
        return Attempted(after, None)

    def recover_attempt(self, svc: Context, comp: CompensationRow, attempt: AttemptRow, *,
                        claim_wait: float) -> CompensationRow:
        """Left ``starting`` (its write was never committed): not started, run again."""
        return recover_http_attempt(svc, comp, cast(AttemptRow, {**attempt, "status": "starting"}), dispatched=False)

    def run_again(self, svc: Context, comp: CompensationRow, op: OperationRow) -> str | None:
        """Setting the same values again changes nothing: idempotent by construction."""
        return None
