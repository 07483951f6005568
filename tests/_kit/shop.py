"""The demo shop service (``demo_apps/shop_service.py``) as a real subprocess on a free loopback port."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["running_shop"]

ROOT = Path(__file__).resolve().parents[2]


@contextmanager
def running_shop() -> Iterator[str]:
    """Start the shop on port 0; yield its port (as text); terminate it afterwards."""
    proc = subprocess.Popen([sys.executable, str(ROOT / "demo_apps" / "shop_service.py"), "0"],
                            stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline() if proc.stdout else ""  # "shop service listening on http://127.0.0.1:PORT"
        if not line.startswith("shop service listening on http://127.0.0.1:"):
            raise RuntimeError(f"the shop did not start: {line!r}")
        yield line.rsplit(":", 1)[1].strip()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
