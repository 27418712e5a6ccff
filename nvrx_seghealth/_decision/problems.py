"""What went wrong in the decision directory, told so that an operator knows what to do.

* :func:`write_problem` turns a failed write (:mod:`nvrx_seghealth._decision.boundedfs`) into one
  sentence: what is wrong, then the fix. It names the directory or the decision file,
  never the temporary file of the atomic write.
* :func:`permission_problems` says who, besides the directory's owner, can write in the
  decision directory or above it: anyone who can write there can exclude any unit, and
  without the sticky bit also delete or replace another account's decision. It judges
  the real directory (symlinks resolved) and the path as given (:func:`other_writers`).
* :func:`directory_writers` says who may replace one directory's entries; the walk of
  ``publish-drained --pid-file`` asks it of each folder on its way.
"""

from __future__ import annotations

import errno
import os
import pwd
import stat
from collections.abc import Callable, Container

from .boundedstat import stat_within
from .files import LockBusyError, StepError
from .helperprocess import HelperTimeout

__all__ = [
    "directory_writers",
    "hung_problem",
    "other_writers",
    "permission_problems",
    "write_problem",
]


def _account(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def _owner_and_mode(path: str, timeout: float) -> str:
    try:
        st = stat_within(path, timeout)
    except (OSError, ValueError):
        return ""
    return f" (owner {_account(st.st_uid)}, mode {stat.S_IMODE(st.st_mode):04o})"


def hung_problem(error: HelperTimeout, directory: str, timeout: float, *, wrote: bool) -> str:
    """One sentence for a call into ``directory`` that did not answer; ``wrote``: the call
    was a write, whose outcome is then unknown."""
    if error.earlier:
        return (
            f"{directory} is still not answering ({error}); nothing was sent: wait "
            "until the filesystem answers"
        )
    outcome = (
        "whether the decision was written is unknown; look with `nvrx-seghealth "
        f"status --dir {directory}` once it answers"
        if wrote
        else "nothing was changed"
    )
    return (
        f"{directory} did not answer within {timeout:g} s (a slow or hung shared filesystem?): "
        f"{outcome}, or give a longer --fs-timeout"
    )


def write_problem(error: BaseException, directory: str, path: str, timeout: float) -> str:
    """One sentence for a failed write of ``path`` in ``directory``: the problem, the fix."""
    if isinstance(error, HelperTimeout):
        return hung_problem(error, directory, timeout, wrote=True)
    if isinstance(error, LockBusyError):
        return (
            f"another writer has held {error.lock_path} for {error.waited:.1f} s; retry, "
            f"or find it with `fuser {error.lock_path}`"
        )
    if not isinstance(error, OSError):
        return str(error)
    step = error.step if isinstance(error, StepError) else "write"
    code = error.errno
    in_directory = step in ("lock", "create")
    if step == "lock" and code in (errno.ELOOP, errno.EINVAL, errno.EPERM):
        return str(error.strerror)  # a refused lock: what is wrong with it, and the fix
    if code == errno.ENOENT and in_directory:
        return (
            f"the decision directory {directory} does not exist: create it "
            f"(mkdir -p {directory}) or fix --dir"
        )
    if code == errno.ENOTDIR:
        return f"{directory} is not a directory: point --dir at the decision directory"
    if code in (errno.EACCES, errno.EPERM, errno.EROFS) and in_directory:
        if code == errno.EROFS:
            return (
                f"{directory} is on a read-only filesystem: write from a host that "
                "mounts it read-write"
            )
        return (
            f"{_account(os.geteuid())} cannot write in {directory}"
            f"{_owner_and_mode(directory, timeout)}: run as the directory's owner "
            "(the producer's account), or ask its owner to write the decision"
        )
    if code in (errno.EACCES, errno.EPERM) and step in ("rename", "remove"):
        return (
            f"{path} belongs to another account{_owner_and_mode(path, timeout)} and "
            f"{directory} has the sticky bit: only that account (or root) can replace "
            "or remove it"
        )
    if code == errno.EISDIR:
        return f"{path} is a directory, not a decision: remove it (rmdir {path}) and write again"
    if code in (errno.ENOSPC, errno.EDQUOT):
        return f"no space (or quota) left for {directory}: free some, then write again"
    name = errno.errorcode.get(code or 0, "error")
    return f"{step} of {path} failed: {name}: {error.strerror}"


def directory_writers(st: os.stat_result, owners: Container[int] | None) -> list[str]:
    """Who besides the owner of a directory of stat ``st`` may replace its entries: its
    group, every user, or nobody (also when the sticky bit is set); with ``owners``, its
    owner too when it is not one of them."""
    who = []
    if owners is not None and st.st_uid not in owners:
        who.append(f"its owner ({_account(st.st_uid)})")
    if not st.st_mode & stat.S_ISVTX:
        who += [
            name
            for name, bit in (("its group", stat.S_IWGRP), ("every user", stat.S_IWOTH))
            if st.st_mode & bit
        ]
    return who


def _ancestors(path: str) -> list[str]:
    """``path`` and every directory above it, nearest first (by name, no filesystem call)."""
    chain = [path]
    while os.path.dirname(chain[-1]) != chain[-1]:
        chain.append(os.path.dirname(chain[-1]))
    return chain


def other_writers(
    path: str, stat_path: Callable[[str], os.stat_result]
) -> list[tuple[str, os.stat_result, str]]:
    """The directories at or above ``path`` that others can change: each one's path,
    ``stat_path`` of it, and who (``its group and every user``).

    Others are the group and every user when the directory lacks the sticky bit
    (``/tmp``-style: each account may only replace its own entries). Both ways to ``path`` are
    judged: the real directory (:func:`os.path.realpath`) and those above it, and the
    directories of the path as given, through which it is reached (whoever can replace
    a symlink on that path can point it elsewhere). A directory is listed once, nearest
    first; one that ``stat_path`` cannot examine (``OSError``, ``ValueError``) is
    skipped. Resolving the symlinks is not time-bounded.
    """
    given = os.path.abspath(path)
    found = []
    seen: set[tuple[int, int]] = set()
    for current in [*_ancestors(os.path.realpath(given)), *_ancestors(given)[1:]]:
        try:
            st = stat_path(current)
        except (OSError, ValueError):
            continue
        if not stat.S_ISDIR(st.st_mode) or (st.st_dev, st.st_ino) in seen:
            continue
        seen.add((st.st_dev, st.st_ino))
        writers = directory_writers(st, None)
        if writers:
            found.append((current, st, " and ".join(writers)))
    return found


def permission_problems(directory: str, timeout: float) -> list[str]:
    """Who else can write in ``directory`` or in a directory above it, one line each.

    A directory writable by its group or by everyone is a problem unless it has the
    sticky bit (:func:`other_writers`, each stat bounded by ``timeout``), through the
    real directory and the path as given; when the two differ, each line says so. Each
    line ends with the fix. Directories that cannot be examined in time are skipped;
    the callers have listed or examined ``directory`` (bounded) just before.
    """
    given = os.path.abspath(directory)
    real = os.path.realpath(given)
    through = "" if real == given else f" (reached through the symlink {given})"
    problems = []
    for current, st, writers in other_writers(given, lambda path: stat_within(path, timeout)):
        owner = f"owner {_account(st.st_uid)}, mode {stat.S_IMODE(st.st_mode):04o}"
        if current == real:
            problems.append(
                f"decision directory {current}{through} ({owner}) is writable by {writers} "
                "without the sticky bit: any of them can exclude any unit or replace "
                f"another's decision; chmod 0755 {current} (only its owner, the producer's "
                "account, writes) or chmod 1777 (each account replaces only its own)"
            )
        else:
            which = f" {real}{through}" if through else ""
            problems.append(
                f"{current}, above the decision directory{which} ({owner}), is writable by "
                f"{writers} without the sticky bit: any of them can rename the decision "
                "directory away and put another in its place; chmod o-w,g-w "
                f"{current} or chmod +t {current}"
            )
    return problems
