"""The concrete :class:`~workrun.runner.context.Context`, built at the top and handed down (Hatch's ``Application``).

It owns the data directory, the journal, the App runner and the reporter (how
progress reaches the user), plus the tunables. Tests hand it a fake runner and
journal.
"""

from __future__ import annotations

import collections
import os
import threading
import time
from pathlib import Path

from workrun.core import settings
from workrun.core.paths import data_dir as default_data_dir
from workrun.core.paths import private_umask, remove_tree
from workrun.core.redact import redact_value
from workrun.journal import Journal, open_journal
from workrun.runner import calldir
from workrun.runner.base import AppRunner
from workrun.runner.context import Confirm, Reporter, TicketOpener
from workrun.runner.forkserver import launch_mode
from workrun.runner.local import LocalRunner

__all__ = ["Services"]


class _Silent:
    def message(self, run_id: str | None, node_key: str | None, level: str, text: str) -> None:
        pass


class _Janitor:
    """Removes the finished call directories handed to it (recycling their files where asked), off the
    calls' path (issue 14).

    Most of the work is done by the scheduling thread itself, through :meth:`tidy`, while its next call's App
    runs: it would otherwise only wait. What :meth:`tidy` has not taken within :data:`LATE` seconds, the
    janitor's own daemon thread removes. (Measured on 2 cores: a thread that removed each directory as soon as
    it came competed with the next call for the interpreter lock and a core, ~0.45 ms per step of a chain.)
    """

    LATE = 0.5
    """Seconds a directory waits for :meth:`tidy` before the janitor's thread removes it."""

    def __init__(self) -> None:
        self._items: collections.deque[tuple[float, Path, Path | None]] = collections.deque()
        self._cond = threading.Condition()
        self._closing = False
        self._thread = threading.Thread(target=self._loop, name="workrun-janitor", daemon=True)
        self._thread.start()

    def clear_leftovers(self, calls: Path) -> None:
        """Queue what runners that were killed left in ``calls/.trash`` for removal (moved aside first, so
        the directories discarded from now on are not caught in it)."""
        try:
            names = [n for n in os.listdir(calls) if n.startswith(".trash")]
        except OSError:
            return
        for name in names:
            old = calls / name
            if name == ".trash":
                aside = calls / f".trash-{os.urandom(4).hex()}"
                try:
                    os.rename(old, aside)
                except OSError:
                    continue
                old = aside
            self.put(old)

    def put(self, path: Path, recycle_into: Path | None = None) -> None:
        """Queue ``path`` for removal; ``recycle_into``: its calls directory, to recycle its files into."""
        with self._cond:  # no wake-up: the thread looks every LATE seconds
            self._items.append((time.monotonic(), path, recycle_into))

    def tidy(self, limit: int = 2) -> None:
        """Remove up to ``limit`` queued directories in the calling thread, oldest first."""
        for _ in range(limit):
            with self._cond:
                if not self._items:
                    return
                _, path, calls = self._items.popleft()
            _remove(path, calls)

    def _loop(self) -> None:
        while True:
            with self._cond:
                if not self._items and self._closing:
                    return
                if not self._closing and (not self._items or time.monotonic() - self._items[0][0] < self.LATE):
                    self._cond.wait(self.LATE)
                    continue
                _, path, calls = self._items.popleft()
            _remove(path, calls)

    def close(self) -> None:
        """Remove what is queued, then end the thread."""
        with self._cond:
            self._closing = True
            self._cond.notify()
        self._thread.join()


def _remove(path: Path, calls: Path | None) -> None:
    if calls is None or not calldir.recycle(path, calls):
        remove_tree(path)


class Services:
    """Everything a scheduling or reading command needs, created once per command.

    Args:
        data_dir: the data directory (default: :func:`workrun.core.paths.data_dir`).
        reporter: receives progress messages.
        check: run the journal's integrity check on open.
        writable: the command writes to the data dir (False: a read command, which may read a
            data dir it cannot write; SPEC §17).
        open_ticket: the ticket policy (:func:`workrun.repair.policy.open_ticket`), handed in by the surface.

    Tunables (environment, checked by :mod:`workrun.core.settings`): ``WORKRUN_CONCURRENCY`` (parallel
    calls, default 4), ``WORKRUN_GRACE`` (seconds between SIGTERM and SIGKILL, default 5).

    Raises:
        ConfigError: a bad ``WORKRUN_*`` setting or data directory (exit 2; SPEC §17).
    """

    def __init__(self, data_dir: Path | None = None, reporter: Reporter | None = None, *, check: bool = True,
                 writable: bool = True, journal: Journal | None = None, runner: AppRunner | None = None,
                 confirm: Confirm | None = None, open_ticket: TicketOpener | None = None) -> None:
        tunables = settings.current()
        if data_dir is None:
            data_dir = default_data_dir(write=writable)
            private_umask()  # everything written in the data dir is private (SPEC §17)
        self.data_dir = data_dir
        self.reporter: Reporter = reporter or _Silent()
        self._journal: Journal | None = journal
        self._check = check
        self._writable = writable
        self.concurrency = tunables.concurrency
        self.grace = tunables.grace
        launch = launch_mode()  # R-P1: "fork" (Linux default) or "spawn"
        self.runner: AppRunner = runner or LocalRunner(self.data_dir, grace=self.grace, launch=launch)
        self.stop_event = threading.Event()
        self.assume_yes = False
        self.confirm: Confirm | None = confirm
        self.open_ticket: TicketOpener | None = open_ticket
        self._janitor: _Janitor | None = None
        self._janitor_lock = threading.Lock()

    @property
    def journal(self) -> Journal:
        """The journal, opened (and migrated) on first use."""
        if self._journal is None:
            self._journal = open_journal(self.data_dir, check=self._check, writable=self._writable)
        return self._journal

    def call_dir(self, name: str, *, replace: bool = False) -> Path:
        """A fresh call directory under ``<data>/calls``.

        Args:
            replace: remove a leftover directory of the same name first. Safe only when no process
                can have used it: an attempt's directory is made before its intent is journaled and
                its process starts after, so a leftover without a journaled attempt was never used.

        Raises:
            FileExistsError: the directory exists and ``replace`` is False.
        """
        path = self.data_dir / "calls" / name
        if replace and path.exists():
            remove_tree(path, ignore_errors=False)
        if not calldir.take_dir(path):  # an empty directory of an earlier call, else a new one
            path.mkdir(parents=True, exist_ok=False)
        return path

    def discard(self, path: Path, *, recycle: bool = False) -> None:
        """Remove a finished call's directory, mostly off the caller's path (issue 14).

        The directory is renamed at once into ``.trash`` beside it (its name is free again when this
        returns) and removed by a background thread. Only for a directory whose outcome is journaled
        and whose process has ended. :meth:`close` waits for every removal; what a runner killed
        meanwhile leaves in ``.trash`` is removed by the next one that discards a directory there.

        Args:
            recycle: the call's supervisor recorded the App's exit (so every process of the call has
                ended): the directory, with its output and input files, is kept for a later call
                (:func:`workrun.runner.calldir.recycle`).
        """
        trash = path.parent / ".trash"
        target = trash / f"{path.name}.{os.urandom(4).hex()}"
        with self._janitor_lock:
            if self._janitor is None:
                self._janitor = _Janitor()
                self._janitor.clear_leftovers(path.parent)
        try:
            try:
                os.rename(path, target)
            except FileNotFoundError:
                if not path.exists():
                    return
                trash.mkdir(exist_ok=True)
                os.rename(path, target)
        except OSError:
            remove_tree(path)
            return
        with self._janitor_lock:
            if self._janitor is None:  # closed meanwhile
                self._janitor = _Janitor()
            self._janitor.put(target, path.parent if recycle else None)

    def tidy(self) -> None:
        """Do a little of the removal of finished call directories (:meth:`discard`) in this thread: a
        scheduler calls it once its call's App is started, while it would only wait for it (issue 14)."""
        janitor = self._janitor
        if janitor is not None:
            janitor.tidy()

    def say(self, run_id: str | None, node_key: str | None, level: str, text: str) -> None:
        """Record a node/run message in the journal and show it (R-C6: statuses on node messages); a secret
        this process knows of is said as ``{{ env.NAME }}`` (R-X2)."""
        text = redact_value(text, {})
        if run_id is not None:
            self.journal.add_message(run_id, node_key, level, text)
        self.reporter.message(run_id, node_key, level, text)

    def request_stop(self) -> None:
        """Stop this command's run(s): end App process groups, schedule nothing new (R-C9)."""
        self.stop_event.set()
        self.runner.stop_all()

    def stopping(self) -> bool:
        """True once a stop was requested."""
        return self.stop_event.is_set()

    @staticmethod
    def now() -> float:
        """Epoch seconds."""
        return time.time()

    def close(self) -> None:
        """End the runner's fork servers (calls in flight go on) and close the journal."""
        self.runner.close()
        with self._janitor_lock:
            janitor, self._janitor = self._janitor, None
        if janitor is not None:
            janitor.close()
        if self._journal is not None:
            self._journal.close()
            self._journal = None
