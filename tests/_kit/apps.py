"""Source of the marker App used by several tests (the `marker_project` fixture in conftest)."""

MARKER_APP = """
[tool.workrun.apps.mark]
kind = "process"
entry = "main.py"
timeout = 60
compensation = { entry = "compensate.py", backoff = 0.05 }
"""

MARKER_MAIN = """
import os, json, time
from pathlib import Path
from workrun_sdk import process
data = process.input()
if data.get("sleep"):
    time.sleep(float(data["sleep"]))
if data.get("fail"):
    raise SystemExit(3)
process.result({"name": data.get("name", "x"), "approved": data.get("approved", True)})
"""

MARKER_COMPENSATE = """
import json, os, time
from pathlib import Path
from workrun_sdk import compensation
ctx = compensation.context()
log = Path(os.environ["TEST_LOG"]) if "TEST_LOG" in os.environ else None
name = ctx.original_result["name"]
if ctx.original_input.get("comp_sleep"):
    time.sleep(float(ctx.original_input["comp_sleep"]))
if ctx.original_input.get("comp_fail"):
    raise SystemExit(4)
if log:
    with open(log, "a") as fh:
        fh.write(json.dumps({"name": name, "t0": time.time(), "cid": ctx.compensation_id}) + "\\n")
compensation.result({"undone": name})
"""
