"""Console examples in the docs (SPEC §21, R-L5): a test fails when an example stops matching the product.

Two checks:

- every ``workrun …`` command line shown in the README and the docs (in a fenced
  or indented code block, ``$ ``-prompted or in a shell block) is one the CLI
  accepts: its command exists and its options and arguments parse (click parses it,
  nothing runs);
- every transcript marked ``<!-- transcript -->`` just above its block is run for
  real, command by command, in a fresh data directory: each output line shown must
  appear, in order, in what the command prints, with placeholders for what
  differs from run to run (ids, times, hex names) and ``…`` for an elided part;
  ``$ echo $?`` checks the previous command's exit code. An id shown in an earlier
  output (``cmp_b8a788c32cfb``) stands for the real one in later commands, also by
  a prefix (``cmp_b8a7``).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer

from workrun.cli.main import app

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
ID = re.compile(r"\b(run|op|cmp|tkt|wkr|att)_([0-9a-f]{4,})\b")


def _blocks(text: str) -> list[tuple[int, str, str]]:
    """``(line number, marker, body)`` of each fenced block and each 4-space indented block after a blank line;
    ``marker`` is the HTML comment right above it (or "")."""
    lines = text.splitlines()
    out: list[tuple[int, str, str]] = []
    i = 0
    while i < len(lines):
        above = lines[i - 1].strip() if i else ""
        above = above if above.startswith("<!--") else ""
        if lines[i].startswith("```"):
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            out.append((i + 1, above, "\n".join(lines[i + 1:j])))
            i = j + 1
            continue
        if lines[i].startswith("    ") and (i == 0 or not lines[i - 1].strip() or above):
            j = i
            while j < len(lines) and (lines[j].startswith("    ") or not lines[j].strip()):
                j += 1
            out.append((i + 1, above, "\n".join(line[4:] for line in lines[i:j]).rstrip()))
            i = j
            continue
        i += 1
    return out


def _command_lines() -> list[tuple[str, str]]:
    """``(where, command line)`` of every ``workrun`` command shown in a code block."""
    found = []
    for page in PAGES:
        for start, _, body in _blocks(page.read_text()):
            prompted = any(line.startswith("$ ") for line in body.splitlines())
            for k, line in enumerate(body.splitlines()):
                text = line[2:] if line.startswith("$ ") else (None if prompted else line)
                if text is None:
                    continue
                text = re.sub(r"\s{2,}#.*$", "", text).split(" | ")[0].strip()
                for part in re.split(r"\s{3,}", text):  # two terminals side by side
                    part = re.sub(r"^(\w+=\S+\s+)+", "", part)  # NAME=value prefixes
                    if part.startswith("workrun ") and "…" not in part and "[OPTIONS]" not in part:
                        found.append((f"{page.relative_to(ROOT)}:{start + k + 1}", part))
    return found


COMMANDS = _command_lines()


def test_the_docs_show_many_commands():
    assert len(COMMANDS) >= 30, COMMANDS  # the collector finds them: a broken one would pass everything


@pytest.mark.parametrize(("where", "line"), COMMANDS, ids=[w for w, _ in COMMANDS])
def test_every_command_line_in_the_docs_parses(where, line):
    words = shlex.split(line)[1:]
    cmd: Any = typer.main.get_command(app)  # typer's own copy of click: groups have get_command
    ctx = cmd.make_context("workrun", list(words), resilient_parsing=False)
    while hasattr(cmd, "get_command"):
        rest = list(getattr(ctx, "_protected_args", None) or getattr(ctx, "protected_args", [])) + list(ctx.args)
        assert rest, f"{where}: {line!r} names a group, not a command"
        sub = cmd.get_command(ctx, rest[0])
        assert sub is not None, f"{where}: no command {rest[0]!r} in {line!r}"
        cmd, ctx = sub, sub.make_context(rest[0], rest[1:], parent=ctx, resilient_parsing=False)


def _transcripts() -> list[tuple[str, str]]:
    return [(f"{page.relative_to(ROOT)}:{start}", body) for page in PAGES
            for start, marker, body in _blocks(page.read_text()) if marker == "<!-- transcript -->"]


TRANSCRIPTS = _transcripts()


def test_the_tutorial_transcripts_are_marked():
    assert len(TRANSCRIPTS) >= 4, TRANSCRIPTS


def _pattern(expected: str, ids: dict[str, str]) -> re.Pattern[str]:
    """A regex for one shown output line: ids, times, hex names and ``…`` are placeholders; runs of spaces
    match any spacing."""
    out, pos = [], 0
    token = re.compile(r"(?P<id>\b(?:run|op|cmp|tkt|wkr|att)_[0-9a-f]{4,}\b)|(?P<time>\b\d\d:\d\d:\d\d\b)|"
                       r"(?P<hex>\b[0-9a-f]{8,}\b)|(?P<gap>…)|(?P<space> {2,})|(?P<secs>\b\d+\.\d+ s\b)")
    for m in token.finditer(expected):
        out.append(re.escape(expected[pos:m.start()]))
        kind = m.lastgroup
        if kind == "id":
            prefix = m.group().split("_")[0]
            known = ids.get(m.group())
            out.append(re.escape(known) if known else f"(?P<{prefix}_{len(out)}>{prefix}_[0-9a-f]+)")
        elif kind == "time":
            out.append(r"\d\d:\d\d:\d\d")
        elif kind == "hex":
            out.append(r"[0-9a-f]+")
        elif kind == "gap":
            out.append(".*?")
        elif kind == "space":
            out.append(r"\s+")
        else:
            out.append(r"\d+\.\d+ s")
        pos = m.end()
    out.append(re.escape(expected[pos:]))
    return re.compile("^" + "".join(out).rstrip() + r"\s*$")


def _bind(expected: str, match: re.Match[str], ids: dict[str, str]) -> None:
    shown = ID.findall(expected)
    got = [v for k, v in sorted(match.groupdict().items(), key=lambda kv: int(kv[0].split("_")[1])) if v]
    fresh = [f"{p}_{h}" for p, h in shown if f"{p}_{h}" not in ids]
    for doc_id, real in zip(fresh, got, strict=False):
        ids[doc_id] = real


def _substitute(command: str, ids: dict[str, str]) -> str:
    def real(m: re.Match[str]) -> str:
        text = m.group()
        for doc_id, value in ids.items():
            if doc_id.startswith(text):
                return value
        return text

    return ID.sub(real, command)


@pytest.mark.parametrize(("where", "body"), TRANSCRIPTS, ids=[w for w, _ in TRANSCRIPTS])
def test_every_marked_transcript_matches_the_product(where, body, tmp_path):
    env = {**os.environ, "WORKRUN_HOME": str(tmp_path / "home"), "NO_COLOR": "1", "COLUMNS": "200",
           "TMPDIR": "/tmp",  # the docs show the tutorial's files under /tmp
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("WORKRUN_JOURNAL", None)
    steps: list[tuple[str, list[str]]] = []
    for line in body.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        elif steps and line.strip():
            steps[-1][1].append(line)
    assert steps, f"{where}: no command in the transcript"
    ids: dict[str, str] = {}
    code = None
    for command, shown in steps:
        if command == "echo $?":
            assert shown == [str(code)], f"{where}: `{command}` shows {shown}, the exit code was {code}"
            continue
        command = _substitute(command, ids)
        res = subprocess.run(command, shell=True, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        code = res.returncode
        printed = (res.stdout + res.stderr).splitlines()
        at = 0
        for expected in shown:
            pattern = _pattern(expected, ids)
            while at < len(printed) and not pattern.match(printed[at]):
                at += 1
            assert at < len(printed), (f"{where}: `{command}` did not print (in order) the line\n  {expected}\n"
                                       f"it printed:\n" + "\n".join(printed))
            _bind(expected, pattern.match(printed[at]), ids)
            at += 1
