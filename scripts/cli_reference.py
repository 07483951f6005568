#!/usr/bin/env python3
"""Write docs/reference/cli.md from the commands themselves (every command's and group's --help).

    python3 scripts/cli_reference.py          # rewrite docs/reference/cli.md
    python3 scripts/cli_reference.py --check  # exit 1 when the page differs from what the commands say
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "reference" / "cli.md"


def render() -> str:
    """The CLI reference page: each command path with its usage, help and options, as click knows them."""
    import typer

    from workrun.cli.main import app

    root = typer.main.get_command(app)
    out = ["# CLI reference", "", "Generated from the commands themselves by `python3 scripts/cli_reference.py`;",
           "a test keeps it in step with them.", ""]

    def walk(cmd: Any, path: list[str]) -> None:
        ctx = type(root.make_context("workrun", [], resilient_parsing=True))(cmd, info_name=" ".join(path))
        usage = cmd.get_usage(ctx).replace("Usage: ", "")
        help_text = (cmd.help or "").split("\f")[0].strip()
        out.extend([f"## `{' '.join(path)}`", "", "```text", usage, "```", ""])
        if help_text:
            out.extend([help_text, ""])
        rows = []
        for param in cmd.get_params(ctx):
            record = param.get_help_record(ctx)
            if record and "--help" not in getattr(param, "opts", []):
                rows.append(f"| `{record[0]}` | {record[1].replace('|', '&#124;') or ''} |")
        if rows:
            out.extend(["| option | meaning |", "| --- | --- |", *rows, ""])
        if hasattr(cmd, "list_commands"):
            for name in sorted(cmd.list_commands(ctx)):
                sub = cmd.get_command(ctx, name)
                if sub is not None and not sub.hidden:
                    walk(sub, [*path, name])

    walk(root, ["workrun"])
    return "\n".join(out).rstrip() + "\n"


def main(argv: list[str]) -> int:
    text = render()
    if argv[:1] == ["--check"]:
        if not PAGE.exists() or PAGE.read_text() != text:
            print(f"{PAGE.relative_to(ROOT)} is stale: run python3 scripts/cli_reference.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
