"""``workrun ui``: the local dashboard (SPEC §13). Starlette, uvicorn and Jinja2 are imported only here."""

from __future__ import annotations

import errno
from pathlib import Path
from typing import List

import typer

from workrun.core.errors import UsageError

__all__ = ["ui"]


def ui(
    port: int = typer.Option(8421, "--port", help="Port on 127.0.0.1 (0 picks a free one)."),
    no_open: bool = typer.Option(False, "--no-open", help="Do not open the browser."),
    project: List[Path] = typer.Option([], "--project", help="Also show this App project on the Apps page "
                                                            "(repeatable)."),
    read_only: bool = typer.Option(False, "--read-only", help="The same pages with no actions (every POST is 403)."),
) -> None:
    """Serve the dashboard on 127.0.0.1 only: prints its URL with an access token and opens the browser.

    Runs until Ctrl-C. Reading never blocks a scheduler; actions run the CLI's own commands.

    \f
    Implements R-U1.
    """
    import secrets
    import socket
    import sys
    import threading
    import webbrowser

    import uvicorn

    from workrun.core.paths import data_dir
    from workrun.ui.app import create_app

    if not 0 <= port <= 65535:
        raise UsageError(f"{port} is not a port (0-65535)", field="--port")
    for p in project:
        if not p.is_dir():
            raise UsageError("not a directory", file=str(p), field="--project")
    home = data_dir()
    from workrun.journal import open_journal

    open_journal(home, check=False, writable=False).close()  # a journal it cannot read: one line, exit 1, not 500s
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(("127.0.0.1", port))  # never another address (R-U1)
    except OSError as exc:
        sock.close()
        busy = exc.errno == errno.EADDRINUSE  # most likely a dashboard already runs there
        raise UsageError(f"cannot listen on 127.0.0.1:{port}: {exc.strerror}"
                         + ("; a dashboard may already be running there (--port 0 picks a free port)" if busy else ""),
                         field="--port") from None
    sock.listen(128)
    actual = sock.getsockname()[1]
    token = secrets.token_urlsafe(24)
    app = create_app(data_dir=home, token=token, port=actual, projects=list(project), read_only=read_only)
    url = f"http://127.0.0.1:{actual}/?token={token}"
    sys.stdout.write(f"{url}\nWorkrun dashboard of {home} (Ctrl-C stops it)\n")  # the URL alone on line 1
    sys.stdout.flush()
    if not no_open:
        threading.Thread(target=webbrowser.open, args=(url,), daemon=True).start()
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on"))
    server.run(sockets=[sock])
