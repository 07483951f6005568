"""Reading ``[tool.workrun]`` of an App project, validating it, fingerprinting its code.

Implements R-A1 (project = ``pyproject.toml`` + ``uv.lock``), R-A3 (output
contracts), R-A4 (compensation entry inside the project, different from the
entry), R-J2 (code fingerprint).
"""

from __future__ import annotations

import copy
import os
import re
import threading
import time
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from workrun.core import tomlfile
from workrun.core.digest import sha256
from workrun.core.errors import ConfigError, ConfigErrors
from workrun.core.filestamps import Stamp, StampedCache, settled, stamp
from workrun.core.models import AppSpec
from workrun.core.paths import real_path
from workrun.core.schema import APP_NAME
from workrun.core.shape import ShapeError
from workrun.core.structs import struct
from workrun.outbound.http import action_field, check_action

__all__ = [
    "FINGERPRINT_EXCLUDED_DIRS",
    "Fingerprint",
    "check_contract",
    "diff_fingerprints",
    "fingerprint",
    "load_app",
    "load_project",
    "one_reading",
    "parse_toml",
    "project_not_found",
    "shape_error",
]

FINGERPRINT_EXCLUDED_DIRS = frozenset(
    {".venv", "venv", "__pycache__", ".git", ".hg", ".svn", ".pytest_cache", ".mypy_cache",
     ".ruff_cache", ".tox", ".nox", "node_modules", "build", "dist", ".workrun"}
)
FINGERPRINT_TOP_FILES = ("pyproject.toml", "uv.lock", ".python-version")

_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "object": (dict,),
    "array": (list,),
}


def parse_toml(text: str, file: str) -> dict[str, Any]:
    """Parse a config file's TOML text (a workflow or an App's ``pyproject.toml``).

    TOML's ``nan`` and ``inf`` floats are refused: they are no JSON number, and every value of a config may
    end up in the journal, an App's input, a request body or a ``--json`` document (SPEC §9).

    A parse of the same text kept by ``run``'s first look at the workflow (:mod:`workrun.core.tomlfile`) is
    taken instead of parsing again (issue 33); it is checked all the same.

    Raises:
        ConfigError: not TOML (naming ``file``), or a ``nan``/``inf`` (naming ``file`` and the dotted field).
    """
    kept = tomlfile.take(text)
    try:
        data = tomllib.loads(text) if kept is None else kept
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"not valid TOML: {exc}", file=file) from None
    except RecursionError:  # the standard library's parser recurses once per level of nesting
        raise ConfigError("nested too deep to read", file=file) from None
    todo: list[tuple[str, Any]] = [("", data)]
    while todo:
        where, value = todo.pop()
        if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
            raise ConfigError(f"{value} is not a JSON number (no nan or inf)", file=file, field=where)
        if isinstance(value, dict):
            todo.extend((f"{where}.{k}" if where else str(k), v) for k, v in value.items())
        elif isinstance(value, list):
            todo.extend((f"{where}[{i}]", v) for i, v in enumerate(value))
    return data


def shape_error(exc: ShapeError, file: str, prefix: str) -> ConfigError:
    """Every error of a config table that does not fit its model, one line each naming the file and the field
    under ``prefix``: ``nodes.a.timeout: must be a number, not a string ('60')`` (SPEC §17); a
    :class:`~workrun.core.errors.ConfigErrors` when there are several (R-L1: all of them, not just the first)."""
    found = [ConfigError(e["msg"], file=file, field=".".join(str(p) for p in (prefix, *e["loc"]) if p != ""))
             for e in exc.errors()]
    return ConfigErrors.of(found)


def project_not_found(project: str | Path, *, named: bool = True) -> str:
    """What is said of an App project path that is not a directory: ``App project directory P not found``, or
    ``P is a file, not an App project directory`` when something else is there (new-user review: a path to
    ``main.py`` read as missing). ``named=False``: without the path (the error names it as its file)."""
    where = f" {project}" if named else ""
    if os.path.lexists(project):
        return f"{project} is a file, not an App project directory" if named else "a file, not an App project directory"
    return f"App project directory{where} not found"


def _read_pyproject(project: Path) -> tuple[Path, dict[str, Any]]:
    pyproject = project / "pyproject.toml"
    if not project.is_dir():
        raise ConfigError(project_not_found(project, named=False), file=str(project))
    for required in (pyproject, project / "uv.lock"):
        if required.is_dir():
            raise ConfigError(f"{required.name} is a directory, not a file (R-A1)", file=str(required))
    if not pyproject.is_file():
        raise ConfigError("not an App project: pyproject.toml is missing (R-A1)", file=str(project))
    try:
        text = pyproject.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"not valid TOML: {exc}", file=str(pyproject)) from None
    return pyproject, parse_toml(text, str(pyproject))


def _inside(project: Path, root: str, rel: str, file: str, field: str) -> str:
    """Resolve ``rel`` inside ``project`` (whose real path is ``root``) or raise (R-A4: no '..', absolute
    path, symlink escape); return the real path of the file (a string: this runs on every call, issue 14)."""
    if not rel or os.path.isabs(rel) or ".." in Path(rel).parts:
        raise ConfigError(f"{rel!r} must be a relative path inside the project", file=file, field=field)
    if "\0" in rel:  # no file has such a name (the OS refuses it: an internal error, hostile review)
        raise ConfigError(f"{rel!r} is not a usable path: it holds a NUL character", file=file, field=field)
    target = real_path(os.path.join(project, rel))
    if target != root and not target.startswith(root.rstrip(os.sep) + os.sep):
        raise ConfigError(f"{rel!r} resolves outside the project (symlink escape)", file=file, field=field)
    if not os.path.isfile(target):
        raise ConfigError(f"{rel!r} does not exist in the project", file=file, field=field)
    return target


_APP_NAME = re.compile(APP_NAME)

_PARSED: StampedCache[tuple[str, dict[str, AppSpec], tuple[ConfigError, ...]]] = StampedCache()


def _parse_apps(project: Path) -> tuple[str, dict[str, AppSpec], tuple[ConfigError, ...]]:
    """``(pyproject path, {name: AppSpec}, the errors of the Apps left out)`` as declared, validated field by field
    (entry paths not checked): an App with an error is left out, the others are still checked (R-L1).

    Raises:
        ConfigError: the file itself is wrong (missing, bad TOML, no or a bad ``[tool.workrun.apps]`` table).
    """
    pyproject, data = _read_pyproject(project)
    file = str(pyproject)
    apps_table: Any = data
    for depth, key in enumerate(("tool", "workrun", "apps")):
        apps_table = apps_table.get(key)
        if apps_table is None:
            break
        if depth < 2 and not isinstance(apps_table, dict):
            raise ConfigError("must be a table", file=file, field=".".join(("tool", "workrun")[:depth + 1]))
    if apps_table is None:  # said before a missing lock: a folder with some other pyproject is no App project
        raise ConfigError("no Apps declared: not an App project (R-A1)", file=file, field="tool.workrun.apps")
    if not isinstance(apps_table, dict):
        raise ConfigError("must be a table of Apps", file=file, field="tool.workrun.apps")
    if not apps_table:
        raise ConfigError("no Apps declared: add [tool.workrun.apps.NAME] (R-A1)", file=file, field="tool.workrun.apps")
    unknown = sorted(k for k in data["tool"]["workrun"] if k != "apps")
    if unknown:  # as the schema says (R-L4): [tool.workrun] holds apps only
        raise ConfigError("unknown key ([tool.workrun] holds apps only)", file=file, field=f"tool.workrun.{unknown[0]}")
    if not (project / "uv.lock").is_file():
        raise ConfigError("uv.lock is missing: run `uv lock` in the project (R-A1)", file=str(project / "uv.lock"))
    apps: dict[str, AppSpec] = {}
    errors: list[ConfigError] = []  # every App's errors (R-L1: all of them)
    for name, table in apps_table.items():
        prefix = f"tool.workrun.apps.{name}"
        if not isinstance(table, dict):
            errors.append(ConfigError("must be a table", file=file, field=prefix))
            continue
        if not _APP_NAME.match(name):  # a NUL or an escape reached the dashboard's HTML (the schema's pattern)
            errors.append(ConfigError("an App name is printable text: no control or format characters, not blank",
                                      file=file, field=prefix))
            continue
        try:
            apps[name] = AppSpec.model_validate({**table, "name": name})
        except ShapeError as exc:
            comp = table.get("compensation")
            if isinstance(comp, dict) and "http" not in comp:  # a written action kind: its errors at its own keys
                exc = ShapeError([{**e, "loc": _unwrapped(tuple(e["loc"]))} for e in exc.errors()])
            errors.append(shape_error(exc, file, prefix))
    return file, apps, tuple(errors)


def _unwrapped(loc: tuple[Any, ...]) -> tuple[Any, ...]:
    """An error's place in an App's ``compensation`` as the file wrote it: an action written as its kind (``sms``,
    ``email``, ``update_data``, a request in place) is kept as ``http`` inside, a key the file never had."""
    return (loc[0], *loc[2:]) if loc[:2] == ("compensation", "http") else loc


def load_project(project: Path) -> dict[str, AppSpec]:
    """Read and validate every App of a project.

    The parsed ``pyproject.toml`` is kept per process while its stat stamp holds
    (:mod:`workrun.core.filestamps`): an edited file is always read again. Entry paths are
    checked on every call.

    Args:
        project: the App project directory.

    Returns:
        ``{app name: AppSpec}`` (a new dict; the specs are frozen).

    Raises:
        ConfigError: missing files, bad TOML, unknown keys, bad types, entry paths
            that escape the project or a compensation entry equal to the entry (R-A4).
    """
    project = Path(project)
    if not project.is_dir():  # checked before the cache: a removed project is never served from it
        raise ConfigError(project_not_found(project, named=False), file=str(project))
    pyproject = project / "pyproject.toml"
    file, declared, invalid = _PARSED.get(os.path.abspath(project), [pyproject, project / "uv.lock"],
                                          lambda: _parse_apps(project))
    apps: dict[str, AppSpec] = {}
    root = real_path(project)
    # every App's first error (R-L1: all Apps are checked); copies: the cached ones are never raised themselves
    # (a traceback would grow on them with every raise, and keep its frames alive)
    errors: list[ConfigError] = [copy.copy(part) for e in invalid
                                 for part in (e.errors if isinstance(e, ConfigErrors) else [e])]
    for name, spec in declared.items():
        try:
            _check_paths(project, root, name, spec, file)
        except ConfigError as exc:
            errors.append(exc)
            continue
        apps[name] = spec
    if errors:
        raise ConfigErrors.of(errors)
    return apps


def _check_paths(project: Path, root: str, name: str, spec: AppSpec, file: str) -> None:
    """An App's entry paths (inside the project, R-A4; the compensation's another file) and reverse action."""
    prefix = f"tool.workrun.apps.{name}"
    entry = _inside(project, root, spec.entry, file, f"{prefix}.entry")
    if spec.compensation is not None and spec.compensation.entry is not None:
        field = f"{prefix}.compensation.entry"
        comp = _inside(project, root, spec.compensation.entry, file, field)
        if comp == entry:
            raise ConfigError("must differ from the App's entry (R-A4)", file=file, field=field)
    action = spec.compensation.http if spec.compensation is not None else None
    # a reverse action (R-H6); one through a connector is checked with the workflow that declares it (R-K1)
    if action is not None and action.connector is None:
        check_action(action, file=file, field=action_field(f"{prefix}.compensation", action), check_env=False)


_READING = threading.local()


@contextmanager
def one_reading() -> Iterator[None]:
    """Within the block, this thread reads each (project, App) once (:func:`load_app`): e.g. a workflow is
    checked against one reading of each App project, however many nodes call it (issue 14)."""
    outer = getattr(_READING, "apps", None)
    if outer is None:
        _READING.apps = {}
    try:
        yield
    finally:
        if outer is None:
            _READING.apps = None


def load_app(project: Path, app: str, *, file: str | None = None, field: str | None = None) -> AppSpec:
    """Return one validated App of a project (the same one again inside :func:`one_reading`).

    Raises:
        ConfigError: as :func:`load_project`, or when the App is not declared
            (reported against ``file``/``field`` when given, e.g. the workflow node).
    """
    memo: dict[tuple[str, str], AppSpec] | None = getattr(_READING, "apps", None)
    key = (os.path.abspath(project), app)
    if memo is not None and key in memo:
        return memo[key]
    spec = _load_app(project, app, file=file, field=field)
    if memo is not None:
        memo[key] = spec
    return spec


def _load_app(project: Path, app: str, *, file: str | None, field: str | None) -> AppSpec:
    apps = load_project(project)
    if app not in apps:
        known = ", ".join(sorted(apps)) or "none"
        raise ConfigError(f"unknown App {app!r} in {project} (Apps: {known})",
                          file=file or str(Path(project) / "pyproject.toml"), field=field or "app")
    return apps[app]


def check_contract(result: Any, output: dict[str, Any]) -> str | None:
    """Check a result against an output contract (R-A3).

    Args:
        result: the parsed result (must be a dict).
        output: ``{field: OutputField}``.

    Returns:
        None when the result conforms, else a message naming the field.
        Fields beyond the contract are allowed (SPEC §10).
    """
    if not isinstance(result, dict):
        return f"result must be a JSON object, got {type(result).__name__}"
    for name, spec in output.items():
        if name not in result:
            if spec.required:
                return f"output field {name!r} is required but missing"
            continue
        value = result[name]
        allowed = _JSON_TYPES[spec.type]
        ok = isinstance(value, allowed) and not (spec.type in ("integer", "number") and isinstance(value, bool))
        if not ok:
            return f"output field {name!r} must be {spec.type}, got {type(value).__name__}"
    return None


@struct(frozen=True)
class Fingerprint:
    """A project's code fingerprint (R-J2).

    Attributes:
        digest: sha256 hex over the sorted ``path NUL file-sha256`` lines.
        files: ``{relative posix path: sha256 hex}`` of every fingerprinted file.
    """

    digest: str
    files: dict[str, str]


def _git_ignored(project: Path, rels: list[str]) -> set[str]:
    """The paths among ``rels`` (relative to ``project``, which :func:`_fingerprinted_files` found in a git work
    tree) that git ignores: untracked and matched by ``.gitignore``, ``.git/info/exclude`` or the global excludes
    file. Empty when git is missing or says it is not a work tree (then nothing is ignored)."""
    import shutil  # here, not at the top: checking a workflow never asks git (SPEC §24: ``check`` is quick)
    import subprocess

    git = shutil.which("git")
    if not git or not rels:
        return set()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}  # never another repo's GIT_DIR
    try:
        proc = subprocess.run([git, "-C", str(project), "check-ignore", "-z", "--stdin"],
                              input="".join(f"{r}\0" for r in rels).encode(), capture_output=True, env=env,
                              timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return set()
    if proc.returncode != 0:  # 1: none ignored; 128: not a git work tree
        return set()
    return {p for p in proc.stdout.decode(errors="surrogateescape").split("\0") if p}


def _fingerprinted_files(project: Path) -> list[str]:
    """The exact file set, as posix paths relative to ``project``: every ``*.py`` under the project
    (outside excluded dirs and dot-dirs, and not ignored by git), plus top-level ``pyproject.toml``,
    ``uv.lock`` and ``.python-version`` (always, even when git ignores them).

    Outside a git work tree the listing is kept per process while the stat stamps of every directory it
    walked hold (an added, removed or renamed entry changes its directory's stamp) and no ``.git`` appears
    in the project or a parent (:mod:`workrun.core.filestamps`, issue 14); inside one it is listed every time
    (what git ignores depends on more than the directories: its index, config and exclude files)."""
    root = os.path.abspath(project)
    probes = [os.path.join(folder, ".git") for folder in _ancestors(real_path(root))]
    before = time.time_ns()
    probe_stamps = [stamp(p) for p in probes]
    if any(s is not None for s in probe_stamps):  # a .git in the project or a parent: git says what is ignored
        return _list_files(project, root, None)
    with _LISTED_LOCK:
        hit = _LISTED.get(root)
    if hit is not None and tuple(stamp(p) for p in (*hit[0], *probes)) == hit[1]:
        return list(hit[2])
    walked: list[tuple[str, Stamp]] = []
    files = _list_files(project, root, walked)
    stamps = (*(s for _, s in walked), *probe_stamps)
    if settled(stamps, before) and all(s is not None for _, s in walked):  # None: a symlink was met
        with _LISTED_LOCK:
            if len(_LISTED) >= 256:
                _LISTED.pop(next(iter(_LISTED)))
            _LISTED[root] = ([d for d, _ in walked], stamps, tuple(files))
    return files


_LISTED: dict[str, tuple[list[str], tuple[Stamp, ...], tuple[str, ...]]] = {}  # root -> (dirs, stamps, files)
_LISTED_LOCK = threading.Lock()


def _ancestors(path: str) -> list[str]:
    out = [path]
    while (parent := os.path.dirname(out[-1])) != out[-1]:
        out.append(parent)
    return out


def _list_files(project: Path, root: str, walked: list[tuple[str, Stamp]] | None) -> list[str]:
    """List the file set (see :func:`_fingerprinted_files`); each directory's stamp, taken before it is
    read, goes into ``walked`` (None: inside a git work tree, where git decides what is ignored), and a
    ``(path, None)`` for each symlink met: what a link points to can change (a directory becoming a file)
    without any walked directory changing, so such a listing is never kept."""
    found = [name for name in FINGERPRINT_TOP_FILES if os.path.isfile(os.path.join(root, name))]
    if walked is not None:
        walked += [(name, None) for name in FINGERPRINT_TOP_FILES if os.path.islink(os.path.join(root, name))]
    sources: list[str] = []
    todo = [(root, "")]
    while todo:
        folder, prefix = todo.pop()
        if walked is not None:
            walked.append((folder, stamp(folder)))
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        subdirs = []
        for entry in entries:
            try:
                is_dir = entry.is_dir()  # as os.walk: a symlink to a directory is a directory, never walked into
                link = entry.is_symlink()
                walk_into = is_dir and not link
            except OSError:
                continue
            if link and walked is not None:
                walked.append((entry.path, None))
            if is_dir:
                if walk_into and entry.name not in FINGERPRINT_EXCLUDED_DIRS and not entry.name.startswith("."):
                    subdirs.append(entry.name)
            elif entry.name.endswith(".py"):
                sources.append(prefix + entry.name)
        todo += [(os.path.join(folder, d), f"{prefix}{d}/") for d in sorted(subdirs, reverse=True)]
    ignored = _git_ignored(project, sources) if walked is None else set()
    return found + [rel for rel in sources if rel not in ignored]


_HASHES: StampedCache[str] = StampedCache(size=4096)


def _file_hash(path: str) -> str:
    """sha256 hex of one file, kept while its stat stamp holds (:mod:`workrun.core.filestamps`).

    Raises:
        OSError: the file cannot be read.
    """
    def read() -> str:
        with open(path, "rb") as fh:
            return sha256(fh.read()).hexdigest()

    return _HASHES.get(path, [path], read)


def fingerprint(project: Path) -> Fingerprint:
    """Compute the code fingerprint of an App project (R-J2).

    The file set is listed on every call; each file's hash is kept per process while its stat
    stamp holds, so an edited, added or removed file always changes the fingerprint.

    Returns:
        A :class:`Fingerprint` with per-file hashes so a change can be named (R-C8).
    """
    root = os.path.abspath(project)
    files: dict[str, str] = {}
    for rel in _fingerprinted_files(Path(root)):
        try:
            files[rel] = _file_hash(os.path.join(root, rel))
        except OSError:
            continue
    lines = "".join(f"{p}\0{h}\n" for p, h in sorted(files.items()))
    return Fingerprint(sha256(lines.encode()).hexdigest(), files)


def diff_fingerprints(old: dict[str, str], new: dict[str, str]) -> list[str]:
    """Describe what changed between two per-file hash maps, e.g. ``["main.py changed", "x.py added"]``."""
    out = [f"{p} changed" for p in sorted(old) if p in new and new[p] != old[p]]
    out += [f"{p} added" for p in sorted(new) if p not in old]
    out += [f"{p} removed" for p in sorted(old) if p not in new]
    return out
