"""Where Workrun keeps its data (R-J4): platformdirs' user data dir, or ``WORKRUN_HOME``.

The data directory is private (SPEC §17): created 0700, and once it is opened
this process's umask is 077, so everything Workrun (and the App processes it
starts) writes there is 0600 and every directory 0700. A data directory that
group or others can write to is refused, as ssh refuses such a ``~/.ssh``:
anyone could plant a journal row or a compensation in it.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from workrun.core import settings
from workrun.core.errors import ConfigError

__all__ = ["copy_file", "data_dir", "keep_copy", "path_problem", "private_umask", "real_path", "remove_tree",
           "user_umask"]

_O_PATH = getattr(os, "O_PATH", 0)

_USER_UMASK: int | None = None


def real_path(path: str | os.PathLike[str]) -> str:
    """``os.path.realpath(path)``, asked of the kernel where it can (Linux): the path opened with ``O_PATH``
    and its ``/proc/self/fd`` link read — three system calls whatever its depth, where ``realpath`` takes one
    ``lstat`` per component (it runs several times per call, issue 14). A path that cannot be opened so
    (missing, no permission, another platform) goes to ``os.path.realpath``.
    """
    if _O_PATH:
        try:
            fd = os.open(path, _O_PATH | os.O_CLOEXEC)
        except OSError:
            return os.path.realpath(path)
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            target = ""
        finally:
            os.close(fd)
        if target.startswith("/") and not target.endswith(" (deleted)"):
            return target
    return os.path.realpath(path)


def _refused(path: Path, from_env: bool, message: str, field: str = "WORKRUN_HOME") -> ConfigError:
    if from_env:
        return ConfigError(f"{path} {message}", field=field)
    return ConfigError(f"{message} (WORKRUN_HOME chooses another data directory)", file=str(path))


def _default_home() -> Path:
    """platformdirs' user data dir for Workrun (imported only when ``WORKRUN_HOME`` is not set: R-P3)."""
    import platformdirs

    return Path(platformdirs.user_data_dir("workrun", appauthor=False))


_NAME_MAX = 255  # bytes in one name of a path (Linux, macOS: ENAMETOOLONG beyond)
_PATH_MAX = 4095  # bytes in a whole path


def path_problem(path: str | os.PathLike[str]) -> str | None:
    """Why no system call would take ``path`` as a file's name, or None: a NUL character, a name in it longer
    than 255 bytes or the whole longer than 4095 (ENAMETOOLONG, which ``Path.is_file()`` raises instead of
    answering False). For paths a person wrote (a workflow file, a project): the caller reports the problem as
    a bad value of its field (exit 2) instead of an internal error."""
    written = os.fspath(path)
    if "\0" in written:
        return "a path cannot hold a NUL character"
    raw = os.fsencode(written)
    if len(raw) > _PATH_MAX:
        return f"{os.strerror(errno.ENAMETOOLONG)} (over {_PATH_MAX} bytes)"
    if any(len(name) > _NAME_MAX for name in raw.split(b"/")):
        return f"{os.strerror(errno.ENAMETOOLONG)} (a name over {_NAME_MAX} bytes)"
    return None


def existing_data_dir() -> Path | None:
    """The configured data directory when it already exists and passes every check of :func:`data_dir`
    (nothing is created), else None: for work done ahead of a command that will check it again (issue 14).
    Nothing of a data directory that group or others can write to may run, not even ahead of time."""
    try:
        home = settings.current().home
        path = home if home is not None else _default_home()
        return data_dir(write=True) if path.is_dir() else None
    except Exception:  # a bad setting or a refused directory: the command itself reports it (exit 2)
        return None


def check_data_dir() -> None:
    """Every check :func:`data_dir` makes of the configured data directory, creating nothing (``workrun check``,
    R-L1): a missing one is fine (``run`` creates it).

    Raises:
        ConfigError: as :func:`data_dir` (exit 2, naming ``WORKRUN_HOME`` or the path).
    """
    home = settings.current().home
    path = home if home is not None else _default_home()
    if path.exists() or path.is_symlink():
        data_dir(write=True)
        return
    parent = path.parent  # `run` would create it: the nearest folder that exists must let it
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise _refused(path, home is not None, f"cannot be created: {os.strerror(errno.ENOTDIR)}")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise _refused(path, home is not None, f"cannot be created: {os.strerror(errno.EACCES)}")
    try:  # a read-only file system (asked, not tried: check creates nothing, R-L1)
        read_only = bool(os.statvfs(parent).f_flag & os.ST_RDONLY)
    except OSError:
        read_only = False
    if read_only:
        raise _refused(path, home is not None, f"cannot be created: {os.strerror(errno.EROFS)}")


def data_dir(*, write: bool = True, home: Path | str | None = None) -> Path:
    """Return the data directory, created 0700 if missing (R-J4, SPEC §17).

    Args:
        write: the command will write there; False for read commands, which may read a
            data directory they cannot write.
        home: the data directory to use instead of ``WORKRUN_HOME`` (``workrun.api``'s ``home=``, R-V2);
            checked the same way and named as ``home`` in errors.

    Raises:
        ConfigError: (exit 2, naming ``WORKRUN_HOME``, ``home`` or the path) a bad ``WORKRUN_HOME`` value, a path
            that is not a directory or cannot be created, a directory group or others can write to,
            or (``write``) one this user cannot write.
    """
    field = "WORKRUN_HOME" if home is None else "home"  # errors name what chose the directory
    if home is None:
        home = settings.current().home
    else:
        home = Path(home).expanduser().absolute()
    from_env = home is not None
    path = home if home is not None else _default_home()

    if not path.is_dir():
        if path.exists() or path.is_symlink():
            raise _refused(path, from_env, "is not a directory", field)
        try:
            path.mkdir(parents=True, mode=0o700)
            os.chmod(path, 0o700)  # mkdir's mode is masked by the umask
        except FileExistsError:
            if not path.is_dir():
                raise _refused(path, from_env, "is not a directory", field) from None
        except OSError as exc:
            raise _refused(path, from_env, f"cannot be created: {exc.strerror or exc}", field) from None
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        raise _refused(path, from_env, f"cannot be read: {exc.strerror or exc}", field) from None
    if mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise _refused(path, from_env, f"is writable by group or others (mode {stat.S_IMODE(mode):04o}): they "
                                       f"could plant journal rows or compensations; `chmod 700 {path}` first", field)
    if write and not os.access(path, os.W_OK | os.X_OK):
        raise _refused(path, from_env, "is not writable by this user", field)
    return path.resolve()


def private_umask() -> None:
    """Set this process's umask to 077 (files 0600, directories 0700), remembering the user's.

    Called once the data directory is opened, before any thread starts: App processes inherit it, so
    what they write in their call directories is private too. Processes that write into the user's own
    projects (``uv sync`` making ``.venv``) get :func:`user_umask` back.
    """
    global _USER_UMASK
    old = os.umask(0o077)
    if _USER_UMASK is None:
        _USER_UMASK = old


def user_umask() -> int:
    """The umask this process started with (before :func:`private_umask`)."""
    if _USER_UMASK is not None:
        return _USER_UMASK
    current = os.umask(0o022)
    os.umask(current)
    return current


def keep_copy(source: Path, folder: Path, name: str) -> Path:
    """Copy ``source`` into ``folder`` (in the data dir) as ``name``, private whatever the source's mode.

    The folder is created 0700 and the copy is 0600 (SPEC §17): only the contents are copied, never the
    source's permission bits.

    Returns:
        The path of the copy.

    Raises:
        OSError: the source cannot be read or the copy written.
    """
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(folder, 0o700)
    target = folder / name
    copy_file(source, target)
    os.chmod(target, 0o600)
    return target


def remove_tree(path: str | os.PathLike[str], *, ignore_errors: bool = True) -> None:
    """``shutil.rmtree(path, ignore_errors=...)``, with :mod:`shutil` imported only when there is a tree to remove:
    its compression modules cost every command's start-up ~3 ms (issue 33; R-P3), and a run removes no tree while
    its call directories are recycled. An empty directory (the last run's ``.trash``, usually) goes with one
    rmdir.

    Raises:
        OSError: the tree cannot be removed (only when ``ignore_errors`` is False).
    """
    try:
        os.rmdir(path)
        return
    except OSError:  # not empty, not a directory, gone: shutil decides, as before
        pass
    import shutil

    shutil.rmtree(path, ignore_errors=ignore_errors)


def copy_file(source: str | os.PathLike[str], target: str | os.PathLike[str]) -> None:
    """``shutil.copyfile(source, target)`` (contents only, no permission bits), :mod:`shutil` imported only then
    (see :func:`remove_tree`).

    Raises:
        OSError: the source cannot be read or the target written.
    """
    import shutil

    shutil.copyfile(source, target)
