"""``workrun verify`` (SPEC §22, R-V1): prove a workflow's compensations before they are needed.

For each node N (every node whose calls are compensable, or those named) one *scenario*: a real run of
the workflow with a failure injected right after N succeeds (nothing new starts, running nodes finish,
R-W3), its compensation run to the end; then each compensation that succeeded is made once more with
the same context (an idempotency check: it must succeed again); then the ``check`` App, if given, is
called with ``{"run_id", "failed_after", "operations": [{"operation_id", "node_key", "input", "result",
"resources"}]}``: its exit 0 says the world is clean. With ``crash``, the scenario's runner is killed at
each compensation-phase fault point in turn (killed, resumed, killed at the next point, …) and finally
resumed: every compensation must end ``succeeded`` and none whose success was saved may run again; the
idempotency re-run then happens once, after the crashes.

Verify runs are real runs (real side effects: use test resources), marked ``verify`` and left out of
``runs list`` unless ``--all``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from workrun.app import runs
from workrun.app.runs import INJECTION, CrashNotReached, Finished
from workrun.app.session import reading
from workrun.core.errors import UsageError

__all__ = ["CRASH_POINTS", "verify"]

#: the compensation phase's journal writes, in the order a scenario meets them (``--crash``): the run's failure
#: with its compensation records, a compensation's status (an attempt's intent is its first change), an
#: attempt's intent, its process started or its request about to be sent, its outcome
CRASH_POINTS = ("run.failed", "comp.status", "attempt.intent", "attempt.started", "attempt.finished")

Home = Path | str | None


def _resume_killed_at(point: str, home: Home, wait: bool = False) -> int:
    """``workrun resume`` in a child killed at the first commit of ``point``; its exit code (-9 when killed)."""
    env = {**os.environ, "WORKRUN_FAULT": f"{point}@1"}
    if home is not None:
        env["WORKRUN_HOME"] = str(Path(home).expanduser().absolute())
    return subprocess.run([sys.executable, "-m", "workrun", "resume", "--json", *(["--wait"] if wait else [])],
                          env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL).returncode


def _scenario(workflow: Path, inputs: dict[str, str], node: str, *, check: tuple[Path, str] | None, crash: bool,
              home: Home, wait: bool = False) -> dict[str, Any]:
    """One scenario (see the module doc): ``{"node", "status": "ok"|"failed", "runs": [id], "failures": [text]}``."""
    from workrun import effects
    from workrun.core.states import COMPENSATION_DONE
    from workrun.effects.operations import call_app
    from workrun.runner.apps import load_app

    failures: list[str] = []
    killed: list[str] = []
    if crash:
        token = INJECTION.set({"crash": (CRASH_POINTS[0], 1)})
        try:
            with warnings.catch_warnings():  # a point never reached is said in the scenario's line, not as a warning
                warnings.simplefilter("ignore", CrashNotReached)
                done = runs.run(workflow, inputs, home=home, fail_after=node, verify=True, wait=wait)
        finally:
            INJECTION.reset(token)
        view = done.data
        if done.extra.get("killed"):
            killed.append(CRASH_POINTS[0])
        for point in CRASH_POINTS[1:]:
            if _resume_killed_at(point, home, wait) < 0:
                killed.append(point)
        runs.resume(home=home, wait=wait)
    else:
        view = runs.run(workflow, inputs, home=home, fail_after=node, verify=True, wait=wait).data
    run_id = view["run_id"]
    with reading(home=home, writable=True) as svc:
        run = svc.journal.run(run_id)
        if run["status"] != "failed":
            failures.append(f"the run ended {run['status']}, not failed ({run['reason'] or '-'})")
        reached = next((n["status"] for n in svc.journal.nodes(run_id) if n["node_key"] == node), None)
        if reached != "succeeded":  # the failure is injected right after it succeeds: nothing was verified
            failures.append(f"node {node} ended {reached or 'not started'}, not succeeded: no failure was injected "
                            "after it, so what undoes it was not verified")
        ops = {o["operation_id"]: o for o in svc.journal.operations(run_id)}
        comps = svc.journal.compensations(run_id)
        # (nothing owed: no point to reach, as a scenario without --crash holds; said first, as it came first)
        if crash and not killed and any(c["status"] != "skipped" for c in comps):
            failures.insert(0, "--crash: no compensation-phase fault point was reached")
        for c in comps:
            label = f"compensation {c['compensation_id']} of {c['node_key']}"
            if c["status"] not in COMPENSATION_DONE:
                failures.append(f"{label} ended {c['status']}" + (f": {c['reason']}" if c["reason"] else ""))
            saved = [a for a in svc.journal.attempts(c["compensation_id"]) if a["status"] == "succeeded"]
            if len(saved) > 1:
                failures.append(f"{label} succeeded {len(saved)} times: a saved success ran again")
        for c in comps:  # the idempotency check: once more, same context, must succeed again
            if c["status"] != "succeeded":
                continue
            why = effects.for_compensation(c).run_again(svc, c, ops[c["operation_id"]])
            if why is not None:
                failures.append(f"compensation {c['compensation_id']} of {c['node_key']} is not idempotent: "
                                f"run again with the same context, it failed ({why})")
        if check is not None:
            project, app_name = check
            payload = {"run_id": run_id, "failed_after": node,
                       "operations": [{"operation_id": o["operation_id"], "node_key": o["node_key"],
                                       "input": o["input"], "result": o["result"], "resources": o["resources"]}
                                      for o in ops.values() if o["status"] == "succeeded"]}
            row = call_app(svc, project=project, app=load_app(project, app_name), input=payload, run_id=None,
                           node_key=None, depends_on=[], standalone=True)
            if row["status"] != "succeeded":
                failures.append(f"check App {app_name} says the world is not clean: {row['error'] or row['status']}")
    result = {"node": node, "status": "failed" if failures else "ok", "runs": [run_id], "failures": failures}
    return {**result, "killed_at": killed} if crash else result


def verify(workflow: Path | str, inputs: Mapping[str, Any] | list[str] | None = None, *,
           nodes: list[str] | None = None, check: str | None = None, crash: bool = False,
           home: Home = None, wait: bool = False) -> Finished:
    """Run one scenario per node (see the module doc) and report them.

    Args:
        nodes: the nodes to fail after (default: every node whose calls are compensable).
        check: ``PROJECT:APP``, the App that says the world is clean (PROJECT relative to the current directory).
        crash: kill the runner at each compensation-phase fault point in turn, then resume.
        wait: wait for another scheduler instead of ending with exit 3 (``--wait``).

    Returns:
        :class:`Finished`: ``data`` a list of ``{"node", "status": "ok"|"failed", "runs", "failures"}``, ``code``
        0 when every scenario holds, else 1; ``note`` one line per scenario and a summary.

    Raises:
        ConfigError: a bad workflow, input or check App (exit 2).
        UsageError: an unknown ``--node``, a ``--check`` without ``:`` or naming an App that is no process App
            (exit 2).
    """
    from workrun.config.workflow import compensable_nodes, load_workflow
    from workrun.nodes import default_executors
    from workrun.runner.apps import load_app

    values = runs._inputs(inputs)
    path = Path(workflow)
    spec, _ = load_workflow(path, values, default_executors())
    for key in nodes or []:
        if key not in spec.nodes:
            raise UsageError(f"no node {key!r} in {spec.name} (its nodes: {', '.join(spec.nodes)})", field="--node")
    chosen = list(nodes) if nodes else compensable_nodes(spec.nodes)
    checker: tuple[Path, str] | None = None
    if check is not None:
        project, sep, app_name = check.rpartition(":")
        if not sep or not project or not app_name:
            raise UsageError(f"expected PROJECT:APP, got {check!r}", field="--check")
        checker = (Path(project).absolute(), app_name)
        found = load_app(checker[0], app_name, field="--check")
        if found.kind != "process":  # called with the scenario's input and judged by its exit code (R-V1)
            raise UsageError(f"App {app_name!r} is a {found.kind} App; a check is a process App", field="--check")
    results = [_scenario(path, values, key, check=checker, crash=crash, home=home, wait=wait) for key in chosen]
    # one line per scenario exactly as R-V1 writes it (``N  ok``); where --crash killed the runs, in the summary
    lines = [f"{r['node']}  ok" if r["status"] == "ok" else f"{r['node']}  FAILED: {'; '.join(r['failures'])}"
             for r in results]
    ok = sum(1 for r in results if r["status"] == "ok")
    points = list(dict.fromkeys(p for r in results for p in r.get("killed_at") or []))  # in the order they came
    lines.append(f"verify: {ok} of {len(results)} scenario(s) hold" + ("" if results else
                                                                       " (no node has a compensable call)")
                 + (f" (each run killed at {', '.join(points)} in turn, then resumed)" if points else ""))
    return Finished(results, 0 if ok == len(results) else 1, "\n".join(lines))
