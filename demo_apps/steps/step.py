"""Process App: record one named step as a marker file in a temp folder."""

from pathlib import Path
from tempfile import gettempdir
from uuid import uuid4

from workrun_sdk import process

data = process.input()
name = str(data.get("name", "step"))
folder = Path(gettempdir()) / "workrun-steps-demo"
folder.mkdir(parents=True, exist_ok=True)
marker = folder / f"{name}-{uuid4().hex[:8]}.txt"
marker.write_text(f"{name} after {data.get('after', '-')}\n", encoding="utf-8")
print(f"{name}: wrote {marker}")
process.result({"marker": str(marker), "name": name})
