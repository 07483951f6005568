"""Compensation: remove the step's marker file."""

from pathlib import Path

from workrun_sdk import compensation

ctx = compensation.context()
marker = Path(ctx.original_result["marker"])
marker.unlink(missing_ok=True)
print(f"undid {ctx.original_result['name']}: removed {marker}")
compensation.result({"removed": str(marker)})
