"""The ``workrun`` console script and ``python -m workrun`` (R-P3: fast start-up).

:func:`main` answers ``workrun --version`` without importing typer, rich or the engine.
Any other command line goes to :func:`run`: a plain read command, or a plain ``run WORKFLOW``, runs
through :mod:`workrun.cli.quick` (no typer parsing), everything else through the
typer app of :mod:`workrun.cli.main`, imported only then; the command modules import what
a command needs inside it.

Exit codes (SPEC §10): a ``WorkrunError`` prints ``error: FILE: FIELD: message`` and exits with its
code; a usage error exits 2; Ctrl-C 130; anything else is one ``internal error`` line and exit 1
(the traceback only with ``--debug``).
"""

from __future__ import annotations

import gc
import os
import sys
from pathlib import Path

__all__ = ["main", "run"]

_GC_THRESHOLD = 10_000  # allocations between young collections (Python's default: 700)

_FAST_VERSION = frozenset({"--version", "--debug"})  # root options that cannot change what --version prints


def main(argv: list[str] | None = None) -> None:
    """Console-script entry: ``--version`` at once, anything else through :func:`run`.

    Args:
        argv: the arguments after the program name; ``sys.argv[1:]`` when None.

    Raises:
        SystemExit: always, with the command's exit code (SPEC §10).
    """
    args = sys.argv[1:] if argv is None else argv
    if sys.stdout is None:  # started with stdout closed (``>&-``): what would be printed goes nowhere
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 (this process's stdout from now on)
    # start-up allocates a lot and frees little: collect young objects less often (issue 14)
    gc.set_threshold(_GC_THRESHOLD, *gc.get_threshold()[1:])
    _note_interrupts()
    if "--version" in args and set(args) <= _FAST_VERSION:
        from workrun import __version__

        try:
            sys.stdout.write(f"workrun {__version__}\n")  # what the typer app's eager --version prints
            sys.stdout.flush()
        except BrokenPipeError:
            sys.exit(141 if _stdout_gone() else 1)
        sys.exit(0)
    _exit(run(args))


def _exit(code: int) -> None:
    """End the process with ``code`` as the interpreter would: non-daemon threads joined, ``atexit`` handlers
    run (tracing's last export), stdout and stderr flushed; but without tearing down every module and object
    first, which only costs time (~5 ms of every command, issue 33) in a process about to vanish. Whatever
    cannot be done so (no ``threading._shutdown`` in this interpreter, a stream that cannot be flushed) is left
    to the interpreter's own exit.

    Raises:
        SystemExit: with ``code``, when the interpreter's own exit is used.
    """
    threading = sys.modules.get("threading")
    shutdown = getattr(threading, "_shutdown", None)
    if shutdown is None:
        sys.exit(code)
    shutdown()
    import atexit

    atexit._run_exitfuncs()
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
    except (OSError, ValueError):  # the reader went away, or a stream was closed: as the interpreter does
        sys.exit(code)
    os._exit(code)


_INTERRUPTED: list[int] = []  # the SIGINTs this process got while no command had its own handler


def _on_interrupt(signum: int, frame: object) -> None:
    _INTERRUPTED.append(signum)
    raise KeyboardInterrupt


def _note_interrupts() -> None:
    """Ctrl-C (SIGINT) still raises ``KeyboardInterrupt``, and is noted as data: code that catches the
    interrupt and raises its own error instead (a library may, in the middle of its work) must not turn a
    person's Ctrl-C into an ``internal error`` (exit 1): :func:`_failed` reports it as ``interrupted``, 130.
    A command that stops work on SIGINT (``run``, ``resume``...) installs its own handler meanwhile."""
    import signal

    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _on_interrupt)


def _quick(args: list[str]) -> int | None:
    """Run a plain read command without typer (:mod:`workrun.cli.quick`); its exit code, or None: not one."""
    from workrun.cli.quick import match

    found = match(args)
    if found is None:
        return None
    command, kwargs = found
    from workrun.core import settings

    if not getattr(command, "reports_settings", False):  # (check reports a bad setting with its other errors)
        settings.current()  # what the root callback checks first (SPEC §17)
    code = command(**kwargs)  # a read command returns None (exit 0); run returns its exit code
    return code if isinstance(code, int) else 0


def _failed(exc: BaseException, debug: bool) -> int:
    """Report an error that ended a command as one line on stderr; return its exit code (SPEC §10).

    Called inside the ``except`` block, so ``--debug`` can print the traceback.

    Raises:
        BaseException: ``exc`` again when it is none of the errors mapped here.
    """
    import traceback

    import typer

    try:  # typer >= 0.20 vendors click as typer._click
        from typer._click import exceptions as click_exceptions
    except ImportError:  # pragma: no cover - older typer depends on click
        from click import exceptions as click_exceptions  # type: ignore[no-redef]

    from workrun.cli.output import print_error
    from workrun.core.errors import WorkrunError

    if isinstance(exc, WorkrunError):
        if debug:  # the traceback first, then the same one line and exit code as without --debug
            traceback.print_exc()
        for line in exc.lines():
            print_error(line)
        return exc.exit_code
    if isinstance(exc, click_exceptions.NoArgsIsHelpError):  # help was printed already
        return 2
    if isinstance(exc, click_exceptions.UsageError):
        if debug:
            traceback.print_exc()
        where = f"{exc.ctx.command_path}: " if exc.ctx else ""
        print_error(where + exc.format_message())
        return 2
    if isinstance(exc, typer.Abort):  # typer >= 0.20 vendors click without an Abort in typer._click.exceptions
        print_error("aborted")
        return 130
    if isinstance(exc, KeyboardInterrupt) or (_INTERRUPTED and isinstance(exc, Exception)
                                              and not isinstance(exc, WorkrunError)):
        print_error("interrupted")
        return 130
    if isinstance(exc, BrokenPipeError) and _stdout_gone():  # the reader went away (``| head``): nothing to say
        return 141  # 128 + SIGPIPE: what a command ended by SIGPIPE exits with
    if not isinstance(exc, Exception):
        raise exc
    if debug:  # never a traceback without --debug
        traceback.print_exc()
    print_error(f"internal error: {type(exc).__name__}: {exc} (run with --debug for the traceback)")
    return 1


def _lines_of(exc: BaseException) -> list[str]:
    """The error lines a command that ended with ``exc`` reports (as data; empty for an unexpected error)."""
    from workrun.core.errors import WorkrunError

    if isinstance(exc, WorkrunError):
        return exc.lines()
    usage = getattr(exc, "format_message", None)  # click's usage errors
    return [str(usage())] if callable(usage) else []


def _debug_first(args: list[str]) -> list[str]:
    """``--debug`` is a root option taken wherever it is written (``workrun runs show X --debug`` as
    ``workrun --debug runs show X``); a ``--debug`` after ``--`` is an argument and stays where it is."""
    end = args.index("--") if "--" in args else len(args)
    if "--debug" not in args[:end]:
        return args
    return ["--debug", *[a for a in args[:end] if a != "--debug"], *args[end:]]


def _stdout_gone() -> bool:
    """True when stdout is a pipe whose reader has gone; it is then pointed at ``/dev/null``, so that the
    interpreter's last flush cannot fail once more."""
    import select

    try:
        fd = sys.stdout.fileno()
        poller = select.poll()
        poller.register(fd, 0)
        if not any(ev & select.POLLERR for _, ev in poller.poll(0)):
            return False
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, fd)
        os.close(null)
        return True
    except (OSError, ValueError, AttributeError):
        return False


def _first_project(workflow: str) -> str | None:
    """The ``project`` of the workflow file's first process node, resolved against the file's folder (that of
    the file a symlink points to, as the loader does), or None (not a readable workflow: the command itself
    reports why)."""
    from workrun.core import tomlfile  # tomllib alone: the loader's modules would delay the fork server's start

    try:
        with open(workflow, encoding="utf-8") as fh:  # as the loader reads it: the same text
            text = fh.read()
        nodes = tomlfile.loads(text).get("nodes")  # kept for the loader, which takes it (issue 33)
    except (OSError, ValueError, RecursionError):
        return None
    for node in (nodes or {}).values() if isinstance(nodes, dict) else ():
        if isinstance(node, dict) and node.get("kind", "process") == "process" \
                and isinstance(node.get("project"), str):
            return os.path.join(os.path.dirname(os.path.realpath(workflow)), node["project"])
    return None


def _ahead(args: list[str]) -> None:
    """For ``workrun run WORKFLOW …``, first thing (issue 14, issue 33, R-P1): start the fork server of the first
    process node's App environment and the journal's integrity check
    (:func:`workrun.journal.sqlite.check_ahead`), so that both run on the other core while this process loads
    the rest of itself. Neither is waited for here. Only an existing data directory that passes its checks,
    and an already synced environment, are used; anything else is left to the command."""
    words = [a for a in args if a != "--debug"]
    if len(words) < 2 or words[0] != "run" or os.environ.get("WORKRUN_JOURNAL"):
        return
    workflow = next((w for w in words[1:] if not w.startswith("-")), None)
    if workflow is None or not workflow.endswith(".toml"):
        return
    from workrun.core.paths import existing_data_dir

    data = existing_data_dir()
    if data is None:
        return
    project = _first_project(workflow)
    if project:
        from workrun.runner.forkserver import prestart_fork_server

        prestart_fork_server(data, Path(project))
    from workrun.journal.sqlite import check_ahead

    check_ahead(data / "journal.sqlite3")  # the open's integrity check, in a thread, without the GIL


def run(args: list[str], errors: list[str] | None = None, *, ahead: bool = True) -> int:
    """Run one command line and return its exit code (SPEC §10); errors become one line on stderr.

    Args:
        args: the arguments after the program name.
        errors: when given, the error lines of a :class:`~workrun.core.errors.WorkrunError` that ended the command
            (or of a usage error) are appended to it as data (the dashboard's detached actions read them so,
            never from stderr).
        ahead: start ``run``'s work ahead (:func:`_ahead`); an in-process caller (the tests' CLI
            runner) says False.
    """
    args = _debug_first(args)
    try:
        if ahead:
            _ahead(args)
        code = _quick(args)
        if code is None:
            from workrun.cli.main import app

            code = app(args=args, standalone_mode=False, prog_name="workrun")
    except (Exception, KeyboardInterrupt) as exc:
        if errors is not None:
            errors.extend(_lines_of(exc))
        code = _failed(exc, args[:1] == ["--debug"])
    except SystemExit as exc:  # click ends a command whose output hit a closed pipe with exit 1: 141, as above
        if exc.code == 1 and _stdout_gone():
            return 141
        raise
    return code if isinstance(code, int) else 0
