"""A Tool App records a dependency between two tool calls with the SDK (issue 5, R-C3/R-C4)."""

from __future__ import annotations

TOOLS_APP = """
[tool.workrun.apps.steps]
kind = "tool"
entry = "tools.py"
compensation = { entry = "compensate.py", max_retries = 0 }

[tool.workrun.apps.boom]
entry = "boom.py"
"""

TOOLS = """
import os
from workrun_sdk import process
from workrun_sdk.tool import tool

@tool(name="first", description="The first step; remembers its operation id.")
def first() -> dict:
    with open(os.environ["SHARED"], "w") as fh:
        fh.write(process.operation_id())
    return {"step": "first"}

@tool(name="second", description="Builds on the first step.")
def second(fail_comp: bool = False, link: bool = True) -> dict:
    if link:
        with open(os.environ["SHARED"]) as fh:
            process.depends_on(fh.read())
    return {"step": "second"}
"""

COMPENSATE = """
from workrun_sdk import compensation
ctx = compensation.context()
if ctx.original_input.get("fail_comp"):
    raise SystemExit("cannot undo the second step")
compensation.result({"undone": ctx.original_result["step"]})
"""


def _run(workrun, write_workflow, make_project, tmp_path, link):
    proj = make_project("steps", TOOLS_APP, {"tools.py": TOOLS, "compensate.py": COMPENSATE,
                                             "boom.py": "raise SystemExit(1)\n"})
    wf = write_workflow("dep", f"""
        [nodes.agent]
        kind = "agent"
        tools = [{{ project = "{proj}", app = "steps" }}]
        script = [{{ tool = "first" }}, {{ tool = "second", args = {{ fail_comp = true, link = {str(link).lower()} }} }}]
        [nodes.boom]
        project = "{proj}"
        app = "boom"
        needs = ["agent"]
    """)
    res = workrun("run", wf, "--json", env={"SHARED": str(tmp_path / "first.id")})
    assert res.code == 1, res
    ops = {o["tool"]: o for o in res.json()["operations"] if o["node_key"] == "agent"}
    return ops


def test_recorded_dependency_orders_and_holds_back(workrun, write_workflow, make_project, tmp_path):
    ops = _run(workrun, write_workflow, make_project, tmp_path, link=True)
    assert ops["second"]["depends_on"] == [ops["first"]["operation_id"]]
    assert ops["second"]["compensation"]["status"] == "failed"
    first = ops["first"]["compensation"]
    assert first["status"] == "blocked" and ops["second"]["compensation"]["compensation_id"] in first["reason"]


def test_without_a_recorded_dependency_tool_calls_are_independent(workrun, write_workflow, make_project, tmp_path):
    ops = _run(workrun, write_workflow, make_project, tmp_path, link=False)
    assert ops["second"]["depends_on"] == []
    assert ops["second"]["compensation"]["status"] == "failed"
    assert ops["first"]["compensation"]["status"] == "succeeded"
