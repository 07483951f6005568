"""Opt-in code snapshots (``compensation = { entry = ..., code = "snapshot" }``; R-C8, issue 4).

At call time the project's fingerprinted files (``workrun.runner.apps.fingerprint``)
are copied into a content-addressed store in the data dir:
``objects/<sha256>`` holds each file once (deduplicated by hash) and
``snapshots/<fingerprint>.json`` lists ``{path: sha256}``. Compensation runs
from a tree materialised from that manifest, in an environment synced from the
snapshot's own ``uv.lock`` offline (from uv's cache). ``workrun gc`` removes
snapshots that no unfinished compensation needs.

On a shared journal (PostgreSQL, R-S4) the manifest and objects are also
stored in the database (``journal.put_snapshot``), so a worker on another
machine materialises the snapshot from there into its own data dir.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from workrun.core import settings
from workrun.core.paths import copy_file, remove_tree
from workrun.core.states import COMPENSATION_DONE
from workrun.runner.apps import Fingerprint

__all__ = ["Store", "gc", "materialize", "max_bytes", "publish", "take"]


def max_bytes() -> int:
    """The per-snapshot size bound in bytes: ``WORKRUN_SNAPSHOT_MAX_BYTES``, default 64 MiB."""
    return settings.current().snapshot_max_bytes


@runtime_checkable
class Store(Protocol):
    """Where snapshots are shared between machines (R-S4): the port this module types against. A shared
    journal plays this role (:class:`workrun.journal.base.SnapshotStore`); the SQLite journal does not."""

    def put_snapshot(self, snapshot: str, manifest: dict[str, Any], read: Callable[[str], bytes],
                     now: float) -> None:
        """Store a snapshot's manifest and its missing objects (``read(digest) -> bytes``) at once, unless the
        store holds it; never while :meth:`prune_snapshots` prunes."""

    def has_snapshot(self, snapshot: str) -> bool:
        """True when the store holds the snapshot."""

    def snapshot_manifest(self, snapshot: str) -> dict[str, Any] | None:
        """The snapshot's manifest ``{files: {path: sha256}, project}``, or None."""

    def snapshot_object(self, digest: str) -> bytes:
        """One stored file's bytes; raises KeyError when missing."""

    def gc_lock(self) -> AbstractContextManager[None]:
        """Held by one ``workrun gc`` at a time on the store (R-F3)."""

    def prune_snapshots(self, needed: set[str], *, dry_run: bool = False) -> tuple[int, int]:
        """Delete the stored snapshots not in ``needed`` (nor needed by what the store sees at that moment), never
        while one is stored; ``(removed, kept)``."""


def _shared(journal: object) -> Store | None:
    """The journal when it plays the snapshot store's role (a shared journal, R-S4), else None."""
    return journal if isinstance(journal, Store) else None


_BUILDING = threading.Lock()  # one snapshot taken or materialised at a time in a process (its calls share them)


def _unique() -> str:
    """A temporary name's part no other process or thread of this data directory uses at the same time."""
    return f"{os.getpid()}.{threading.get_ident()}.{os.urandom(3).hex()}"


def take(data_dir: Path, project: Path, fp: Fingerprint) -> str:
    """Store the project's fingerprinted files in the data directory; return the snapshot id (the fingerprint
    digest). On a shared journal, :func:`publish` it once the operation that uses it is journaled.

    Raises:
        ValueError: the files add up to more than :func:`max_bytes` (the call then fails before it starts).
    """
    with _BUILDING:  # two calls of one process snapshot the same project at once: one builds, both use it
        return _take(data_dir, project, fp)


def publish(data_dir: Path, snapshot: str, journal: Any) -> None:
    """Store a snapshot :func:`take` made in the shared journal's database too (R-S4), when ``journal`` is a
    shared one; nothing otherwise. Called after the intent of the operation that uses it is journaled and
    before its call starts: a ``workrun gc`` on another machine that pruned the snapshot before it could see
    that operation (R-F3) is undone here, and one after it sees the operation.

    Raises:
        JournalError: the shared journal cannot store it.
    """
    store = _shared(journal)
    if store is not None:
        with _BUILDING:
            _publish(data_dir, snapshot, store)


def _take(data_dir: Path, project: Path, fp: Fingerprint) -> str:
    manifest = data_dir / "snapshots" / f"{fp.digest}.json"
    if manifest.is_file():
        return fp.digest
    size = sum((project / rel).stat().st_size for rel in fp.files)
    if size > max_bytes():
        raise ValueError(f"code snapshot would be {size} bytes, over the {max_bytes()}-byte bound "
                         "(WORKRUN_SNAPSHOT_MAX_BYTES); use code = \"live\" or raise the bound")
    objects = data_dir / "objects"
    for rel, digest in fp.files.items():
        target = objects / digest[:2] / digest
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_suffix(f".tmp{_unique()}")
            copy_file(project / rel, tmp)
            os.replace(tmp, target)
    manifest.parent.mkdir(parents=True, exist_ok=True)
    tmp = manifest.with_suffix(f".tmp{_unique()}")
    tmp.write_text(json.dumps({"files": fp.files, "project": str(project)}))
    os.replace(tmp, manifest)
    return fp.digest


def _publish(data_dir: Path, snapshot: str, journal: Store) -> None:
    """Copy a local snapshot into the shared journal's database unless it is there (R-S4)."""
    manifest = json.loads((data_dir / "snapshots" / f"{snapshot}.json").read_text())
    journal.put_snapshot(snapshot, manifest, lambda digest: (data_dir / "objects" / digest[:2] / digest).read_bytes(),
                         time.time())


def _fetch(data_dir: Path, snapshot: str, journal: Store) -> None:
    """Bring a snapshot from the shared journal's database into this data dir (R-S4)."""
    manifest = journal.snapshot_manifest(snapshot)
    if manifest is None:
        raise FileNotFoundError(f"snapshot {snapshot[:12]} is neither in {data_dir} nor in the shared journal")
    for digest in dict.fromkeys(manifest["files"].values()):
        target = data_dir / "objects" / digest[:2] / digest
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_suffix(f".tmp{_unique()}")
            tmp.write_bytes(journal.snapshot_object(digest))
            os.replace(tmp, target)
    path = data_dir / "snapshots" / f"{snapshot}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{_unique()}")
    tmp.write_text(json.dumps(manifest))
    os.replace(tmp, path)


def materialize(data_dir: Path, snapshot: str, journal: Any = None) -> Path:
    """Return a directory holding the snapshot's files (built once, then reused).

    Args:
        journal: a shared journal to fetch the snapshot from when this data dir lacks it (R-S4).

    Raises:
        FileNotFoundError: when the snapshot was removed (e.g. by a manual delete).
        KeyError: a stored object is missing from the shared journal.
    """
    tree = data_dir / "snapshot-trees" / snapshot
    if (tree / ".complete").exists():
        return tree
    with _BUILDING:
        return _materialize(data_dir, snapshot, journal, tree)


def _materialize(data_dir: Path, snapshot: str, journal: Any, tree: Path) -> Path:
    if (tree / ".complete").exists():  # built while this waited
        return tree
    store = _shared(journal)
    if not (data_dir / "snapshots" / f"{snapshot}.json").is_file() and store is not None:
        _fetch(data_dir, snapshot, store)
    files = json.loads((data_dir / "snapshots" / f"{snapshot}.json").read_text())["files"]
    tmp = tree.with_name(f".{snapshot}.{_unique()}")
    remove_tree(tmp)
    for rel, digest in files.items():
        dest = tmp / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        copy_file(data_dir / "objects" / digest[:2] / digest, dest)
    (tmp / ".complete").write_text("")
    if (tree / ".complete").exists():  # another process built it meanwhile: its tree may be in use, keep it
        remove_tree(tmp)
        return tree
    if tree.exists():  # left incomplete by a process that was killed
        remove_tree(tree)
    try:
        os.replace(tmp, tree)
    except OSError:
        if not (tree / ".complete").exists():
            raise
        remove_tree(tmp)
    return tree


def gc(svc: Any, *, dry_run: bool = False, named: list[str] | None = None) -> tuple[int, int]:
    """Remove snapshots no unfinished compensation needs; return (removed, kept). ``named``: when given, the id
    of every snapshot of the data directory removed (with ``dry_run``: that would be) is appended to it (the
    database's copies on a shared journal are counted, not named).

    Needed: snapshots of operations in runs still ``running``, and of operations whose
    compensation is not ``succeeded``/``skipped``. On a shared journal the database's copies are pruned too,
    under its gc lock: a second ``gc`` at once waits for the first (R-F3).
    """
    shared = _shared(svc.journal)
    if shared is None:
        return _gc(svc, dry_run=dry_run, named=named)
    with shared.gc_lock():
        removed, kept = _gc(svc, dry_run=dry_run, named=named)
        db_removed, db_kept = shared.prune_snapshots(_needed(svc), dry_run=dry_run)
    return removed + db_removed, max(kept, db_kept)


def _needed(svc: Any) -> set[str]:
    """The snapshots an unfinished run or compensation may still need."""
    needed: set[str] = set()
    for run in svc.journal.runs():
        comps = {c["operation_id"]: c for c in svc.journal.compensations(run["run_id"])}
        for op in svc.journal.operations(run["run_id"]):
            if not op["snapshot"]:
                continue
            c = comps.get(op["operation_id"])
            ended = ("failed", "stopped", "terminated")
            if run["status"] in ("running", "waiting") or (run["status"] in ended and c is None
                                               and op["status"] == "succeeded" and not run["eval"]) \
                    or (c is not None and c["status"] not in COMPENSATION_DONE):
                needed.add(op["snapshot"])
    return needed


def _gc(svc: Any, *, dry_run: bool, named: list[str] | None = None) -> tuple[int, int]:
    """This data directory's part of :func:`gc`."""
    data_dir: Path = svc.data_dir
    needed = _needed(svc)
    removed = kept = 0
    live_objects: set[str] = set()
    for manifest in sorted((data_dir / "snapshots").glob("*.json")) if (data_dir / "snapshots").is_dir() else []:
        sid = manifest.stem
        if sid in needed:
            kept += 1
            live_objects.update(json.loads(manifest.read_text())["files"].values())
            continue
        removed += 1
        if named is not None:
            named.append(sid)
        if not dry_run:
            manifest.unlink()
            remove_tree(data_dir / "snapshot-trees" / sid)
    if not dry_run and (data_dir / "objects").is_dir():
        for obj in (data_dir / "objects").glob("*/*"):
            if obj.name not in live_objects:
                obj.unlink()
    return removed, kept
