"""The folder of ``publish-drained --pid-file``, reached only through root's and this account's.

A root-run trigger trusts the pid file it finds. So no other account may choose the folder
the file is made in, nor put another in its place. The rules (:func:`open_folder`):

- The walk starts at ``/`` and opens one name at a time, in the folder opened before, as a
  path only (``O_PATH | O_NOFOLLOW``): searching a folder needs no right to read it.
- A symlink on the way is followed only when root or this account owns it, 40 at most.
- Each folder whose entries the walk uses may be changed by root or this account only;
  by others too with the sticky bit (:func:`~.._decision.problems.directory_writers`).
- The file's own folder may be written by root or this account only, sticky or not.
- Each refusal is a :class:`~.._errors.ConfigurationError` that names the pid file and
  the fix.

The checks are made on the descriptors the walk holds, so nothing is renamed in between.
"""

from __future__ import annotations

import errno
import os
import stat
from collections import deque

from .._decision.problems import directory_writers
from .._errors import ConfigurationError

__all__ = ["open_folder"]

#: Symbolic links followed at most on the way to the folder (the kernel's own limit).
_LINKS = 40
_FOLDER_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def open_folder(path: str) -> int:
    """Open the folder of the pid file ``path`` (absolute) by the walk of the module doc;
    the caller closes the descriptor, and makes every call on the file in it.

    Raises:
        ConfigurationError: a folder is missing or cannot be searched, a symlink on the
            way is another account's, or a folder is refused.
    """
    names = deque(os.path.dirname(path).split("/"))
    fd, where, links = os.open("/", _FOLDER_FLAGS), "/", 0
    try:
        while names:
            name = names.popleft()
            if name in ("", "."):
                continue
            if name != "..":  # its entries could be changed: a parent's cannot
                _check_above(path, where, os.fstat(fd))
            try:
                child = os.open(name, _FOLDER_FLAGS, dir_fd=fd)
            except OSError as error:
                target = _link(path, fd, os.path.join(where, name), name, error)
                links += 1
                if links > _LINKS:
                    raise _unusable(path, os.strerror(errno.ELOOP)) from None
                names.extendleft(reversed(target.split("/")))
                if target.startswith("/"):
                    os.close(fd)
                    fd, where = os.open("/", _FOLDER_FLAGS), "/"
                continue
            os.close(fd)
            fd, where = child, os.path.normpath(os.path.join(where, name))
        _check_folder(path, where, os.fstat(fd))
    except BaseException:
        os.close(fd)
        raise
    return fd


def _refused(path: str, problem: str) -> ConfigurationError:
    return ConfigurationError(f"--pid-file {path} {problem}", setting="--pid-file")


def _link(path: str, fd: int, where: str, name: str, error: OSError) -> str:
    """The target of ``name`` (at ``where``), in the folder open on ``fd``, which could
    not be opened as a folder (``error``): a symlink of root or this account.

    Raises:
        ConfigurationError: it is missing, not a folder, or another account's symlink.
    """
    try:
        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        if not stat.S_ISLNK(st.st_mode):
            raise error
        if st.st_uid not in (os.geteuid(), 0):
            raise _refused(
                path,
                f"is reached through {where}, a symbolic link of uid {st.st_uid}: whoever "
                "owns the link chooses the folder; give the real folder's path",
            )
        return os.readlink(name, dir_fd=fd)
    except OSError as failed:
        raise _unusable(path, failed.strerror or str(failed)) from None


def _unusable(path: str, why: str) -> ConfigurationError:
    folder = os.path.dirname(path)
    return _refused(
        path,
        f"cannot be written: its folder {folder} cannot be used ({why}); create it, "
        f"writable by this account only (install -d -m 0755 {folder})",
    )


def _check_above(path: str, where: str, st: os.stat_result) -> None:
    """Refuse a folder on the way, ``where`` (of stat ``st``), whose entries another
    account can replace: its owner, or its group or everyone without the sticky bit."""
    who = directory_writers(st, (os.geteuid(), 0))
    if who:
        raise _refused(
            path,
            f"is below {where} (mode {stat.S_IMODE(st.st_mode):04o}), which "
            f"{' and '.join(who)} can change: another account could put a folder or link "
            "of its own on the way; use a folder whose parents only root or this account "
            "can write (e.g. /run/nvrx-seghealth)",
        )


def _check_folder(path: str, folder: str, st: os.stat_result) -> None:
    """Refuse the file's folder ``folder`` (of stat ``st``) when another account can
    write in it, sticky or not."""
    writers = [who for who, bit in (("its group", 0o020), ("everyone", 0o002)) if st.st_mode & bit]
    if st.st_uid not in (os.geteuid(), 0):
        writers.insert(0, f"its owner (uid {st.st_uid})")
    if writers:
        raise _refused(
            path,
            f"is in {folder} (mode {stat.S_IMODE(st.st_mode):04o}), which "
            f"{' and '.join(writers)} can write: another account could plant or replace the "
            "file that a Slurm trigger trusts; use a folder that only this account can "
            "write (e.g. install -d -m 0755 -o ACCOUNT /run/nvrx-seghealth)",
        )
