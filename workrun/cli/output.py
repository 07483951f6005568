"""All CLI printing goes through here: one rich console for people, plain JSON for machines.

Errors are one line on stderr, ``error: FILE: FIELD: message``, never wrapped (SPEC §10).
``NO_COLOR`` is honoured by rich.

rich is imported on first use (``console``, :func:`escape`, the tables), not at import, so a
command that prints only JSON never loads it (R-P3).
"""

from __future__ import annotations

import errno
import io
import json
import os
import sys
from datetime import datetime
from json.encoder import encode_basestring as _quote  # json's own (C) quoting, ensure_ascii=False
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from rich.console import Console, Group

__all__ = ["CliReporter", "console", "escape", "one_line", "pretty_json", "print_error", "print_json", "print_list",
           "raise_broken_pipes", "run_table",
           "print_compensations", "STATUS_STYLE"]

_console: Console | None = None


def get_console() -> Console:
    """The one rich console for people, made on first use."""
    global _console
    if _console is None:
        from rich.console import Console

        raise_broken_pipes()
        # NO_COLOR (no-color.org): no colour; with color_system=None rich writes no escape codes at all.
        # emoji=False: text such as ":smile:" in a name or message is shown as written (and rich's emoji table,
        # ~4 ms of start-up, is never loaded)
        _console = Console(highlight=False, soft_wrap=True, emoji=False,
                           color_system=None if os.environ.get("NO_COLOR") else "auto")
    return _console


def raise_broken_pipes() -> None:
    """Make every rich console (ours, and typer's for help) raise ``BrokenPipeError`` when its output hits a
    pipe whose reader has gone, where rich would end the process with exit 1: the command's handler
    (:func:`workrun.cli.entry.run`) exits 141 instead, quietly. Imports rich."""
    from rich.console import Console

    def on_broken_pipe(self: Console) -> None:
        self.quiet = True
        raise BrokenPipeError(errno.EPIPE, "the reader of the output has gone")

    Console.on_broken_pipe = on_broken_pipe  # type: ignore[method-assign]


class _LazyConsole:
    """Stands for the rich console until first used, so importing this module does not import rich."""

    def __getattr__(self, name: str) -> Any:
        return getattr(get_console(), name)


console: Console = cast("Console", _LazyConsole())


def escape(text: str) -> str:
    """``text`` (a name, a message, an App's stderr line, a note: anything not ours) for rich: its markup escaped
    (rich's ``escape``, imported on first use) and nothing in it a terminal would act on (ESC, a bidi override,
    a carriage return: shown as ``\\x1b``-style escapes, as :func:`print_list` shows them); line breaks and tabs
    stay."""
    from rich.markup import escape as rich_escape

    return rich_escape(_cell(text, keep="\n\t")[0])


def one_line(text: str) -> str:
    """``text`` (a path, a name: anything not ours) as plain text on one line: every control, format and
    line-break character shown as a ``\\x0a``-style escape, as :func:`print_list` shows them."""
    return _cell(text)[0]


STATUS_STYLE = {
    "succeeded": "green", "failed": "red", "unknown": "magenta", "blocked": "yellow", "running": "cyan",
    "pending": "dim", "skipped": "dim", "stopped": "yellow", "waiting": "yellow", "terminated": "red",
    "resolved": "green",
}
_LEVEL_STYLE = {"info": "", "warning": "yellow", "error": "red"}


def print_error(line: str) -> None:
    """Print exactly one error line on stderr (nothing in it a terminal would act on: see :func:`escape`); under
    ``worker --log-format json``, one JSON ``error`` line instead (R-F6)."""
    from workrun.core import logs

    if logs.enabled():
        logs.emit("error", "error", message=" ".join(line.split("\n")))
        return
    sys.stderr.write("error: " + _cell(" ".join(line.split("\n")))[0] + "\n")
    sys.stderr.flush()


def print_json(data: Any) -> None:
    """Print one JSON document on stdout (all of it, or ``BrokenPipeError``: see :func:`write_out`)."""
    write_out(pretty_json(data) + "\n")


_INF = float("inf")


def _float_text(value: float) -> str:
    """A float as :mod:`json` writes it (``allow_nan``: ``NaN``, ``Infinity``, ``-Infinity``)."""
    if value != value:
        return "NaN"
    if value == _INF:
        return "Infinity"
    if value == -_INF:
        return "-Infinity"
    return float.__repr__(value)


def _key_text(key: object) -> str:
    """A mapping key as :mod:`json` turns it into a name (the same types in the same order), else TypeError."""
    if isinstance(key, str):
        return key
    if isinstance(key, float):
        return _float_text(key)
    if key is True:
        return "true"
    if key is False:
        return "false"
    if key is None:
        return "null"
    if isinstance(key, int):
        return int.__repr__(key)
    raise TypeError(key)


def pretty_json(data: Any) -> str:
    """``json.dumps(data, indent=2, ensure_ascii=False)``: the same text, ~2x sooner (issue 33: with ``indent``,
    :mod:`json` encodes in Python through nested generators; a 100-node run's document took ~7 ms). Strings are
    quoted by json's own C function. Anything this does not know (another type, a cycle, nesting deeper than the
    recursion limit) is handed to :func:`json.dumps`, so its text or its error is json's. (It takes one frame per
    level, json slightly more: a document one or two levels short of the limit is written here where json would
    raise RecursionError.)

    Raises:
        TypeError, ValueError, RecursionError: as :func:`json.dumps` raises them.
    """
    parts: list[str] = []
    add = parts.append
    quote = _quote
    indents = ["\n"]  # the line break and indent before an item at each depth

    def value(o: Any, depth: int) -> None:
        if isinstance(o, str):
            add(quote(o))
        elif o is None:
            add("null")
        elif o is True:
            add("true")
        elif o is False:
            add("false")
        elif isinstance(o, int):
            add(int.__repr__(o))
        elif isinstance(o, float):
            add(_float_text(o))
        elif isinstance(o, (dict, list, tuple)):
            if not o:
                add("{}" if isinstance(o, dict) else "[]")
                return
            if len(indents) <= depth + 1:
                indents.append("\n" + "  " * (depth + 1))
            inner, opening = indents[depth + 1], "{" if isinstance(o, dict) else "["
            if isinstance(o, dict):
                for k, v in o.items():
                    add(opening + inner + quote(_key_text(k)) + ": ")
                    opening = ","
                    value(v, depth + 1)
                add(indents[depth] + "}")
            else:
                for v in o:
                    add(opening + inner)
                    opening = ","
                    value(v, depth + 1)
                add(indents[depth] + "]")
        else:
            raise TypeError(type(o))

    try:
        value(data, 0)
    except (TypeError, RecursionError):
        return json.dumps(data, indent=2, ensure_ascii=False)
    return "".join(parts)


def write_out(text: str) -> None:
    """Write ``text`` to stdout and flush it, all of it: on an unbuffered stdout (``PYTHONUNBUFFERED``, ``-u``) the
    text layer keeps nothing of a partial write to a pipe (its reader left after 64 KiB were written: the rest
    was dropped without an error, and ``| head`` exited 0 instead of 141); the bytes are written here until all
    are out, as a buffered stdout does.

    Raises:
        BrokenPipeError: stdout's reader went away (the command exits 141).
    """
    stream = sys.stdout
    raw = getattr(stream, "buffer", None)
    if not isinstance(raw, io.FileIO) or not getattr(stream, "encoding", None):
        stream.write(text)
        stream.flush()
        return
    stream.flush()
    view = memoryview(text.encode(stream.encoding, getattr(stream, "errors", None) or "strict"))
    while view:
        written = raw.write(view)
        if not written:  # a non-blocking stdout that is full: what a buffered stdout raises then
            raise BlockingIOError(errno.EAGAIN, "stdout cannot take more now")
        view = view[written:]


def styled(status: str | None) -> str:
    """A status word with its colour markup."""
    if status is None:
        return "-"
    style = STATUS_STYLE.get(status, "")
    return f"[{style}]{status}[/]" if style else status


class CliReporter:
    """Prints progress messages as they are journaled (live progress; silent in ``--json`` mode)."""

    def __init__(self, quiet: bool = False, *, with_run: bool = False) -> None:
        self.quiet = quiet
        self.with_run = with_run  # a worker drives several runs at once: each line names its run

    def database_unreachable(self, exc: Exception) -> None:
        """``WORKRUN_DB_RETRY`` ran out while a command that schedules a run itself waited for a call (R-F1): exit
        now, as a worker does, with the error's line(s) and its exit code (1). The calls in hand end on their own;
        the run's claim passes on after its lease. Called from the heartbeat's thread; never returns."""
        import atexit

        lines = exc.lines() if hasattr(exc, "lines") else [str(exc)]
        try:
            for line in lines:
                print_error(line)
            atexit._run_exitfuncs()  # what exiting does besides joining threads: the traces' last export (bounded)
            for stream in (sys.stdout, sys.stderr):
                stream.flush()
        finally:
            os._exit(getattr(exc, "exit_code", 1))

    def message(self, run_id: str | None, node_key: str | None, level: str, text: str) -> None:
        """Print one progress line: time, node, text."""
        if self.quiet:
            return
        stamp = datetime.now().strftime("%H:%M:%S")
        where = f"{node_key:<12}" if node_key else f"{'run':<12}"
        if self.with_run and run_id:
            where = f"{run_id} {where}"
        style = _LEVEL_STYLE.get(level, "")
        body = escape(text)
        try:
            console.print(f"[dim]{stamp}[/] {escape(where)} " + (f"[{style}]{body}[/]" if style else body))
        except (OSError, SystemExit):  # stdout closed (e.g. `| head`): progress is optional, the run goes on
            self.quiet = True


_ANSI = {"green": "32", "red": "31", "magenta": "35", "yellow": "33", "cyan": "36", "dim": "2", "bold": "1"}


_UNSAFE = ("Cc", "Cf", "Cs", "Zl", "Zp")  # control, format (bidi overrides), lone surrogates, line breaks


def _cell(text: str, keep: str = "") -> tuple[str, int]:
    """``text`` safe for a terminal (control, format and line-break characters, e.g. ESC or a bidi override, shown as
    ``\\x1b`` / ``\\u202e`` escapes) and its width in terminal columns (East Asian wide characters take two,
    combining marks none). ``keep``: characters left as they are (e.g. line breaks, for text of several lines)."""
    import unicodedata

    out, width = [], 0
    for ch in text:
        cat = unicodedata.category(ch)
        if cat in _UNSAFE and ch not in keep:
            code = ord(ch)
            shown = f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
            out.append(shown)
            width += len(shown)
        else:
            out.append(ch)
            width += 0 if cat in ("Mn", "Me") else 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1
    return "".join(out), width


def print_list(columns: list[str], rows: list[list[str]], *, status_column: int | None = None) -> None:
    """Print a list as aligned columns (``runs list``, ``compensations list``), header first, two spaces between
    columns, every value whole on one line (ids are copied; ``grep`` and ``awk`` read it).

    Plain text, not a rich table: rich alone costs these commands ~40 ms of start-up (R-P3, issue 14). On a
    terminal, without ``NO_COLOR`` (no-color.org) and ``TERM=dumb``, the header is bold and the status
    (``status_column``) coloured as everywhere else (:data:`STATUS_STYLE`). Values are shown safe for a terminal
    (:func:`_cell`).
    """
    cells = [[_cell(v) for v in row] for row in [columns, *rows]]
    widths = [max(c[i][1] for c in cells) for i in range(len(columns))]
    colour = (sys.stdout.isatty() and not os.environ.get("NO_COLOR")
              and os.environ.get("TERM", "") != "dumb")
    lines = []
    for n, row in enumerate(cells):
        parts = []
        for i, (text, width) in enumerate(row):
            pad = "" if i == len(row) - 1 else " " * (widths[i] - width)
            code = "1" if n == 0 else _ANSI.get(STATUS_STYLE.get(text, ""), "") if i == status_column else ""
            parts.append(f"\x1b[{code}m{text}\x1b[0m{pad}" if colour and code else text + pad)
        lines.append("  ".join(parts).rstrip())
    write_out("\n".join(lines) + "\n")


def run_table(view: dict[str, Any]) -> Group:
    """The run's nodes, each call and each call's compensation, one line per call (fits any width)."""
    from rich.console import Group
    from rich.text import Text

    lines: list[Text | str] = [Text.from_markup(
        f"[bold]run {view['run_id']}[/] ({escape(view['workflow'])}): {styled(view['status'])}")]
    ops_by_node: dict[str, list[dict[str, Any]]] = {}
    for op in view["operations"]:
        ops_by_node.setdefault(op["node_key"], []).append(op)
    width = max([len(n["node_key"]) for n in view["nodes"]] + [4])
    for node in view["nodes"]:
        lines.append(Text.from_markup(f"  {escape(node['node_key']):<{width}}  {styled(node['status'])}"
                                      + (" (handled)" if node.get("handled") else "")))
        for op in ops_by_node.get(node["node_key"], []):
            comp = op["compensation"]
            call = f"{op['app']}" + (f":{op['tool']}" if op.get("tool") else "")
            if comp is None:
                tail = "no compensation"
            else:
                n = len(comp["attempts"])
                tail = (f"compensation {comp['compensation_id']} {styled(comp['status'])}"
                        + (f" ({n} attempt{'s' if n != 1 else ''})" if n else ""))
            lines.append(Text.from_markup(f"  {'':<{width}}    operation {op['operation_id']} {escape(call)} "
                                          f"{styled(op['status'])}; {tail}"))
    return Group(*lines)


def print_compensations(rows: list[dict[str, Any]]) -> None:
    """Compensations as aligned columns (``compensations list``, and what ``compensations retry`` handled): ids
    whole, the reason last and never cut, in a terminal or a pipe alike."""
    print_list(["compensation", "run", "node", "status", "attempts", "reason"],
               [[c["compensation_id"], c["run_id"], c.get("node_key") or "-", c["status"], str(len(c["attempts"])),
                 c["reason"] or ""] for c in rows], status_column=3)
