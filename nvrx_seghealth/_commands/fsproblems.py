"""What went wrong in the decision directory, told so that an operator knows what to do.

* :func:`write_problem` turns a failed write (:mod:`nvrx_seghealth._boundedfs`) into one
  sentence: what is wrong, then the fix. It names the directory or the decision file,
  never the temporary file of the atomic write.
* :func:`permission_problems` says who, besides the directory's owner, can write in the
  decision directory or above it: anyone who can write there can exclude any unit, and
  without the sticky bit also delete or replace another account's decision.

Standard library only.
"""

from __future__ import annotations

import errno
import os
import pwd
import stat

from .._boundedfs import FilesystemTimeout
from .._boundedstat import stat_within
from .._decisionfs import LockBusyError, StepError

__all__ = ["hung_problem", "permission_problems", "write_problem"]


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


def hung_problem(error: FilesystemTimeout, directory: str, timeout: float, *, wrote: bool) -> str:
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
        f"{directory} did not answer within {timeout:g} s (a hung shared filesystem?): "
        f"{outcome}, or give a longer --fs-timeout"
    )


def write_problem(error: BaseException, directory: str, path: str, timeout: float) -> str:
    """One sentence for a failed write of ``path`` in ``directory``: the problem, the fix."""
    if isinstance(error, FilesystemTimeout):
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


def permission_problems(directory: str, timeout: float) -> list[str]:
    """Who else can write in ``directory`` or in a directory above it, one line each.

    A directory writable by its group or by everyone is a problem unless it has the
    sticky bit (``/tmp``-style: each account may only replace its own files). Each line
    ends with the fix. Directories that cannot be examined in time are skipped.
    """
    problems = []
    current = os.path.abspath(directory)
    while True:
        try:
            st = stat_within(current, timeout)
        except (OSError, ValueError):
            st = None
        if st is not None and stat.S_ISDIR(st.st_mode):
            mode = stat.S_IMODE(st.st_mode)
            writers = [
                who
                for who, bit in (("its group", stat.S_IWGRP), ("every user", stat.S_IWOTH))
                if mode & bit
            ]
            if writers and not mode & stat.S_ISVTX:
                if current == os.path.abspath(directory):
                    problems.append(
                        f"decision directory {current} (owner {_account(st.st_uid)}, mode "
                        f"{mode:04o}) is writable by {' and '.join(writers)} without the "
                        "sticky bit: any of them can exclude any unit or replace another's "
                        f"decision; chmod 0755 {current} (only its owner, the producer's "
                        "account, writes) or chmod 1777 (each account replaces only its own)"
                    )
                else:
                    problems.append(
                        f"{current}, above the decision directory (owner "
                        f"{_account(st.st_uid)}, mode {mode:04o}), is writable by "
                        f"{' and '.join(writers)} without the sticky bit: any of them can "
                        f"rename the decision directory away and put another in its place; "
                        f"chmod o-w,g-w {current} or chmod +t {current}"
                    )
        parent = os.path.dirname(current)
        if parent == current:
            return problems
        current = parent
