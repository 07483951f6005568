"""A real PostgreSQL server for tests (R-S5): initdb'd in a temp dir, on a free loopback port.

The server binaries come from the distribution's package (Debian:
``/usr/lib/postgresql/<N>/bin``; ``.ci/run`` installs ``postgresql`` when
missing) or from ``TEST_PG_BIN``. As root the server runs as the ``postgres``
user (``runuser``), since PostgreSQL refuses to run as root. Durability is
traded for speed (``fsync=off``): the tests kill workers, never the server.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

__all__ = ["PgServer", "find_bin_dir", "unavailable_reason"]

INSTALL_HINT = ("PostgreSQL server binaries not found: `apt-get install -y postgresql` (Debian/Ubuntu; .ci/run does "
                "this), or point TEST_PG_BIN at a directory holding initdb and pg_ctl")


def find_bin_dir() -> Path | None:
    """The directory holding ``initdb`` and ``pg_ctl``, or None."""
    candidates = [os.environ.get("TEST_PG_BIN", "")]
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(p.split("/")[-2]),
                         reverse=True)
    on_path = shutil.which("initdb")
    if on_path:
        candidates.append(str(Path(on_path).parent))
    for c in candidates:
        if c and (Path(c) / "initdb").is_file() and (Path(c) / "pg_ctl").is_file():
            return Path(c)
    return None


def unavailable_reason() -> str | None:
    """Why PostgreSQL tests cannot run here (a checkable reason), or None when they can."""
    if find_bin_dir() is None:
        return INSTALL_HINT
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed: `pip install -e '.[postgres]'` (the test extra includes it)"
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        return "running as root needs `runuser` to start PostgreSQL as the postgres user"
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PgServer:
    """One PostgreSQL cluster in a temp dir, started on 127.0.0.1 and a free port.

    Use :meth:`start`, :meth:`new_database` (returns a ``postgresql://`` URL), :meth:`stop`.
    """

    def __init__(self) -> None:
        bin_dir = find_bin_dir()
        if bin_dir is None:
            raise RuntimeError(INSTALL_HINT)
        self.bin_dir = bin_dir
        self.as_root = os.geteuid() == 0
        # /tmp, not pytest's 0700 base: the postgres user must reach the directory
        self.root = Path(tempfile.mkdtemp(prefix="workrun-pg-", dir="/tmp" if self.as_root else None))
        self.data = self.root / "data"
        self.port = 0
        self.user = "postgres" if self.as_root else "workrun"

    def _cmd(self, *args: str) -> list[str]:
        cmd = [str(self.bin_dir / args[0]), *args[1:]]
        return ["runuser", "-u", "postgres", "--", *cmd] if self.as_root else cmd

    def start(self) -> PgServer:
        """initdb and start the server; raises RuntimeError with the server log on failure."""
        if self.as_root:
            shutil.chown(self.root, "postgres", "postgres")
        os.chmod(self.root, 0o700)
        subprocess.run(self._cmd("initdb", "-D", str(self.data), "-U", self.user, "--auth=trust", "-E", "UTF8",
                                 "--no-sync", "--no-instructions"), check=True, capture_output=True)
        log = self.root / "server.log"
        for _ in range(5):  # the port may be taken between probing and binding: try another
            self.port = _free_port()
            opts = (f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.root} -c fsync=off "
                    "-c synchronous_commit=off -c full_page_writes=off -c max_connections=300 "
                    "-c shared_buffers=32MB")
            proc = subprocess.run(self._cmd("pg_ctl", "-D", str(self.data), "-o", opts, "-l", str(log), "-w",
                                            "-t", "60", "start"), capture_output=True, text=True)
            if proc.returncode == 0:
                self._opts = opts
                return self
        raise RuntimeError(f"PostgreSQL did not start: {proc.stderr.strip()}\n{log.read_text()[-2000:]}")

    def url(self, dbname: str = "postgres") -> str:
        """A ``postgresql://`` URL for ``dbname`` on this server."""
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{dbname}"

    def new_database(self) -> str:
        """Create an empty database; return its URL."""
        import psycopg

        name = "t_" + uuid.uuid4().hex[:12]
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def drop_database(self, url: str) -> None:
        """Drop a database made by :meth:`new_database` (its connections are ended first)."""
        import psycopg

        name = url.rsplit("/", 1)[1]
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def restart(self) -> None:
        """Restart the server as an upgrade or a failover would (``-m fast``: every connection is ended), on the
        same port and options."""
        # -l: the new server must not inherit this call's pipes (reading them would wait for it to end)
        proc = subprocess.run(self._cmd("pg_ctl", "-D", str(self.data), "-l", str(self.root / "server.log"), "-m",
                                        "fast", "-w", "-t", "60", "restart"),
                              stdin=subprocess.DEVNULL, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"PostgreSQL did not restart: {proc.stderr.strip()}")

    def pause(self) -> None:
        """Stop the server (``-m fast``), keeping its data, as an outage would; :meth:`resume` starts it again."""
        subprocess.run(self._cmd("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop"), capture_output=True,
                       check=True)

    def resume(self) -> None:
        """Start a paused server again, on the same port and options."""
        subprocess.run(self._cmd("pg_ctl", "-D", str(self.data), "-o", self._opts, "-l", str(self.root / "server.log"),
                                 "-w", "-t", "60", "start"), stdin=subprocess.DEVNULL, capture_output=True, check=True)

    def terminate_backends(self, url: str) -> int:
        """End every connection to ``url``'s database but this one (``pg_terminate_backend``); return how many."""
        import psycopg

        name = url.rsplit("/", 1)[1]
        with psycopg.connect(self.url(), autocommit=True) as conn:
            rows = conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s "
                                "AND pid <> pg_backend_pid()", (name,)).fetchall()
        return len(rows)

    def stop(self) -> None:
        """Stop the server and remove its directory."""
        if self.port:
            subprocess.run(self._cmd("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop"),
                           capture_output=True)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                shutil.rmtree(self.root)
                return
            except OSError:
                time.sleep(0.2)
