"""`workrun verify --check demo_apps/leftovers_check:leftovers`: exit 0 when no file a call created is left."""

from pathlib import Path

from workrun_sdk import process

data = process.input()  # {"run_id", "failed_after", "operations": [{"operation_id", "node_key", "input", "result", ...}]}
left = [o["result"]["file_path"] for o in data["operations"]
        if isinstance(o.get("result"), dict) and o["result"].get("file_path") and Path(o["result"]["file_path"]).exists()]
if left:
    raise SystemExit("left behind after compensation: " + ", ".join(left))
process.result({"clean": True, "checked": len(data["operations"])})
