"""The runner's side of the call-directory file protocol (``workrun_sdk/_wire.py`` describes the files).

Reading what a call left (result, resources, dependencies, output tails, the
launcher's exit record, the claim) and fencing a call that must never start.
Every reader here tolerates missing or broken files.
"""

from __future__ import annotations

import json
import os
import stat
import threading
from pathlib import Path
from typing import Any

from workrun.core.structs import struct
from workrun.runner.base import Collected, Outcome
from workrun_sdk import _wire

__all__ = ["CAPTURE_BYTES", "EXIT_RECORD_BYTES", "POOL_DIRS", "RESULT_LIMIT_BYTES", "Claim", "collect", "fence",
           "read_claim", "read_exit", "recycle", "take_dir", "write_input"]

CAPTURE_BYTES = 64 * 1024
RESULT_LIMIT_BYTES = 1024 * 1024


@struct(frozen=True)
class Claim:
    """The ``claim`` file: ``started`` by the call's supervisor (``started PID START``: its pid and its
    ``/proc`` start time, ``-`` where there is none) or ``abandoned`` by recovery."""

    started: bool
    pid: int | None = None
    start: str | None = None
    at: float | None = None  # when it was claimed (the file's mtime, epoch seconds)


def read_claim(call_dir: Path) -> Claim | None:
    """The call directory's claim, or None when nobody claimed it yet (or it cannot be read)."""
    try:
        with open(call_dir / "claim") as fh:
            text = fh.read()
            at = os.fstat(fh.fileno()).st_mtime
    except OSError:
        return None
    words = text.split()
    if not words or words[0] != "started":
        return Claim(started=False)
    try:
        pid = int(words[1])
    except (IndexError, ValueError):
        return Claim(started=True)
    start = words[2] if len(words) > 2 and words[2] != "-" else None
    return Claim(started=True, pid=pid, start=start, at=at)


def fence(call_dir: Path) -> bool:
    """Claim the directory as abandoned; True when this call won (the launcher will then refuse to start).
    False when the directory is gone (nothing can start in it any more, but what ran in it is not known)."""
    try:
        return bool(_wire.claim(call_dir, "abandoned\n"))
    except FileNotFoundError:
        return False


POOL_DIRS = 32
"""Emptied call directories kept per calls directory for reuse (see :func:`recycle`)."""

_KEPT = frozenset(("stdout", "stderr", "input.json"))
"""The files a pooled directory keeps: the next call's outputs (emptied) and its input (written over)."""


class _Pool:
    """Emptied directories of finished calls, in ``<calls>/.pool`` (``d-*``), ready to become new calls'
    directories with their ``stdout`` and ``stderr`` already there, empty, and an ``input.json`` to write over.

    Every new file costs an inode allocation and every removed one a deletion; on file systems that keep
    recently deleted inodes from reuse (ext4 without a journal) an allocation scans past every inode deleted in
    the last minutes, so a call's seven files cost milliseconds there. A pooled directory keeps four of its
    inodes (itself and three files) and is taken with one rename (issue 14). Directories enter the pool already
    emptied, and only from a call whose supervisor marked every process of the call ended (nothing writes into
    them any more). A rename out of the pool is atomic: of two processes taking the same directory, one gets it
    and the other makes a new one.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.lock = threading.Lock()
        try:
            names = os.listdir(folder)  # left by an earlier runner
        except OSError:
            names = []
        self.dirs = [os.path.join(folder, n) for n in names if n.startswith("d-")]
        for name in names:  # loose files pooled by an earlier version
            if not name.startswith("d-"):
                try:
                    os.unlink(os.path.join(folder, name))
                except OSError:
                    pass

    def take(self, dest: Path) -> bool:
        """Move a pooled directory to ``dest`` (which must not exist); False when there is none."""
        while True:
            with self.lock:
                if not self.dirs:
                    return False
                src = self.dirs.pop()
            if os.path.lexists(dest):  # a rename would replace an empty directory there: the caller makes it fail
                with self.lock:
                    self.dirs.append(src)
                return False
            try:
                os.rename(src, dest)
            except OSError:  # taken by another process meanwhile, or gone
                continue
            try:  # a new call's directory is new: ``workrun gc`` tells a stale one by its time
                os.utime(dest)
            except OSError:
                pass
            return True

    def put(self, path: Path) -> bool:
        """Move the emptied directory ``path`` into the pool; False when full or not possible (``path`` stays)."""
        with self.lock:
            if len(self.dirs) >= POOL_DIRS:
                return False
        target = os.path.join(self.folder, f"d-{path.name}")  # a call directory's name is unique
        try:
            try:
                os.rename(path, target)
            except FileNotFoundError:
                if not path.exists():
                    return False
                os.makedirs(self.folder, exist_ok=True)
                os.rename(path, target)
        except OSError:
            return False
        with self.lock:
            self.dirs.append(target)
        return True


_POOLS: dict[str, _Pool] = {}
_POOLS_LOCK = threading.Lock()


def _pool(calls: Path) -> _Pool:
    with _POOLS_LOCK:
        pool = _POOLS.get(str(calls))
        if pool is None:
            pool = _POOLS[str(calls)] = _Pool(calls / ".pool")
        return pool


def recycle(finished: Path, calls: Path) -> bool:
    """Empty a finished call's directory ``finished`` (already moved out of the calls directory ``calls``) and
    pool it for a later call: its ``stdout`` and ``stderr`` stay, truncated, and its ``input.json`` as it is
    (:func:`write_input` writes over it; emptying it here would cost more on ext4: see
    :func:`workrun_sdk._wire.open_empty`); every other file is removed. True when pooled. False when not (the
    pool is full, it holds a subdirectory, or a file cannot be removed): the caller removes what is left.

    Only for a call whose supervisor marked every process of the call ended: nothing writes to these files any
    more. A kept name that is not a regular file of its own (an App swapped it for a symlink, or linked it
    elsewhere) is removed, never followed or emptied.
    """
    try:
        with os.scandir(finished) as found:
            entries = list(found)
        for entry in entries:
            if entry.name in _KEPT:
                st = entry.stat(follow_symlinks=False)
                if stat.S_ISREG(st.st_mode) and st.st_nlink == 1:
                    if st.st_size and entry.name != "input.json":  # see write_input
                        fd = os.open(entry.path, os.O_WRONLY | os.O_NOFOLLOW)
                        try:
                            os.ftruncate(fd, 0)
                        finally:
                            os.close(fd)
                    continue
            if entry.is_dir(follow_symlinks=False):
                return False  # not what a call leaves: the caller removes the whole tree
            os.unlink(entry.path)
    except OSError:
        return False
    return _pool(calls).put(finished)


def take_dir(path: Path) -> bool:
    """Make ``path`` (a new call directory in a calls directory) from a pooled directory (with empty ``stdout``
    and ``stderr`` and an old ``input.json`` in it, or some of them); False when the pool has none or ``path``
    exists (then the caller makes it, and fails as it should)."""
    return _pool(path.parent).take(path)


def write_input(call_dir: Path, envelope: dict[str, Any]) -> None:
    """Write ``input.json`` (version-1 envelope) into a new call directory (over the old one a pooled directory
    has, which no process reads: its call never started).

    Written in place, not through a temporary file and a rename: nothing reads it before the call's process is
    asked to start, which is after this returns. A runner killed while writing it leaves a call that never
    started, which recovery fences (``claim``: ``abandoned``) and records as not started.
    """
    text = json.dumps({"v": _wire.VERSION, **envelope}, ensure_ascii=False, allow_nan=False)
    data = text.encode("utf-8")
    fd = os.open(call_dir / "input.json", os.O_WRONLY | os.O_CREAT, 0o600)
    try:  # over a pooled file's old bytes, cut to length after (never emptied first: see _wire.open_empty)
        _wire.write_fully(fd, data)
        if os.fstat(fd).st_size > len(data):
            os.ftruncate(fd, len(data))
    finally:
        os.close(fd)


EXIT_RECORD_BYTES = 4096
"""The most an exit record may hold (bytes): a supervisor writes ~60. A bigger one is no record (crash review: a
3 GB ``exit.json`` was read whole, 6 GB of memory for ``resume``)."""


def _small_file(path: Path, limit: int) -> bytes:
    """The bytes of the regular file ``path`` when it holds at most ``limit`` of them.

    Raises:
        OSError: it cannot be opened (a symlink is not followed), or it is not a regular file or is bigger (a
            FIFO is never waited on).
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            raise OSError(f"{path}: not a regular file of at most {limit} bytes")
        return os.read(fd, limit + 1)
    finally:
        os.close(fd)


def read_exit(call_dir: Path) -> Outcome | None:
    """The launcher's exit record (``exit.json``) as an Outcome (exit code or signal; ``ended`` when the supervisor
    also marked every process of the call ended), or None when there is none (or what is there is no record: not
    a regular file, over :data:`EXIT_RECORD_BYTES`, not JSON)."""
    try:
        data = json.loads(_small_file(call_dir / "exit.json", EXIT_RECORD_BYTES))
        code, sig = data.get("exit_code"), data.get("signal")
        if code is None and sig is None:
            return None
        return Outcome(exit_code=None if code is None else int(code), signal=None if sig is None else int(sig),
                       ended=os.path.lexists(call_dir / _wire.ENDED))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _tail(path: Path, size: int | None) -> str:
    """The last :data:`CAPTURE_BYTES` of ``path`` (``size``: its size when known; "" for an empty or missing file)."""
    if not size:
        return ""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - CAPTURE_BYTES))
            return fh.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def _sizes(call_dir: Path) -> dict[str, int]:
    """``{file name: size in bytes}`` of the files in ``call_dir`` (one directory read; {} on error)."""
    sizes: dict[str, int] = {}
    try:
        with os.scandir(call_dir) as entries:
            for entry in entries:
                try:
                    if entry.is_file():  # following a symlink, as opening the file would
                        sizes[entry.name] = entry.stat().st_size
                except OSError:
                    continue
    except OSError:
        pass
    return sizes


def collect(call_dir: Path) -> Collected:
    """Read result, resources, dependencies and output tails from a finished call's directory (never raises).

    A result over 1 MiB (``RESULT_LIMIT_BYTES``, UTF-8 bytes) or not a version-1 envelope sets ``error`` (R-A3).
    """
    sizes = _sizes(call_dir)  # which files there are, and their sizes, at once (issue 14)
    out = Collected(stdout_tail=_tail(call_dir / "stdout", sizes.get("stdout")),
                    stderr_tail=_tail(call_dir / "stderr", sizes.get("stderr")))
    result_file = call_dir / "result.json"
    if "result.json" in sizes:
        size = sizes["result.json"]
        if size > RESULT_LIMIT_BYTES + 64:
            out.error = f"result is {size} bytes, over the 1 MiB limit ({RESULT_LIMIT_BYTES} bytes)"
        else:
            try:
                data = _wire.loads_strict(result_file.read_text(encoding="utf-8"))
                if not isinstance(data, dict) or data.get("v") != _wire.VERSION or "result" not in data:
                    out.error = "result.json: not a version-1 result envelope"
                else:
                    out.result = data["result"]
                    if len(json.dumps(out.result, ensure_ascii=False).encode("utf-8")) > RESULT_LIMIT_BYTES:
                        out.error = f"result is over the 1 MiB limit ({RESULT_LIMIT_BYTES} bytes)"
                        out.result = None
            except (ValueError, UnicodeDecodeError) as exc:
                out.error = f"result.json: not JSON ({exc})"
    dep_file = call_dir / "dependencies.json"
    if "dependencies.json" in sizes:
        try:
            data = _wire.loads_strict(dep_file.read_text(encoding="utf-8"))
            out.depends_on = [d for d in data.get("depends_on", []) if isinstance(d, str)]
        except (ValueError, OSError, AttributeError):
            out.error = out.error or "dependencies.json: not JSON"
    res_file = call_dir / "resources.json"
    if "resources.json" in sizes:
        try:
            data = _wire.loads_strict(res_file.read_text(encoding="utf-8"))
            out.resources = [r for r in data.get("resources", []) if isinstance(r, dict)]
        except (ValueError, OSError, AttributeError):
            out.error = out.error or "resources.json: not JSON"
    return out
