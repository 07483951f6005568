"""Shared by the Process App and the Tool App: create one demo file in a dedicated temp folder."""

from pathlib import Path
from tempfile import gettempdir
from uuid import uuid4


def demo_folder() -> Path:
    """The folder this example writes to (outside the App's source directory)."""
    return Path(gettempdir()) / "workrun-cleanup-demo"


def create_file(text: str = "Created by this workflow run") -> dict[str, str]:
    """Create a uniquely named .txt file; remove it again if writing fails."""
    folder = demo_folder()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{uuid4().hex}.txt"
    try:
        path.write_text(text, encoding="utf-8")
        return {"file_path": str(path)}
    except Exception:
        path.unlink(missing_ok=True)
        raise
