"""Compensation shared by the Process App and the Tool App: delete the file the call created."""

from pathlib import Path
from tempfile import gettempdir

from workrun_sdk import compensation


def main() -> None:
    ctx = compensation.context()
    path = Path(ctx.original_result["file_path"]).resolve()
    folder = (Path(gettempdir()) / "workrun-cleanup-demo").resolve()
    # Restrict cleanup to files created by this example.
    if path.parent != folder or path.suffix != ".txt":
        raise ValueError(f"Unexpected cleanup path: {path}")
    path.unlink(missing_ok=True)  # already gone is fine: cleanup stays idempotent
    print(f"removed {path}")
    compensation.result({"removed_file": str(path)})


if __name__ == "__main__":
    main()
