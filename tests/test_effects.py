"""The seam of side effects (issue 27): one protocol, a registry, nothing outside ``workrun/effects/`` branching
on the kind of a call. A test-only kind shows that adding one is one module plus its registration."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from _kit.fakes import services
from workrun import effects
from workrun.effects import Planned, for_compensation, for_operation, plan, register, settle_operations
from workrun.effects.app_call import AppCall
from workrun.effects.http_request import HttpRequest
from workrun.effects.operations import Attempted

ROOT = Path(__file__).resolve().parents[1]


class Fax:
    """A made-up kind of side effect (a fax), as a new kind's module would define it."""

    name = "fax"

    def __init__(self) -> None:
        self.settled: list[str] = []
        self.attempts: list[str] = []

    def settle_operation(self, svc: Any, op: dict[str, Any], *, claim_wait: float) -> dict[str, Any]:
        self.settled.append(op["operation_id"])
        svc.journal.finish_operation(op["operation_id"], status="unknown", failure="unknown", error="fax in doubt",
                                     at=svc.now())
        return svc.journal.operation(op["operation_id"])

    def end_operation(self, svc: Any, op: dict[str, Any]) -> dict[str, Any]:
        return self.settle_operation(svc, op, claim_wait=0)

    def describe(self, op: dict[str, Any]) -> str:
        return f"fax to {op['input']['to']}"

    def plan(self, op: dict[str, Any]) -> Planned | None:
        if op.get("kind") != "fax":
            return None
        return Planned(self.name, {"effect": self.name}, {"max_attempts": 2, "timeout": 5, "backoff": 0,
                                                          "idempotent": 0})

    def no_compensation(self, op: dict[str, Any]) -> str:
        return "faxes cannot be unsent"

    def run_attempt(self, svc: Any, comp: dict[str, Any], op: dict[str, Any], trigger: str) -> Attempted:
        self.attempts.append(comp["compensation_id"])
        return Attempted(comp, None)

    def recover_attempt(self, svc: Any, comp: dict[str, Any], attempt: dict[str, Any], *,
                        claim_wait: float) -> dict[str, Any]:
        return comp

    def run_again(self, svc: Any, comp: dict[str, Any], op: dict[str, Any]) -> str | None:
        return None


def test_the_built_in_kinds_are_found_by_operation_and_by_compensation():
    assert isinstance(for_operation({"kind": "process"}), AppCall)
    assert isinstance(for_operation({"kind": "tool"}), AppCall)
    assert isinstance(for_operation({"kind": "http"}), HttpRequest)
    assert isinstance(for_compensation({"context": {"reverse_action": {"method": "DELETE"}}}), HttpRequest)
    assert isinstance(for_compensation({"context": {"original_operation_id": "op_1"}}), AppCall)
    http_op = {"kind": "http", "node_key": "order", "config": {"key": "order", "kind": "http", "method": "POST",
                                                                "url": "http://127.0.0.1/o"}}
    assert plan(http_op) is None and for_operation(http_op).no_compensation(http_op).startswith("http node 'order'")


def test_a_new_kind_is_one_module_and_its_registration(tmp_path, monkeypatch):
    fax = Fax()
    monkeypatch.setattr(effects, "_BY_NAME", dict(effects._BY_NAME))
    monkeypatch.setattr(effects, "_BY_OPERATION_KIND", dict(effects._BY_OPERATION_KIND))
    monkeypatch.setattr(effects, "_PLANNERS", list(effects._PLANNERS))
    register(fax, operation_kinds=("fax",))
    op = {"operation_id": "op_fax", "kind": "fax", "input": {"to": "+1555"}}
    assert for_operation(op) is fax and fax.describe(op) == "fax to +1555"
    planned = plan(op)
    assert planned is not None and planned.kind == "fax"
    assert for_compensation({"context": planned.context}) is fax
    # recovery settles an in-flight call of the new kind through it, with no other change anywhere
    svc = services(tmp_path)
    now = svc.now()
    svc.journal.create_run({"run_id": "run_fax", "workflow": "w", "workflow_path": "", "spec": {}, "inputs": {},
                            "status": "running", "created_at": now, "eval": 0, "rerun_of": None}, [])
    svc.journal.start_operation({
        "operation_id": "op_fax", "run_id": "run_fax", "node_key": "send", "tool_call_index": None, "app": "fax",
        "project": "", "kind": "fax", "tool_name": None, "config": {}, "input": {"to": "+1555"}, "fingerprint": "",
        "fingerprint_files": {}, "snapshot": None, "depends_on": [], "status": "starting", "call_dir": "",
        "created_at": now, "standalone": 0, "owner_pid": None, "owner_start": None})
    [row] = settle_operations(svc, "run_fax")
    assert fax.settled == ["op_fax"] and row["status"] == "unknown"
    svc.close()


def test_no_branch_on_the_kind_of_a_call_outside_effects():
    """Issue 27 must-show: no ``isinstance(…, DispatchRunner)`` anywhere, no test of an operation's kind outside
    ``workrun/effects/`` (the transport is the runner's, injected once)."""
    offenders = []
    for path in sorted((ROOT / "workrun").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        text = path.read_text()
        if "isinstance(" in text and re.search(r"isinstance\([^)]*DispatchRunner", text):
            offenders.append(f"{rel}: isinstance DispatchRunner")
        if rel.startswith("workrun/effects/"):
            continue
        if re.search(r"""\[["']kind["']\]\s*==\s*["']?(http|KIND|process|tool)""", text) or "is_reverse_action" in text:
            offenders.append(f"{rel}: branches on an operation's kind")
    assert offenders == []
