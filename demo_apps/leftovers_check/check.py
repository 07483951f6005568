"""`workrun verify --check demo_apps/leftovers_check:leftovers`: exit 0 when no file a call created is left.

A call's files are its result's ``file_path`` and the resources of kind ``file`` it recorded
(``process.resource("file", path)``)."""

from pathlib import Path

from workrun_sdk import process

data = process.input()  # {"run_id", "failed_after", "operations": [{"operation_id", "node_key", "input", "result", "resources"}]}
made = []
for o in data["operations"]:
    if isinstance(o.get("result"), dict) and isinstance(o["result"].get("file_path"), str):
        made.append(o["result"]["file_path"])
    made += [r["id"] for r in o.get("resources") or [] if isinstance(r, dict) and r.get("kind") == "file"]
left = sorted({path for path in made if path and Path(path).exists()})
if left:
    raise SystemExit("left behind after compensation: " + ", ".join(left))
process.result({"clean": True, "checked": len(data["operations"])})
