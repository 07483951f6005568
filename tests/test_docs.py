"""The docs (SPEC §21, R-L5): a short README, the CLI reference generated from the commands, and every complete
workflow example in the docs checked by the loader (``workrun check`` in process)."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted((ROOT / "docs").rglob("*.md"))


def _workflow_examples() -> list[tuple[str, str]]:
    """``(where, toml)`` of each docs TOML block that is a whole workflow (nodes, no elided ``…`` parts)."""
    found = []
    for page in [ROOT / "README.md", *DOCS]:
        for i, block in enumerate(re.findall(r"```toml\n(.*?)```", page.read_text(), re.S)):
            if "[nodes." not in block or "…" in block:
                continue
            try:
                tomllib.loads(block)
            except tomllib.TOMLDecodeError:
                continue
            found.append((f"{page.relative_to(ROOT)}#{i}", block))
    return found


def test_the_readme_is_short_and_names_the_two_commands():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 250
    assert "python3 scripts/dev.py tutorial" in text and "python3 scripts/dev.py test" in text


def test_the_cli_reference_is_what_the_commands_say():
    res = subprocess.run([sys.executable, str(ROOT / "scripts" / "cli_reference.py"), "--check"], cwd=ROOT,
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


EXAMPLES = _workflow_examples()


@pytest.mark.parametrize(("where", "block"), EXAMPLES, ids=[where for where, _ in EXAMPLES])
def test_every_complete_workflow_example_in_the_docs_checks(where, block, tmp_path, cli, monkeypatch):
    monkeypatch.setenv("SHOP_TOKEN", "example-token")
    monkeypatch.setenv("SMTP_PASSWORD", "example-password")
    wf = tmp_path / "example.toml"
    wf.write_text(block.replace("../", str(ROOT / "demo_apps") + "/"))
    res = cli("check", wf)
    assert res.code == 0, (where, res.err)
