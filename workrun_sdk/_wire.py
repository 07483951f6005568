"""The runner <-> App file protocol, version 1.

The runner creates one *call directory* per process it starts and names it in
the environment variable ``WORKRUN_CALL_DIR``. Nothing travels over stdout,
which belongs to the App. Files in the call directory:

- ``input.json`` (runner -> App): ``{"v": 1, "kind": "process"|"compensation"|"tool",
  "input": {...}, "context": {...} | null, "tool": name | null, "operation_id": id}``
  (``operation_id`` only for a call of a run or a standalone call)
- ``result.json`` (App -> runner): ``{"v": 1, "result": {...}}``
- ``resources.json`` (App -> runner): ``{"v": 1, "resources": [{"kind", "id", ...}]}``
- ``dependencies.json`` (App -> runner): ``{"v": 1, "depends_on": [operation_id, ...]}``,
  earlier calls this one depends on (``process.depends_on``; for compensation order)
- ``claim`` : created exclusively by whoever gets there first, the launcher
  (``started <pid> <start time>``) or the runner's recovery (``abandoned``). It fences a
  call that the runner may have died before starting.
- ``exit.json`` (launcher -> runner): ``{"v": 1, "exit_code": int | null, "signal": int | null}``
  written when the App's code returns or raises (``exit_code``) or is ended by a
  signal (``signal``, ``exit_code`` null), so the outcome survives the runner dying.
- ``ended`` (launcher -> runner): created once every process of the call has ended (after ``exit.json``).
  A forked supervisor also says so on the runner's *done* pipe, and a spawned one by exiting as its App did:
  the runner believes the file only then (an App can create one too), and reuses the call's files only then.
- ``stdout`` / ``stderr``: the App's output streams (the runner keeps their last 64 KiB).

``claim``, ``exit.json`` and ``ended`` are the launcher's: an App must not write them.

Every file the App or the supervisor writes is written atomically (temporary file, rename). ``input.json`` is
written in place: it is complete before the call is asked to start, and a call whose runner died while writing
it never starts (recovery fences it).
"""

from __future__ import annotations

import os

from workrun_sdk import _lightjson  # not json: ~8 ms of every spawned call's start-up

TYPE_CHECKING = False  # typing costs ~14 ms of every App call's start-up; annotations are strings
if TYPE_CHECKING:
    from typing import Any

# Light imports only (no pathlib, tempfile, dataclasses): every App call imports this module,
# and its start-up time is paid per call. Paths are str or os.PathLike.

__all__ = [
    "CALL_DIR_ENV",
    "VERSION",
    "call_dir",
    "read_envelope",
    "write_json_atomic",
    "claim",
    "loads_strict",
]

VERSION = 1
CALL_DIR_ENV = "WORKRUN_CALL_DIR"
ENDED = "ended"
"""File the supervisor creates in the call directory once every process of the call has ended (after
``exit.json``): only then may the runner reuse the call's files."""


def call_dir(function: str) -> str:
    """Return the call directory of this App process.

    Raises:
        NotInAppError: when the process was not started by the runner.
    """
    from workrun_sdk.errors import NotInAppError

    value = os.environ.get(CALL_DIR_ENV)
    if not value or not os.path.isfile(os.path.join(value, "input.json")):
        raise NotInAppError(function)
    return value


def write_json_atomic(path: str | os.PathLike[str], data: Any) -> None:
    """Write ``data`` as JSON to ``path`` atomically (tmp file, rename).

    Not fsynced: the file survives any process dying (the threat model of
    R-R4: the runner or the App killed); the rename makes a torn file impossible.

    Raises:
        TypeError: when ``data`` is not JSON-serialisable.
    """
    raw = _lightjson.dumps(data, ensure_ascii=False, allow_nan=False).encode("utf-8")
    path = os.fspath(path)
    head, name = os.path.split(path)
    tmp = os.path.join(head, f".{name}.{os.getpid()}.{id(data):x}.tmp")
    try:  # plain descriptors: no buffered text file to build on every call (issue 33)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o666)
        try:
            write_fully(fd, raw)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def open_empty(path: str | os.PathLike[str]) -> int:
    """Open ``path`` write-only at offset 0, created (mode 0o600) or emptied, and return the descriptor. An
    existing file is truncated only when it holds data: truncating an empty file is not free on ext4 (its next
    data is written out as soon as it is closed, ``auto_da_alloc``, and emptying it again then frees disk
    blocks: ~0.3 ms each time where the disk is mounted with ``discard``, issue 14).

    Raises:
        OSError: the file cannot be opened or emptied (nothing is left open then).
    """
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        if os.fstat(fd).st_size:
            os.ftruncate(fd, 0)
    except BaseException:
        os.close(fd)
        raise
    return fd


def write_fully(fd: int, data: bytes) -> None:
    """Write all of ``data`` to ``fd`` (a pipe or a file), however many writes that takes.

    Raises:
        OSError: a write failed (a pipe whose reader is gone: ``BrokenPipeError``); part of ``data`` may be written.
    """
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


MAX_DEPTH = 200
"""The deepest nesting of arrays and objects :func:`loads_strict` takes (a value read back deeper in a call stack
must still fit Python's recursion limit)."""


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"{text} is too large for a JSON number")
    return value


_STRICT = _lightjson.Reader(parse_float=_finite, parse_constant=_no_constant)


def loads_strict(text: str | bytes) -> Any:
    """``json.loads`` of JSON any reader takes, so that no value read here can break a journal write, a ``--json``
    document or an API answer later: refused are ``NaN``, ``Infinity`` and ``-Infinity`` (Python's json reads
    and writes them; no other JSON reader does), a number too large for a float (``1e999`` would become
    ``Infinity``), a lone surrogate (``"\\udc80"``: no UTF-8 for it), and nesting deeper than
    :data:`MAX_DEPTH`.

    Raises:
        ValueError: ``text`` is not such JSON (``json.JSONDecodeError`` is a ValueError too).
    """
    try:
        value = _STRICT.loads(text)
    except RecursionError:
        raise ValueError(f"nested more than {MAX_DEPTH} deep") from None
    todo = [(value, 1)]
    while todo:
        item, depth = todo.pop()
        if isinstance(item, (dict, list)):
            if depth > MAX_DEPTH:
                raise ValueError(f"nested more than {MAX_DEPTH} deep")
            todo.extend((v, depth + 1) for v in (item.values() if isinstance(item, dict) else item)
                        if isinstance(v, (dict, list)))
    raw = text if isinstance(text, str) else text.decode("utf-8", "replace")
    if "\\ud" in raw or "\\uD" in raw:  # an escaped surrogate: only a pair of them is a character
        try:
            _lightjson.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError("a lone surrogate (\\ud800-\\udfff without its pair) is no character") from None
    return value


def read_envelope(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a versioned envelope written by the other side.

    Raises:
        SDKError: when the file is missing, not JSON, or of another version.
    """
    from workrun_sdk.errors import SDKError

    try:
        data = loads_strict(read_bytes(path).decode("utf-8"))
    except (OSError, ValueError) as exc:
        raise SDKError(f"{path}: cannot read call file: {exc}") from None
    if not isinstance(data, dict) or data.get("v") != VERSION:
        raise SDKError(f"{path}: envelope version {data.get('v') if isinstance(data, dict) else '?'} "
                       f"is not {VERSION}; the runner and SDK versions differ")
    return data


def start_time(pid: int) -> str | None:
    """A process's start time (``/proc/PID/stat`` field 22, clock ticks since boot) that tells a reused pid
    apart, or None where there is no ``/proc``."""
    try:
        return read_bytes(f"/proc/{pid}/stat").decode(errors="replace").rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def read_bytes(path: str | os.PathLike[str]) -> bytes:
    """The whole file at ``path``, read through a plain descriptor (no buffered file object: this runs a few
    times on every call, issue 33).

    Raises:
        OSError: the file cannot be opened or read.
    """
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks: list[bytes] = []
        while True:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    finally:
        os.close(fd)


def claim(directory: str | os.PathLike[str], text: str) -> bool:
    """Create ``directory/claim`` exclusively with ``text``; True when this caller won."""
    try:
        fd = os.open(os.path.join(directory, "claim"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    try:
        write_fully(fd, text.encode())
    finally:
        os.close(fd)
    return True
