"""Opt-in code snapshots (``compensation = { entry = ..., code = "snapshot" }``; R-C8, issue 4).

At call time the project's fingerprinted files (``workrun.apps.fingerprint``)
are copied into a content-addressed store in the data dir:
``objects/<sha256>`` holds each file once (deduplicated by hash) and
``snapshots/<fingerprint>.json`` lists ``{path: sha256}``. Compensation runs
from a tree materialised from that manifest, in an environment synced from the
snapshot's own ``uv.lock`` offline (from uv's cache). ``workrun gc`` removes
snapshots that no unfinished compensation needs.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from workrun import settings
from workrun.apps import Fingerprint
from workrun.states import COMPENSATION_DONE

__all__ = ["gc", "materialize", "max_bytes", "take"]


def max_bytes() -> int:
    """The per-snapshot size bound in bytes: ``WORKRUN_SNAPSHOT_MAX_BYTES``, default 64 MiB."""
    return settings.current().snapshot_max_bytes


def take(data_dir: Path, project: Path, fp: Fingerprint) -> str:
    """Store the project's fingerprinted files; return the snapshot id (the fingerprint digest).

    Raises:
        ValueError: the files add up to more than :func:`max_bytes` (the call then fails before it starts).
    """
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
            tmp = target.with_suffix(f".tmp{os.getpid()}")
            shutil.copyfile(project / rel, tmp)
            os.replace(tmp, target)
    manifest.parent.mkdir(parents=True, exist_ok=True)
    tmp = manifest.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps({"files": fp.files, "project": str(project)}))
    os.replace(tmp, manifest)
    return fp.digest


def materialize(data_dir: Path, snapshot: str) -> Path:
    """Return a directory holding the snapshot's files (built once, then reused).

    Raises:
        FileNotFoundError: when the snapshot was removed (e.g. by a manual delete).
    """
    tree = data_dir / "snapshot-trees" / snapshot
    if (tree / ".complete").exists():
        return tree
    files = json.loads((data_dir / "snapshots" / f"{snapshot}.json").read_text())["files"]
    tmp = tree.with_name(f".{snapshot}.{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    for rel, digest in files.items():
        dest = tmp / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(data_dir / "objects" / digest[:2] / digest, dest)
    (tmp / ".complete").write_text("")
    if tree.exists():
        shutil.rmtree(tree, ignore_errors=True)
    os.replace(tmp, tree)
    return tree


def gc(svc: Any, *, dry_run: bool = False) -> tuple[int, int]:
    """Remove snapshots no unfinished compensation needs; return (removed, kept).

    Needed: snapshots of operations in runs still ``running``, and of operations whose
    compensation is not ``succeeded``/``skipped``.
    """
    data_dir: Path = svc.data_dir
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
    removed = kept = 0
    live_objects: set[str] = set()
    for manifest in sorted((data_dir / "snapshots").glob("*.json")) if (data_dir / "snapshots").is_dir() else []:
        sid = manifest.stem
        if sid in needed:
            kept += 1
            live_objects.update(json.loads(manifest.read_text())["files"].values())
            continue
        removed += 1
        if not dry_run:
            manifest.unlink()
            shutil.rmtree(data_dir / "snapshot-trees" / sid, ignore_errors=True)
    if not dry_run and (data_dir / "objects").is_dir():
        for obj in (data_dir / "objects").glob("*/*"):
            if obj.name not in live_objects:
                obj.unlink()
    return removed, kept
