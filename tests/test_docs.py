"""The docs (SPEC §21, R-L5): a short README, the CLI reference generated from the commands, and every complete
workflow and App example in the docs checked by the loader (``workrun check`` in process) and the JSON Schema
(R-L4: the schema and the loader agree)."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import jsonschema
import pytest

from workrun.core.schema import app_schema, workflow_schema

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted((ROOT / "docs").rglob("*.md"))


def _workflow_examples(marker: str = "[nodes.") -> list[tuple[str, str]]:
    """``(where, toml)`` of each docs TOML block that is a whole workflow (nodes, no elided ``…`` parts), or with
    ``marker="[tool.workrun.apps."`` a whole App config."""
    found = []
    for page in [ROOT / "README.md", *DOCS]:
        text = page.read_text()
        indented = [textwrap.dedent(b) for b in re.findall(r"(?:^    .*\n)+", text, re.M)]
        for i, block in enumerate([*re.findall(r"```toml\n(.*?)```", text, re.S), *indented]):
            if marker not in block or "…" in block:
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
    schema = jsonschema.Draft202012Validator(workflow_schema())
    assert [e.message for e in schema.iter_errors(tomllib.loads(block))] == [], where


APP_EXAMPLES = _workflow_examples("[tool.workrun.apps.")


def test_the_docs_show_app_examples():
    assert len(APP_EXAMPLES) >= 2, APP_EXAMPLES


@pytest.mark.parametrize(("where", "block"), APP_EXAMPLES, ids=[where for where, _ in APP_EXAMPLES])
def test_every_complete_app_example_in_the_docs_passes_the_schema_and_the_loader(where, block, tmp_path):
    from workrun.runner.apps import load_project

    data = tomllib.loads(block)
    table = data["tool"]["workrun"]
    assert [e.message for e in jsonschema.Draft202012Validator(app_schema()).iter_errors(table)] == [], where
    (tmp_path / "pyproject.toml").write_text(block if "[project]" in block
                                             else '[project]\nname = "x"\nversion = "0.1.0"\n' + block)
    (tmp_path / "uv.lock").write_text("version = 1\n")
    for app in table["apps"].values():  # the files its entries name, as `workrun app new` makes them
        for entry in (app.get("entry"), (app.get("compensation") or {}).get("entry")):
            if entry:
                (tmp_path / entry).parent.mkdir(parents=True, exist_ok=True)
                (tmp_path / entry).write_text("")
    assert load_project(tmp_path), where
