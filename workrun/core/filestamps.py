"""What was read from files, kept per process and keyed by the files' stat *stamps* (issue 14).

A stamp is ``(device, inode, size, mtime ns, ctime ns)`` of a path, or None when
the path is missing. A cached value is used only while every file it was read
from still has the same stamp, so an edited, replaced, added or removed file is
always read again: the App's config (R-A1), the environment key (R-A8) and the
code fingerprint (R-J2) never come from a stale read.

File times come from a coarse kernel clock (and some file systems keep whole
seconds): two writes close together may leave the same mtime. As git does for
its index ("racy git"), a value read from a file changed less than
:data:`RACY_SECONDS` before the read is never cached, so such a file is read
again on every use until it has settled.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

__all__ = ["RACY_SECONDS", "Stamp", "StampedCache", "settled", "stamp"]

RACY_SECONDS = 2.0
"""A file changed this recently (seconds) is read again on every use (see the module doc)."""

Stamp = tuple[int, int, int, int, int] | None

T = TypeVar("T")


def stamp(path: str | os.PathLike[str]) -> Stamp:
    """Return the stat stamp of ``path`` (follows symlinks), or None when it cannot be stat'ed."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def settled(stamps: Sequence[Stamp], before_ns: int) -> bool:
    """True when none of ``stamps`` changed within :data:`RACY_SECONDS` of ``before_ns`` (epoch ns, taken
    before the files were read): a later change of any of them must then show in its stamp."""
    limit = before_ns - int(RACY_SECONDS * 1e9)
    return all(s is None or max(s[3], s[4]) < limit for s in stamps)


class StampedCache(Generic[T]):
    """A small thread-safe cache of values read from files, valid while the files' stamps hold.

    Args:
        size: entries kept at most (the oldest goes first).
    """

    def __init__(self, size: int = 256) -> None:
        self._size = size
        self._data: dict[object, tuple[tuple[Stamp, ...], T]] = {}
        self._lock = threading.Lock()

    def get(self, key: object, paths: Sequence[str | os.PathLike[str]], compute: Callable[[], T]) -> T:
        """Return the value for ``key``: cached while every path in ``paths`` keeps its stamp, else
        ``compute()`` (stored when the files have settled). Exceptions of ``compute`` propagate, uncached."""
        before = time.time_ns()
        stamps = tuple(stamp(p) for p in paths)
        with self._lock:
            hit = self._data.get(key)
        if hit is not None and hit[0] == stamps:
            return hit[1]
        value = compute()
        if settled(stamps, before):
            with self._lock:
                self._data.pop(key, None)
                if len(self._data) >= self._size:
                    self._data.pop(next(iter(self._data)))
                self._data[key] = (stamps, value)
        return value

    def clear(self) -> None:
        """Forget everything."""
        with self._lock:
            self._data.clear()
