"""A uv App project for the operator and failure-policy tests (issues 6): knobs in the call's input.

Apps (one project, shared entries): ``step`` (compensation, max_retries 3), ``step0`` (max_retries 0),
``step2`` (max_retries 2), ``hang`` (compensation timeout 1 s, max_retries 1), ``nocomp`` (no
compensation entry). All compensation backoffs are 0.05 s.

``main.py`` input: ``name``; ``value`` (result field, default the name); ``fail`` (exit 3);
``fail_first`` + ``counter`` (fail that many calls, counted in a file, then succeed); ``touch`` (write
that file first: used to change an App's code mid-run).

``compensate.py`` reads the original input: ``comp`` = ``ok`` | ``flaky`` (``comp_fail_first``
attempts fail, counted in ``counter``) | ``fail`` | ``blocked_while`` (fails while file ``flag``
exists) | ``hang_while`` (writes its process group id to ``pids/NAME.pid``, then sleeps while
``flag`` exists); on success it appends ``{name, attempt}`` to ``log`` when given.
"""

from __future__ import annotations

import os
import subprocess
import textwrap
from pathlib import Path

APPS = """
[tool.workrun.apps.step]
kind = "process"
entry = "main.py"
timeout = 60
compensation = { entry = "compensate.py", backoff = 0.05 }

[tool.workrun.apps.step0]
entry = "main.py"
compensation = { entry = "compensate.py", backoff = 0.05, max_retries = 0 }

[tool.workrun.apps.step2]
entry = "main.py"
compensation = { entry = "compensate.py", backoff = 0.05, max_retries = 2 }

[tool.workrun.apps.hang]
entry = "main.py"
compensation = { entry = "compensate.py", backoff = 0.05, max_retries = 1, timeout = 1 }

[tool.workrun.apps.nocomp]
entry = "main.py"
"""

MAIN = """
import sys
from pathlib import Path
from workrun_sdk import process

data = process.input()
if data.get("fail_first"):
    counter = Path(data["counter"])
    n = int(counter.read_text()) if counter.exists() else 0
    counter.write_text(str(n + 1))
    if n < int(data["fail_first"]):
        print(f"call {n + 1} fails on purpose", file=sys.stderr)
        raise SystemExit(5)
if data.get("touch"):
    Path(data["touch"]).write_text("x = 1\\n")
if data.get("fail"):
    print("failing on purpose", file=sys.stderr)
    raise SystemExit(3)
process.result({"name": data["name"], "value": data.get("value", data["name"])})
"""

COMPENSATE = """
import json, os, sys, time
from pathlib import Path
from workrun_sdk import compensation

ctx = compensation.context()
cfg = ctx.original_input
name = ctx.original_result["name"]
mode = cfg.get("comp", "ok")
if mode == "flaky":
    counter = Path(cfg["counter"])
    n = int(counter.read_text()) if counter.exists() else 0
    counter.write_text(str(n + 1))
    if n < int(cfg.get("comp_fail_first", 2)):
        print(f"attempt {n + 1}: remote says 503", file=sys.stderr)
        raise SystemExit(4)
elif mode == "fail":
    print("cannot undo: always fails", file=sys.stderr)
    raise SystemExit(4)
elif mode == "blocked_while":
    if Path(cfg["flag"]).exists():
        print(f"cannot delete {name}: {Path(cfg['flag']).read_text().strip()}", file=sys.stderr)
        raise SystemExit(4)
elif mode == "hang_while":
    Path(cfg["pids"], name + ".pid").write_text(str(os.getpgid(0)))
    while Path(cfg["flag"]).exists():
        time.sleep(0.05)
if cfg.get("log"):
    with open(cfg["log"], "a") as fh:
        fh.write(json.dumps({"name": name, "attempt": ctx.attempt}) + "\\n")
compensation.result({"undone": name, "attempt": ctx.attempt})
"""


def write_project(project: Path) -> Path:
    """Create the project at ``project`` and lock it with uv (R-A1)."""
    import uv

    project.mkdir(parents=True)
    (project / "pyproject.toml").write_text('[project]\nname = "ops"\nversion = "0.1.0"\nrequires-python = ">=3.11"\n'
                                            "dependencies = []\n" + APPS)
    (project / "main.py").write_text(textwrap.dedent(MAIN))
    (project / "compensate.py").write_text(textwrap.dedent(COMPENSATE))
    subprocess.run([uv.find_uv_bin(), "lock", "--quiet"], cwd=project, check=True,
                   env={k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"})
    return project
