"""The run use cases (SPEC §22 R-V2): run, rerun, resume, compensate (also as a dry run, R-L3), stop, runs,
show, check (R-L1).

Each returns a :class:`Finished`: ``data`` is exactly what the CLI's ``--json`` prints and ``code`` the exit
code the CLI exits with (SPEC §16); what the CLI reports as one error line is raised as a
:class:`~workrun.core.errors.WorkrunError` (exit 2: config, usage, unknown id, refused; exit 3: another scheduler).
Progress goes to the ``reporter`` handed in (None: nowhere).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workrun.app.checks import check
from workrun.app.results import Finished, _inputs
from workrun.app.session import reading, run_claim, scheduling, shared_journal, viewing
from workrun.core.errors import ActionRefusedError, UsageError, WorkrunError
from workrun.core.rows import RunClaimRow, RunRow
from workrun.core.states import COMPENSATION_DONE

if TYPE_CHECKING:
    from workrun.runner.context import Confirm, Reporter
    from workrun.runner.services import Services

__all__ = ["EXIT", "CrashNotReached", "Finished", "check", "check_compensate", "compensate", "compensation_plan",
           "rerun", "resume", "run", "runs", "show", "stop"]

EXIT = {"succeeded": 0, "failed": 1, "terminated": 1, "waiting": 4, "stopped": 130}  # SPEC §16

Home = Path | str | None

#: what :mod:`workrun.testing` injects into the runs started inside its context managers (R-V3):
#: ``{"fail_after": NODE_KEY}`` and/or ``{"crash": (FAULT_POINT, N)}``; in the child of a crash, ``{"created":
#: callable(run_id)}``, told the new run's id as soon as it is recorded
INJECTION: ContextVar[dict[str, Any] | None] = ContextVar("workrun_injection", default=None)

_CHILD = """
import json, sys
from workrun.app import runs
from workrun.core.errors import WorkrunError
a = json.loads(sys.argv[1])
def created(run_id):  # the run's id reaches the parent at once: the child may be killed any time after
    sys.stdout.write(run_id + "\\n")
    sys.stdout.flush()
runs.INJECTION.set({"created": created})
try:
    if a["rerun"]:
        runs.rerun(a["rerun"], home=a["home"], fail_after=a["fail_after"])
    else:
        runs.run(a["workflow"], a["inputs"], home=a["home"], fail_after=a["fail_after"], verify=a["verify"])
except WorkrunError as exc:
    sys.stderr.write(json.dumps({"exit_code": exc.exit_code, "message": exc.message}) + "\\n")
    sys.exit(2)
"""


def _audit(svc: Services, run_id: str, action: str, args: dict[str, Any]) -> None:
    """Record a run-level operator action (R-O2, R-U4): who, when, what; a ``reason`` in ``args`` is the row's
    text too, shown where operator actions are (R-D4)."""
    from workrun.repair.operator import actor

    svc.journal.record_event({"run_id": run_id, "at": svc.now(), "actor": actor(), "action": action, "args": args,
                              "text": args.get("reason")})


def _start(spec: Any, inputs: dict[str, Any], *, home: Home, wait: bool, yes: bool, eval_run: bool,
           rerun_of: str | None, note: str, executors: Any, reporter: Reporter | None,
           confirm: Confirm | None) -> Finished:
    from workrun.app.views import run_detail
    from workrun.engine.driver import create_run
    from workrun.engine.recovery import drive

    with scheduling(home=home, wait=wait, reporter=reporter) as svc:
        svc.assume_yes = yes
        if confirm is not None:
            svc.confirm = confirm
        run_id = create_run(svc, spec, inputs, eval_run=eval_run, rerun_of=rerun_of)
        created = (INJECTION.get() or {}).get("created")
        if created is not None:
            created(run_id)
        if rerun_of:
            _audit(svc, rerun_of, "rerun", {"new_run": run_id})
        svc.say(run_id, None, "info", f"run {run_id} of {spec.name} started{note}")
        with run_claim(svc, run_id, wait=True):  # shared journal: driven here, as a worker would (R-S3)
            drive(svc, run_id, executors)
        svc.runner.hang_up()  # no call starts any more: the fork servers end while the run's view is read
        svc.journal.write_back()  # its syncs meanwhile too
        view = run_detail(svc.journal, run_id)
        return Finished(view, 130 if svc.stopping() else EXIT.get(view["status"], 1))


def run(workflow: Path | str, inputs: Mapping[str, Any] | list[str] | None = None, *, home: Home = None,
        wait: bool = False, eval_run: bool = False, yes: bool = False, reporter: Reporter | None = None,
        confirm: Confirm | None = None, fail_after: str | None = None, verify: bool = False) -> Finished:
    """Run a workflow to its end; on final failure compensate its succeeded calls (R-W1..R-W7, R-C1).

    Args:
        workflow: the workflow TOML file.
        inputs: ``{name: value}`` or ``KEY=VALUE`` strings (``--input``).
        home: the data directory (None: ``WORKRUN_HOME``, else the platform's).
        wait: wait for another scheduler instead of raising (exit 3).
        eval_run: an evaluation run, never compensated (R-W6).
        yes: approve tool calls whose App asks for confirmation.
        reporter: where progress goes.
        confirm: how to ask a person (None: nobody is asked; such a tool call is refused).
        fail_after: fail the run right after this node succeeds, as if its successor had failed (R-V1, R-V3;
            default: what :data:`INJECTION` says).
        verify: mark the run as a run of ``workrun verify`` (left out of ``runs list`` unless ``--all``).

    Returns:
        :class:`Finished`: the run's view (``runs show --json``) and 0/1/4/130 by its status (SPEC §16). Under
        :data:`INJECTION`'s ``crash``, the run runs in a child process killed at that fault point, and this is
        the journal's view of the run it left.

    Raises:
        ConfigError: a bad workflow or input (exit 2; every error found, R-L1).
        UsageError: ``fail_after`` names no node of the workflow (exit 2).
        SchedulerBusyError: another scheduler holds the data directory (exit 3).
    """
    from workrun.config.workflow import load_workflow
    from workrun.nodes import default_executors

    injected = INJECTION.get() or {}
    fail_after = fail_after or injected.get("fail_after")
    executors = default_executors()
    spec, values = load_workflow(Path(workflow), _inputs(inputs), executors)
    _check_fail_after(spec, fail_after)
    if injected.get("crash"):
        return _run_in_child(workflow, _inputs(inputs), home=home, fail_after=fail_after, verify=verify,
                             crash=injected["crash"])
    if fail_after is not None or verify:
        spec = spec.model_copy(update={"fail_after": fail_after, "verify": verify})
    return _start(spec, values, home=home, wait=wait, yes=yes, eval_run=eval_run, rerun_of=None,
                  note=" (evaluation run)" if eval_run else "", executors=executors, reporter=reporter,
                  confirm=confirm)


def _check_fail_after(spec: Any, fail_after: str | None) -> None:
    """Refuse a ``fail_after`` that names no node of the workflow.

    Raises:
        UsageError: naming the workflow's nodes (exit 2).
    """
    if fail_after is not None and fail_after not in spec.nodes:
        raise UsageError(f"no node {fail_after!r} in {spec.name} (its nodes: {', '.join(spec.nodes)})",
                         field="fail_after")  # the API's argument or workrun.testing's (the CLI has no such option)


def _run_in_child(workflow: Path | str | None, inputs: dict[str, str], *, home: Home, fail_after: str | None,
                  verify: bool, crash: tuple[str, int], rerun_of: str | None = None) -> Finished:
    """Run the workflow (or re-run ``rerun_of``) in a child process that is killed at the ``crash[1]``-th commit
    of the journal write ``crash[0]`` (``WORKRUN_FAULT``, R-V3); return the journal's view of that run afterwards.

    Warns:
        CrashNotReached: the child was never killed (its run never reached that commit).

    Raises:
        WorkrunError: the child refused before its run started (with the child's exit code: 2 for bad input, 3
            for a busy data directory), or ended without starting a run.
    """
    point, n = crash
    env = {**os.environ, "WORKRUN_FAULT": f"{point}@{int(n)}"}
    if home is not None:
        env["WORKRUN_HOME"] = str(Path(home).expanduser().absolute())
    args = {"workflow": str(Path(workflow).absolute()) if workflow is not None else None, "inputs": inputs,
            "home": None, "fail_after": fail_after, "verify": verify, "rerun": rerun_of}
    before = _run_ids(home)
    child = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(args)], env=env, stdin=subprocess.DEVNULL,
                           capture_output=True, text=True)
    run_id = child.stdout.split("\n", 1)[0].strip()
    if not run_id:  # killed as its run was recorded (``run.created``): the one run that was not there before
        new = [r for r in _run_ids(home) if r not in before]
        run_id = new[0] if len(new) == 1 else ""
    if not run_id:
        refused = _refusal(child.stderr)
        if refused is not None:
            raise refused
        raise WorkrunError(f"the run's process ended (exit {child.returncode}) before it started a run: "
                           f"{child.stderr.strip()[-300:]}")
    with _viewing(home) as journal:
        from workrun.app.views import run_detail

        view = run_detail(journal, run_id)
    killed = child.returncode < 0
    if not killed:  # a crash test that crashed nothing must not pass unseen as one (new-user review)
        import warnings

        warnings.warn(CrashNotReached(f"crash_at({point!r}, n={n}): run {run_id} ended {view['status']} without "
                                      f"reaching commit {n} of {point}: nothing was killed"), stacklevel=3)
    return Finished(view, EXIT.get(view["status"], 1) if view["status"] != "running" else 1,
                    note=f"killed at {point} (commit {n})" if killed else "", extra={"killed": killed})


class CrashNotReached(UserWarning):
    """Warned by a run under ``crash_at`` whose run never reached that commit: nothing was killed, and the run
    returned is one that ran its course (R-V3). ``pytest -W error::workrun.testing.CrashNotReached`` makes it a
    failure."""


def _run_ids(home: Home) -> list[str]:
    """Every run id of the data directory (none when it cannot be read yet, e.g. before its first run)."""
    try:
        with _viewing(home) as journal:
            return [r["run_id"] for r in journal.run_summaries(verify=None)]
    except WorkrunError:
        return []


def _refusal(stderr: str) -> WorkrunError | None:
    """The error a child of :func:`_run_in_child` refused with (its last stderr line), with its exit code."""
    try:
        said = json.loads(stderr.strip().splitlines()[-1])
        code, message = int(said["exit_code"]), str(said["message"])
    except (IndexError, ValueError, KeyError, TypeError):
        return None
    error = WorkrunError(message)
    error.exit_code = code
    return error


def rerun(run_id: str, *, home: Home = None, wait: bool = False, yes: bool = False,
          reporter: Reporter | None = None, confirm: Confirm | None = None,
          fail_after: str | None = None) -> Finished:
    """Start a new run with the same workflow and inputs; the old run's record is untouched (R-W5). What
    :mod:`workrun.testing` injects applies to it as to :func:`run` (``fail_after``, a crash; R-V3).

    Raises:
        NotFoundError: no run matches ``run_id`` (exit 2).
        ConfigError: the workflow file no longer loads (exit 2).
        SchedulerBusyError: another scheduler holds the data directory (exit 3).
    """
    from workrun.config.workflow import load_workflow
    from workrun.core.models import WorkflowSpec
    from workrun.nodes import default_executors

    executors = default_executors()
    with reading(home=home) as ro:
        old = ro.journal.run(run_id)
    path = Path(old["workflow_path"])
    if path.is_file():
        spec, inputs = load_workflow(path, dict(old["inputs"].items()), executors, known_inputs_only=False)
    else:  # the recorded workflow, without what verify or a test injected into that run (R-W5: the same
        # workflow and inputs; R-V3: an injection applies to the runs started inside it only)
        spec = WorkflowSpec.model_validate({**old["spec"], "fail_after": None, "verify": False})
        inputs = old["inputs"]
    note = f" (re-run of {old['run_id']})" + ("" if path.is_file() else f"; {path} is gone, so the recorded "
                                                                       "workflow is used")
    injected = INJECTION.get() or {}
    fail_after = fail_after or injected.get("fail_after")
    _check_fail_after(spec, fail_after)
    if injected.get("crash"):
        return _run_in_child(None, {}, home=home, fail_after=fail_after, verify=False, crash=injected["crash"],
                             rerun_of=old["run_id"])
    if fail_after is not None:
        spec = spec.model_copy(update={"fail_after": fail_after})
    return _start(spec, inputs, home=home, wait=wait, yes=yes, eval_run=bool(old["eval"]), rerun_of=old["run_id"],
                  note=note, executors=executors, reporter=reporter, confirm=confirm)


def _left_unknown(svc: Services, run_id: str, since: float) -> bool:
    """True when a call of the run was settled as ``unknown`` at or after ``since`` (epoch seconds) and its node did
    not then succeed or have its failure handled: a person must verify it (R-R3)."""
    ended = {n["node_key"] for n in svc.journal.nodes(run_id) if n["status"] == "succeeded" or n["handled"]}
    return any(o["status"] == "unknown" and (o["ended_at"] or 0) >= since and o["node_key"] not in ended
               for o in svc.journal.operations(run_id))


def resume(*, home: Home = None, wait: bool = False, reporter: Reporter | None = None) -> Finished:
    """Continue every unfinished run and compensation in the data directory (R-R1).

    Returns:
        :class:`Finished`: ``{"runs": [run views]}``; code 0 when every compensation it handled ended
        succeeded or skipped, every ticket action it sent or settled succeeded and no call it settled ended
        ``unknown`` (R-R3: a person verifies it), else 1 (130: stopped).
    """
    from workrun.app.views import run_detail
    from workrun.engine.recovery import resume_all

    with scheduling(home=home, wait=wait, resume_first=False, reporter=reporter) as svc:
        t0 = svc.now()
        if shared_journal():  # claim runs one by one, like a worker that ends when nothing is left (R-S2)
            from workrun.cluster.workers import resume_shared

            handled = resume_shared(svc)
        else:
            handled = resume_all(svc)
        views = [run_detail(svc.journal, r) for r in handled]
        # SPEC §10: 0 when every compensation it handled ended succeeded or skipped, and every ticket action it
        # sent or settled (R-M3: a job with attempts, like a compensation; `tickets retry` exits by it too)
        # succeeded; an action that had failed before this command (a dead letter already) is not its doing
        acted = [a for v in views for t in v["tickets"] if t["action"]
                 and (a := svc.journal.ticket_action(t["ticket_id"])) is not None and a["updated_at"] >= t0]
        ok = all(op["compensation"]["status"] in COMPENSATION_DONE
                 for v in views for op in v["operations"] if op["compensation"])
        ok = ok and all(a["status"] == "succeeded" for a in acted)
        # a call it settled as unknown (in flight when the runner died, no exit record) whose node then failed
        # needs a person (R-R3): not "all ended well" (crash review: a cron job running resume was told exit 0).
        # One re-sent and answered (idempotent), or whose node's failure was handled, left nothing to verify.
        ok = ok and not any(_left_unknown(svc, r, t0) for r in handled)
        return Finished({"runs": views}, 130 if svc.stopping() else (0 if ok else 1),
                        note="" if handled else "nothing to resume")


def check_compensate(run: RunRow, *, lasting_only: bool = False) -> None:
    """Refuse ``compensate`` of this run row (exit 2): an evaluation run, or one running, succeeded or waiting
    for a person.

    ``lasting_only``: only what resuming a dead runner's work cannot change (evaluation, succeeded, waiting),
    asked before the scheduler lock (the dashboard reports a command that holds it as started, R-U4); a
    ``running`` run may be one a dead runner left, which the command resumes first.

    Raises:
        ActionRefusedError: the run cannot be compensated.
    """
    rid = run["run_id"]
    if run["eval"]:
        raise ActionRefusedError("evaluation runs are never compensated (R-W6)", field="RUN")
    if run["status"] == "running" and not lasting_only:
        raise ActionRefusedError(f"run {rid} is still running; `workrun stop {rid}` first", field="RUN")
    if run["status"] == "succeeded":
        raise ActionRefusedError(f"run {rid} succeeded; succeeded runs are not compensated (R-C1)", field="RUN")
    if run["status"] == "waiting":
        raise ActionRefusedError(f"run {rid} is waiting for a person; `workrun tickets terminate TICKET` "
                                 "ends it and compensates its calls", field="RUN")


def compensate(run_id: str, *, dry_run: bool = False, home: Home = None, wait: bool = False,
               reporter: Reporter | None = None, reason: str | None = None) -> Finished:
    """Compensate a stopped or terminated run, or finish a failed run's compensation (R-C9); with ``dry_run``
    only say what would be done, changing nothing (R-L3).

    Returns:
        :class:`Finished`: the run's view and 0 when every compensation ended succeeded or skipped, else 1
        (130: stopped); with ``dry_run`` the plan (:func:`compensation_plan`) and 0.

    Raises:
        NotFoundError: no run matches (exit 2).
        ActionRefusedError: the run cannot be compensated (exit 2; not for a dry run).
        SchedulerBusyError: another scheduler holds the data directory (exit 3).
    """
    from workrun.app.views import run_detail
    from workrun.engine.recovery import compensate_now
    from workrun.repair.operator import actor

    if dry_run:
        with reading(home=home) as ro:
            return Finished(compensation_plan(ro, run_id))
    with reading(home=home) as ro:  # an unknown id or a refusal is exit 2 at once, even while another scheduler runs
        check_compensate(ro.journal.run(run_id), lasting_only=True)
    with scheduling(home=home, wait=wait, reporter=reporter) as svc:
        run_row = svc.journal.run(run_id)
        rid = run_row["run_id"]
        check_compensate(run_row)  # again: the run may have moved while this waited for the lock
        # a stopped or terminated run's first request is its audit row; any other compensate (a failed run's taken
        # up again) is audited too, who and why (R-O2, R-D4; dashboard review: its reason was lost)
        first_request = run_row["status"] in ("stopped", "terminated") and not run_row["compensate_requested"]
        if first_request:
            svc.journal.request_compensation(rid, {"run_id": rid, "at": svc.now(), "actor": actor(),
                                                   "action": "compensate", "text": reason,
                                                   "args": {"reason": reason} if reason else {}})
            svc.say(rid, None, "info", f"compensation of {run_row['status']} run {rid} requested by {actor()}")
        before = {c["compensation_id"]: c["status"] for c in svc.journal.compensations(rid)}
        with run_claim(svc, rid, wait):
            if not first_request:  # once it holds the run: never for one another worker's claim refused (diff review)
                _audit(svc, rid, "compensate", {"reason": reason} if reason else {})
            compensate_now(svc, rid)
        view = run_detail(svc.journal, rid)
        comps = [op["compensation"] for op in view["operations"] if op["compensation"]]
        ok = all(c["status"] in COMPENSATION_DONE for c in comps)
        if before and ok and all(s in COMPENSATION_DONE for s in before.values()) \
                and {c["compensation_id"]: c["status"] for c in comps} == before:  # said only: nothing changed
            svc.reporter.message(rid, None, "info", f"nothing to compensate: every compensation of run {rid} is done")
        return Finished(view, 130 if svc.stopping() else (0 if ok else 1))


def _plan_todo(step: dict[str, Any], run_id: str) -> str:
    """What a person does about one step of a plan that needs them (``compensate --dry-run``'s ``would``)."""
    from workrun.app.views import operator_commands

    cid, change = step["compensation_id"], step["code_change"]
    if not change:
        return operator_commands(cid, step["status"], step["held_back_by"])
    # its script's code changed: tried, it is blocked (R-C8); only an accepted change (or resolving it) goes on
    todo = (f"code changed since the call ({change.removeprefix('code changed since the call: ')}): "
            f"`workrun compensations retry {cid} --accept-code-change` or `workrun compensations resolve {cid}`")
    if step["held_back_by"]:
        todo = f"held back by {', '.join(step['held_back_by'])} until they are done; then {todo}"
    if step.get("planned"):  # not in the journal yet: `compensate` writes it first
        todo = f"not in the journal yet (`workrun compensate {run_id}` writes it); then {todo}"
    return todo


def compensation_plan(svc: Services, run_id: str) -> dict[str, Any]:
    """The compensation plan of a run, changing nothing (R-L3): each compensation in the order it runs (or
    ran), with its node, App or reverse action, current status, and what holds it back. For a run whose
    compensation was not planned yet (stopped, terminated, or failed with records missing) the records
    ``compensate`` would write are shown ``pending``.

    Returns:
        ``{"run_id", "status", "would": text, "plan": [{"place", "node_key", "operation_id", "compensation_id",
        "planned", "app" | "action", "status", "held_back_by": [ids], "code_change": text | null}]}`` (``place``
        from 1; ``code_change``: why its script would be blocked when tried, R-C8; a call whose App
        declares no compensation is not listed). ``planned``: not in the journal yet: ``compensate`` would write
        it, with this ``compensation_id`` (it follows from the operation's), which commands find only then.

    Raises:
        NotFoundError: no run matches (exit 2).
    """
    from workrun.compensation import plan_records
    from workrun.compensation.planning import Item, plan, reverse_order
    from workrun.effects.operations import code_change

    run_row = svc.journal.run(run_id)
    rid = run_row["run_id"]
    ops = svc.journal.operations(rid)
    comps = {c["operation_id"]: c for c in svc.journal.compensations(rid)}
    owed = run_row["status"] in ("failed", "stopped", "terminated") and not run_row["eval"]
    planned: set[str] = set()  # what ``compensate`` would write (each id follows from its operation's)
    if owed:
        for rec in plan_records([o for o in ops if o["operation_id"] not in comps], svc.now()):
            comps[rec["operation_id"]] = rec
            planned.add(rec["compensation_id"])
    items = [Item(o["operation_id"], o["node_key"] or "", tuple(o["depends_on"] or ()),
                  comps[o["operation_id"]]["compensation_id"] if o["operation_id"] in comps else None,
                  comps[o["operation_id"]]["status"] if o["operation_id"] in comps else None,
                  bool(o["operation_id"] in comps and comps[o["operation_id"]].get("held_back_by") is not None))
             for o in ops]
    decision = plan(items)
    order = reverse_order(ops)
    by_op = {o["operation_id"]: o for o in ops}
    steps: list[dict[str, Any]] = []
    for op_id in order:
        c = comps.get(op_id)
        if c is None or c["status"] == "skipped":
            continue
        op = by_op[op_id]
        step: dict[str, Any] = {"place": len(steps) + 1, "node_key": op["node_key"], "operation_id": op_id,
                                "compensation_id": c["compensation_id"], "planned": c["compensation_id"] in planned}
        action = (c.get("context") or {}).get("reverse_action")
        if action:
            step["action"] = _describe_action(action)
        else:
            step["app"] = op["app"]
        step["status"] = c["status"]
        step["held_back_by"] = list(decision.hold.get(c["compensation_id"]) or c.get("held_back_by") or [])
        # a script whose App's code changed since the call is blocked when it is tried (R-C8): said now
        step["code_change"] = code_change(op) if "app" in step and c["status"] not in COMPENSATION_DONE \
            and not c.get("accept_code_change") else None
        steps.append(step)
    if run_row["eval"]:
        would = "nothing: evaluation runs are never compensated"
    elif run_row["status"] in ("running", "waiting", "succeeded"):
        would = "nothing now: " + ("the run succeeded" if run_row["status"] == "succeeded"
                                   else f"the run is {run_row['status']}")
    elif not steps:
        would = "nothing: no succeeded call has a compensation"
    elif all(s["status"] in COMPENSATION_DONE for s in steps):
        would = "nothing: every compensation is done"
    else:
        stuck = [s for s in steps if s["status"] in ("failed", "unknown") or s["status"] == "blocked"
                 and not s["held_back_by"] or s["code_change"]]
        # a held-back one runs by itself only when nothing that holds it back (transitively) needs an operator
        waits = {s["compensation_id"] for s in stuck}
        grew = True
        while grew:
            grew = False
            for s in steps:
                if s["compensation_id"] not in waits and s["status"] == "blocked" \
                        and waits & set(s["held_back_by"]):
                    waits.add(s["compensation_id"])
                    grew = True
        runnable = sum(1 for s in steps if s["compensation_id"] not in waits
                       and (s["status"] in ("pending", "running") or s["status"] == "blocked"))
        would = (f"run {runnable} compensation(s) in the order shown" if runnable else "nothing by itself")
        if stuck:
            would += f"; {len(stuck)} need(s) an operator first: " + "; ".join(
                f"{s['compensation_id']} {_plan_todo(s, rid)}" for s in stuck)
    return {"run_id": rid, "status": run_row["status"], "would": would, "plan": steps}


def _describe_action(action: dict[str, Any]) -> str:
    """A reverse action for people, by its kind: ``DELETE URL``, ``sms TEMPLATE to …``, ``email to …``,
    ``update_data FIELDS``."""
    kind = action.get("kind") or "http"
    if kind == "email":
        return "email to " + ", ".join((action.get("email") or {}).get("to") or [])
    if kind == "update_data":
        return "update_data " + ", ".join((action.get("update_data") or {}).get("fields") or [])
    if kind == "sms":
        body = action.get("body") or {}
        return f"sms {body.get('template_id', '')} via {action.get('connector', '')}".strip()
    via = f" via {action['connector']}" if action.get("connector") else ""
    return f"{action.get('method', '')} {action.get('url', '')}{via}".strip()


def stop(run_id: str, *, home: Home = None, timeout: float = 60.0, say: Callable[[str], None] | None = None,
         reporter: Reporter | None = None, reason: str | None = None) -> Finished:
    """Stop a running or waiting run from anywhere: its App processes end, nothing is compensated (R-C9).

    Args:
        timeout: seconds to wait for the scheduler driving it to end it.
        say: told what happens while it waits (``stop requested; worker … is ending run …``).

    Returns:
        :class:`Finished`: the run's view afterwards, 0, and ``note`` saying what became of it.

    Raises:
        NotFoundError: no run matches (exit 2).
    """
    from workrun.app.views import run_detail
    from workrun.core.lock import SchedulerLock
    from workrun.engine.recovery import stop_orphaned_run

    tell = say or (lambda text: None)
    with reading(home=home, writable=True, reporter=reporter) as svc:
        run_row = svc.journal.run(run_id)
        rid = run_row["run_id"]
        if run_row["status"] == "waiting":  # nobody drives a waiting run: end it here, under the lock (R-M7)
            with run_claim(svc, rid, wait=True) if shared_journal() else SchedulerLock(svc.data_dir, wait=True):
                if svc.journal.run(rid)["status"] == "waiting":
                    _audit(svc, rid, "stop", {"reason": reason} if reason else {})  # who and why, as for a running one
                    stop_orphaned_run(svc, rid)
            view = run_detail(svc.journal, rid)
            return Finished(view, 0, f"run {rid}: {view['status']}; its pending tickets are terminated; "
                            + _not_undone(view))
        if run_row["status"] != "running":
            return Finished(run_detail(svc.journal, rid), 0,
                            f"run {rid} has ended ({run_row['status']}); nothing to stop")
        svc.journal.request_stop(rid)
        _audit(svc, rid, "stop", {"reason": reason} if reason else {})
        lock: _StopClaim | SchedulerLock | None = _StopClaim(svc, rid) if shared_journal() else SchedulerLock(
            svc.data_dir)
        assert lock is not None
        try:
            lock.acquire()
        except WorkrunError:
            holder = lock.holder()
            who = (f"worker {holder['worker_id']} (host {holder.get('host', '?')}, pid {holder.get('pid', '?')})"
                   if holder.get("worker_id") else f"the scheduler (pid {holder.get('pid', '?')})")
            tell(f"stop requested; {who} is ending run {rid}")
            end = time.monotonic() + timeout
            lock = None
            while time.monotonic() < end and svc.journal.run(rid)["status"] == "running":
                time.sleep(0.1)
                if shared_journal() and (_claim_of(svc, rid) or {}).get("lease_until", 0) < time.time():
                    lock = _StopClaim(svc, rid)  # its scheduler died (its lease passed): end the run here
                    try:
                        lock.acquire()
                        break
                    except WorkrunError:
                        lock = None
        if lock is not None:
            try:
                if svc.journal.run(rid)["status"] == "running":
                    with _dispatching(svc, rid):  # shared journal: its calls are ended through their claims
                        stop_orphaned_run(svc, rid)
            finally:
                lock.release()
        view = run_detail(svc.journal, rid)
        done = any(o["status"] == "succeeded" for o in view["operations"])
        note = f"run {rid}: {view['status']}" + (f"; {_not_undone(view)}" if view["status"] == "stopped" and done else
                                                 ": no call had succeeded, nothing to undo"
                                                 if view["status"] == "stopped" else "")
        return Finished(view, 0, note)


def _not_undone(view: dict[str, Any]) -> str:
    """What a stopped run left (R-L6): "not undone: N calls — workrun compensate RUN" when it owes compensations,
    else that its side effects were not undone."""
    from workrun.app.views import rollup_line

    if view["compensation"] == "not_undone":
        return rollup_line(view)
    return f"side effects were NOT undone; `workrun compensate {view['run_id']}` undoes them"


def _dispatching(svc: Services, run_id: str) -> Any:
    """On a shared journal, the run's App processes are reached through their executors' claims (R-S2)."""
    from contextlib import nullcontext

    if not shared_journal():
        return nullcontext()
    from workrun.cluster.workers import dispatching

    return dispatching(svc, run_id)


def _claim_of(svc: Services, run_id: str) -> RunClaimRow | None:
    """The run's claim on a shared journal (its ``lease_until``), or None."""
    from workrun.cluster.workers import shared

    claim: RunClaimRow | None = shared(svc).run_claim(run_id)
    return claim


class _StopClaim:
    """``stop`` on a shared journal: the run's claim plays the scheduler lock's part (R-S2)."""

    def __init__(self, svc: Services, run_id: str) -> None:
        from workrun.cluster.workers import Heartbeat, lease_seconds, shared

        self.svc, self.run_id = svc, run_id
        self.journal = shared(svc)
        self.beat = Heartbeat(svc.data_dir, lease_seconds())

    def acquire(self) -> None:
        from workrun.core.errors import SchedulerBusyError

        self.beat.start()
        if not self.beat.claim(self.journal, self.run_id):
            self.beat.stop()
            raise SchedulerBusyError("held by a worker")

    def holder(self) -> RunClaimRow:
        return _claim_of(self.svc, self.run_id) or {}

    def release(self) -> None:
        self.beat.release(self.journal, self.run_id)
        self.beat.stop()


def runs(limit: int | None = None, *, home: Home = None, all_runs: bool = False) -> Finished:
    """The runs, newest first (``runs list --json``): at most ``limit`` (None: all); ``workrun verify``'s runs
    only with ``all_runs`` (``--all``, R-V1).

    Raises:
        UsageError: ``limit`` below 1 (exit 2).
    """
    from workrun.app.views import runs_list

    if limit is not None and limit < 1:
        raise UsageError(f"must be at least 1, not {limit}", field="--limit")
    with _viewing(home) as journal:
        return Finished(runs_list(journal, limit=limit, verify=None if all_runs else False))


def show(run_id: str, *, home: Home = None) -> Finished:
    """One run as ``runs show --json`` prints it (SPEC §9).

    Raises:
        NotFoundError: no run matches ``run_id`` (exit 2).
    """
    from workrun.app.views import run_detail

    with _viewing(home) as journal:
        return Finished(run_detail(journal, run_id))


def _viewing(home: Home) -> Any:
    return viewing(home=home)
