"""Writing decision files without losing another writer's decision, on hostile ground.

The producer side of the decision file, as file operations: :func:`read_current`,
:func:`replace`, :func:`list_names` and :func:`append_text`. The rules:

- A write goes to a temporary file in the same directory, is synced, then renamed over
  the decision.
- A write lands only if the path still holds what the caller read (``expect``).
- Every writer holds the directory's ``flock`` on :data:`LOCK_NAME` around its read,
  compare and rename.
- Without ``flock``, writes still compare, and warn that they are not serialised.
- Every file opened here goes through :func:`open_regular`: a symlink, a FIFO or a device
  is refused at once, never opened.
- A lock file that others can open is replaced; one held through the lock wait is refused.
- Root's lock in another account's directory is given to that account, which writes there.
- Only this account's stale temporary files are removed, under the lock.
- A failed directory sync after the rename is a warning: the new decision is in place.

docs/cluster.md, "Who may write decisions", tells why each rule is there.

This module imports only the standard library, nothing from the package. The operators'
helper process runs it by path (:mod:`.boundedfs`) and serves JSON requests, one per line.
So it is one module, over the package's 400 lines: the operations and their wire format
cannot be split into modules that import each other.
"""

from __future__ import annotations

import base64
import errno
import fcntl
import json
import os
import re
import stat
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "LOCK_NAME",
    "READ_LIMIT",
    "STALE_TEMPORARY_AGE",
    "Current",
    "LockBusyError",
    "NotRegularError",
    "Result",
    "StepError",
    "append_text",
    "list_names",
    "not_own_file",
    "open_regular",
    "read_current",
    "replace",
]

_DECISION_PREFIX = "segment_health_check."
#: The lock file every writer of this package flocks in the decision directory.
LOCK_NAME = f".{_DECISION_PREFIX}lock"
#: Bytes read at most from one decision.
READ_LIMIT = 64 * 1024
#: Seconds since its last modification after which a decision's temporary file, of this
#: process's uid, is a dead writer's and is removed by the next writer holding the lock.
#: The lock alone already keeps live writers' files out; the age also spares a file of a
#: writer on a client whose lock the others do not see (a lost NFS lock, a Lustre client
#: mounted with ``-o localflock``) unless it has made no progress for ten minutes.
STALE_TEMPORARY_AGE = 600.0

_TEMPORARY_SUFFIX = ".tmp"
#: A decision's (or the lock's) temporary file, as :func:`_write` names it (mkstemp's
#: random part).
_DECISION_TEMPORARY = re.compile(
    rf"\.{re.escape(_DECISION_PREFIX)}(?:[0-9]+\.[0-9]+|lock)\.[a-z0-9_]+"
    rf"{re.escape(_TEMPORARY_SUFFIX)}"
)
#: Added to every open in the decision directory (:func:`open_regular`).
_HOSTILE_OPEN = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
#: Attempts of :func:`open_regular` when the path is replaced between lstat and open.
_OPEN_ATTEMPTS = 3

_UNSUPPORTED_LOCK = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL, errno.EBADF}
#: What a path that is not a regular file is, by ``stat`` mode test (also the consumer's
#: words for it, :func:`nvrx_seghealth._decision.decision_file.judge`, whose ``stat``
#: follows symlinks).
FILE_TYPES = (
    (stat.S_ISLNK, "symbolic link"),
    (stat.S_ISDIR, "directory"),
    (stat.S_ISFIFO, "FIFO"),
    (stat.S_ISSOCK, "socket"),
    (stat.S_ISCHR, "character device"),
    (stat.S_ISBLK, "block device"),
)


class StepError(OSError):
    """A filesystem call of a write failed; ``step`` names it.

    Steps: ``lock`` (open the lock file), ``create`` (the temporary file), ``write``,
    ``rename`` (over the decision), ``remove``. A lock this module refuses is step
    ``lock`` with ``ELOOP`` or ``EINVAL`` (not a regular file) or ``EPERM`` (held, and
    others can open it: :func:`_lock`); its ``strerror`` says what is wrong and the fix.
    """

    def __init__(self, step: str, error: OSError) -> None:
        super().__init__(error.errno, error.strerror, error.filename)
        self.step = step


class NotRegularError(OSError):
    """``filename`` is not a regular file and was refused (:func:`open_regular`).

    ``errno`` is ``ELOOP`` for a symbolic link (what ``O_NOFOLLOW`` answers), ``EINVAL``
    for anything else; ``strerror`` is ``not a regular file: <kind>``; ``kind`` is one of
    :data:`FILE_TYPES`' words, or ``special file``.
    """

    def __init__(self, path: str, kind: str) -> None:
        code = errno.ELOOP if kind == "symbolic link" else errno.EINVAL
        super().__init__(code, f"not a regular file: {kind}", path)
        self.kind = kind


class LockBusyError(TimeoutError):
    """Another writer held :data:`LOCK_NAME` for longer than the wait allowed."""

    def __init__(self, lock_path: str, waited: float) -> None:
        super().__init__(f"{lock_path} held by another writer for {waited:.1f} s")
        self.lock_path = lock_path
        self.waited = waited


@dataclass(frozen=True)
class Current:
    """What a decision path holds.

    Attributes:
        kind: ``absent``, ``content`` or ``unreadable``.
        data: the first :data:`READ_LIMIT` bytes (``content`` only).
        size: the file size (``content`` only).
        error: why it cannot be read (``unreadable`` only), e.g. ``EACCES: Permission
            denied`` or ``not a regular file: FIFO``.
        uid: the owner of the very file read (``content`` only), from the ``fstat`` of
            its descriptor; not compared: two reads of the same bytes are equal.
        nlink: its number of names (hard links), the same way (``content`` only).
    """

    kind: str
    data: bytes = b""
    size: int = 0
    error: str = ""
    uid: int | None = field(default=None, compare=False)
    nlink: int | None = field(default=None, compare=False)

    @property
    def empty(self) -> bool:
        """Absent or a zero-byte file: a decision that says *healthy*."""
        return self.kind == "absent" or (self.kind == "content" and self.size == 0)

    def to_wire(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "data": base64.b64encode(self.data).decode(),
            "size": self.size,
            "error": self.error,
            "uid": self.uid,
            "nlink": self.nlink,
        }

    @classmethod
    def from_wire(cls, wire: dict[str, Any]) -> Current:
        data = base64.b64decode(wire["data"])
        return cls(wire["kind"], data, wire["size"], wire["error"], wire["uid"], wire["nlink"])


@dataclass(frozen=True)
class Result:
    """The outcome of :func:`replace`.

    Attributes:
        status: ``done``; ``unchanged`` (the path no longer held ``expect`` but
            already held what was to be written; nothing was written); or ``conflict``
            (the path no longer held ``expect``, nor that; nothing was written).
        before: what the path held when the lock was taken.
        warnings: problems that did not stop the write (directory sync, no lock, a
            stale temporary file that could not be removed).
    """

    status: str
    before: Current
    warnings: list[str] = field(default_factory=list)

    def to_wire(self) -> dict[str, Any]:
        return {"status": self.status, "before": self.before.to_wire(), "warnings": self.warnings}

    @classmethod
    def from_wire(cls, wire: dict[str, Any]) -> Result:
        return cls(wire["status"], Current.from_wire(wire["before"]), list(wire["warnings"]))


def _describe(error: OSError) -> str:
    return f"{errno.errorcode.get(error.errno or 0, 'error')}: {error.strerror}"


def _require_regular(path: str, mode: int) -> None:
    if not stat.S_ISREG(mode):
        kind = next((name for test, name in FILE_TYPES if test(mode)), "special file")
        raise NotRegularError(path, kind)


def open_regular(
    path: str, flags: int, mode: int = 0o644, *, dir_fd: int | None = None
) -> tuple[int, os.stat_result]:
    """Open the regular file ``path``; never follow a symlink nor open anything else.

    ``lstat`` first: an existing path that is not a regular file is refused before any
    ``open``. Then ``open(path, flags | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC,
    mode)`` and ``fstat``: the descriptor must be a regular file and, when the ``lstat``
    found one, the same ``(st_dev, st_ino)``; a path replaced in between is looked at
    again (up to three times). ``O_CREAT`` in ``flags`` creates a missing file. With
    ``dir_fd``, ``path`` is a name in the directory open on it (as :func:`os.open`).

    Returns:
        The descriptor (the caller closes it) and its ``fstat``.

    Raises:
        NotRegularError: the path is (or became) a symlink, FIFO, directory, device...
        FileNotFoundError: the path is missing and ``flags`` has no ``O_CREAT``.
        OSError: ``lstat``, ``open`` or ``fstat`` failed otherwise; ``EAGAIN``: the path
            was replaced at every attempt.
    """
    for _ in range(_OPEN_ATTEMPTS):
        try:
            seen: os.stat_result | None = os.stat(path, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            if not flags & os.O_CREAT:
                raise
            seen = None
        if seen is not None:
            _require_regular(path, seen.st_mode)
        try:
            fd = os.open(path, flags | _HOSTILE_OPEN, mode, dir_fd=dir_fd)
        except OSError as error:
            if error.errno == errno.ELOOP:  # a symlink put there since the lstat
                raise NotRegularError(path, "symbolic link") from None
            raise
        try:
            st = os.fstat(fd)
            _require_regular(path, st.st_mode)
        except BaseException:
            os.close(fd)
            raise
        if seen is None or (st.st_dev, st.st_ino) == (seen.st_dev, seen.st_ino):
            return fd, st
        os.close(fd)
    raise OSError(errno.EAGAIN, f"replaced at each of {_OPEN_ATTEMPTS} attempts to open it", path)


def read_current(path: str, limit: int = READ_LIMIT) -> Current:
    """Read what ``path`` holds, at most ``limit`` bytes; never follows a symlink.

    Opened by :func:`open_regular` (``O_RDONLY``): a symlink, FIFO, directory or device
    node at ``path`` is ``unreadable`` with the error ``not a regular file: <kind>``
    (e.g. ``symbolic link``) and is never opened, so its target is not read and nothing
    blocks. Any other failure is ``unreadable`` with the errno's name and text.
    """
    try:
        fd, st = open_regular(path, os.O_RDONLY)
    except FileNotFoundError:
        return Current("absent")
    except NotRegularError as error:
        return Current("unreadable", error=error.strerror or "")
    except OSError as error:
        return Current("unreadable", error=_describe(error))
    try:
        chunks, left = [], limit
        while left > 0:
            chunk = os.read(fd, left)
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        return Current("content", data, st.st_size, uid=st.st_uid, nlink=st.st_nlink)
    except OSError as error:
        return Current("unreadable", error=_describe(error))
    finally:
        os.close(fd)


def _lock_mode(directory: os.stat_result) -> int:
    """The mode of a new lock file in ``directory``: only the accounts that can write
    there can open it (a read-only descriptor is enough for ``flock``)."""
    if directory.st_mode & stat.S_IWOTH:
        return 0o644  # every account writes here, so every account must be able to lock
    if directory.st_mode & stat.S_IWGRP:
        return 0o660  # with the directory's group (:func:`_restrict_lock`)
    return 0o600


def _restrict_lock(fd: int, directory: os.stat_result) -> None:
    """Give the new lock file open on ``fd`` its :func:`_lock_mode`, on the descriptor.

    Root gives it to the directory's owner (:func:`_give_to_owner`). For a group's
    directory the file takes the directory's group; a writer that cannot give it that
    group makes it 0600 instead (no other account can open it then)."""
    _give_to_owner(fd, os.fstat(fd), directory)
    mode = _lock_mode(directory)
    if mode == 0o660 and os.fstat(fd).st_gid != directory.st_gid:
        try:
            os.fchown(fd, -1, directory.st_gid)
        except OSError:
            mode = 0o600
    os.fchmod(fd, mode)


def _give_to_owner(fd: int, lock: os.stat_result, directory: os.stat_result) -> None:
    """As root, give root's lock file open on ``fd`` (of stat ``lock``) to the owner and
    group of another account's ``directory``: made 0600 by root, it would shut that
    account, the producer's, out of every write.

    Only a file with one name: a hard link put there could be any file of root's. Where
    the filesystem refuses the change, the lock stays as it is."""
    if os.geteuid() != 0 or directory.st_uid == 0 or lock.st_uid != 0 or lock.st_nlink != 1:
        return
    try:
        os.fchown(fd, directory.st_uid, directory.st_gid)
    except OSError:
        pass  # a filesystem without owners; a squashed root made no file of root's


def _exposure(lock: os.stat_result, directory: os.stat_result) -> str | None:
    """Who can open the lock file ``lock``, and so hold it, without the right to write in
    its ``directory``; ``None``: no one.

    In a directory every account can write (``1777``) no one is: each writer can block
    the others anyway (docs/cluster.md). The accounts that can reach the file are
    judged by the directory's search bits; the directories above it are not looked at.
    """
    mode = directory.st_mode
    if mode & stat.S_IWOTH:
        return None
    who = []
    if lock.st_uid not in (0, directory.st_uid) and not mode & stat.S_IWGRP:
        who.append(f"its owner (uid {lock.st_uid})")
    group_writes = mode & stat.S_IWGRP and lock.st_gid == directory.st_gid
    if lock.st_mode & 0o060 and mode & (stat.S_IXGRP | stat.S_IXOTH) and not group_writes:
        who.append(f"its group (gid {lock.st_gid})")
    if lock.st_mode & 0o006 and mode & stat.S_IXOTH:
        who.append("every user")
    if not who:
        return None
    return (
        f"{' and '.join(who)} can open it (owner uid {lock.st_uid}, mode "
        f"{stat.S_IMODE(lock.st_mode):04o}) without the right to write in the directory"
    )


def _open_lock(lock_path: str, directory: os.stat_result) -> int:
    """Open the regular file :data:`LOCK_NAME`, read-write or, when it is another
    account's (a sticky directory), read-only; a missing one is created with
    :func:`_lock_mode` (``O_EXCL``: a file put there meanwhile is opened instead).

    Raises:
        StepError: step ``lock``; for a lock that is not a regular file, or that this
            account cannot open (``EPERM``), the message says what is there and the fix.
    """
    try:
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_EXCL | _HOSTILE_OPEN, 0o600)
        except FileExistsError:
            try:
                fd, _ = open_regular(lock_path, os.O_RDWR)
            except PermissionError:
                try:
                    fd, _ = open_regular(lock_path, os.O_RDONLY)
                except PermissionError:
                    raise StepError("lock", _closed_lock(lock_path)) from None
        else:
            try:
                _restrict_lock(fd, directory)
            except BaseException:
                os.close(fd)
                raise
    except NotRegularError as error:
        refusal = OSError(
            error.errno,
            f"{lock_path} is a {error.kind}, not a regular file: remove it; the next write "
            "creates the lock as a regular file",
            lock_path,
        )
        raise StepError("lock", refusal) from None
    except StepError:
        raise
    except OSError as error:
        raise StepError("lock", error) from None
    return fd


def _closed_lock(lock_path: str) -> OSError:
    """The refusal of a lock that this account, a writer of the directory, cannot open
    (e.g. one made 0600 before the directory was opened to others)."""
    try:
        st = os.lstat(lock_path)
        what = f"owner uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):04o}"
    except OSError as error:
        what = _describe(error)
    return OSError(
        errno.EPERM,
        f"{lock_path} ({what}) cannot be opened by this account: remove it (as its owner or "
        "root); the next write creates one that every writer of the directory can open",
        lock_path,
    )


def _flock(fd: int, lock_path: str, started: float, wait: float) -> str | None:
    """``flock`` ``fd``, waiting until ``wait`` seconds after ``started``; a warning when
    ``flock`` is unsupported (then unlocked).

    Raises:
        LockBusyError: another process held it all that time.
        StepError: step ``lock``: ``flock`` failed otherwise.
    """
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return None
        except BlockingIOError:
            waited = time.monotonic() - started
            if waited >= wait:
                raise LockBusyError(lock_path, waited) from None
            time.sleep(0.01)
        except OSError as error:
            if error.errno not in _UNSUPPORTED_LOCK:
                raise StepError("lock", error) from None
            return (
                f"{lock_path} cannot be locked ({_describe(error)}): concurrent "
                "writers are not serialised on this filesystem"
            )


def _lock(directory: str, wait: float) -> tuple[int, str | None]:
    """Open and flock :data:`LOCK_NAME`, waiting at most ``wait`` seconds for another
    writer; return the fd and a warning (``flock`` unsupported: then unlocked; or a lock
    that could not be made safe).

    Only the directory's writers can open a lock this module creates
    (:func:`_lock_mode`). A lock that others can open (:func:`_exposure`; one made 0644
    by an earlier release) is replaced, while held, by a new one that they cannot: a
    process that opened the old file keeps only a lock that no writer takes any more.
    So after taking the lock a writer checks that the name still holds the file it
    locked, and locks the new one when it does not.

    Raises:
        LockBusyError: another writer held the lock for ``wait`` seconds.
        StepError: step ``lock``; also when the lock that was held that long can be
            opened by accounts that cannot write in the directory (the message says who,
            and to remove it).
    """
    lock_path = os.path.join(directory, LOCK_NAME)
    try:
        place = os.stat(directory)
    except OSError as error:
        raise StepError("lock", error) from None
    started = time.monotonic()
    for _ in range(_OPEN_ATTEMPTS):
        fd = _open_lock(lock_path, place)
        try:
            try:
                warning = _flock(fd, lock_path, started, wait)
            except LockBusyError as busy:
                exposure = _exposure(os.fstat(fd), place)
                if exposure is None:
                    raise
                refusal = (
                    f"another process has held {lock_path} for {busy.waited:.1f} s, and "
                    f"{exposure} {directory}: any of them can block every write. Remove it "
                    "(as its owner or root): the next write creates one that only the "
                    "directory's writers can open"
                )
                raise StepError("lock", OSError(errno.EPERM, refusal, lock_path)) from None
            held = os.fstat(fd)
            if warning is None and _same_file(lock_path, held):
                _give_to_owner(fd, held, place)  # root's lock from an earlier release
                warning = _make_safe(lock_path, held, place)
            if warning is not None or _same_file(lock_path, held):
                return fd, warning
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)  # replaced, by this writer or another: lock the new file
    replaced = OSError(
        errno.EAGAIN, f"replaced at each of {_OPEN_ATTEMPTS} attempts to lock it", lock_path
    )
    raise StepError("lock", replaced)


def _same_file(path: str, st: os.stat_result) -> bool:
    """Whether ``path`` (not followed) is the file ``st`` describes."""
    try:
        now = os.lstat(path)
    except FileNotFoundError:
        return False
    except OSError as error:
        raise StepError("lock", error) from None
    return (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino)


def _make_safe(lock_path: str, held: os.stat_result, directory: os.stat_result) -> str | None:
    """Replace the held lock ``held`` when others can open it (:func:`_exposure`) by a
    new one with :func:`_lock_mode`; a warning when it cannot be replaced."""
    exposure = _exposure(held, directory)
    if exposure is None:
        return None
    try:
        _write(lock_path, b"", lambda fd: _restrict_lock(fd, directory))
    except StepError as error:
        return (
            f"{lock_path} stays: {exposure} {os.path.dirname(lock_path)}, so any of them can "
            f"block every write, and it cannot be replaced ({_describe(error)}): remove it "
            "as its owner or root"
        )
    return None


def _remove_stale_temporaries(directory: str) -> list[str]:
    """Remove the dead writers' temporary decisions in ``directory`` (the caller holds
    the lock); a warning for each that could not be removed or looked at."""
    warnings = []
    try:
        names = os.listdir(directory)
    except OSError as error:
        return [f"stale temporary files in {directory} not looked for ({_describe(error)})"]
    now, uid = time.time(), os.geteuid()
    for name in filter(_DECISION_TEMPORARY.fullmatch, names):
        path = os.path.join(directory, name)
        try:
            st = os.lstat(path)
            if (
                stat.S_ISREG(st.st_mode)
                and st.st_uid == uid
                and now - st.st_mtime > STALE_TEMPORARY_AGE
            ):
                os.unlink(path)
        except FileNotFoundError:
            pass
        except OSError as error:
            warnings.append(f"the stale temporary file {path} stays ({_describe(error)})")
    return warnings


def _sync_directory(directory: str) -> str | None:
    """fsync ``directory``; a warning instead of an error (the rename already happened)."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as error:
        return (
            f"the decision was replaced, but syncing {directory} failed "
            f"({_describe(error)}): a crash of the file server now could lose it"
        )
    return None


def _write_all(fd: int, data: bytes, name: str) -> None:
    """Write all of ``data`` to ``fd`` (looping on partial writes), or raise.

    Raises:
        OSError: a write failed (its errno, e.g. ``ENOSPC``) or made no progress
            (``EIO``); the message names ``name`` and how many bytes were written.
    """
    written = 0
    view = memoryview(data)
    while written < len(data):
        try:
            count = os.write(fd, view[written:])
        except OSError as error:
            problem = error.strerror or str(error)
            raise OSError(
                error.errno, f"{problem} after {written} of {len(data)} bytes", name
            ) from None
        if count == 0:
            raise OSError(
                errno.EIO, f"a write made no progress after {written} of {len(data)} bytes", name
            )
        written += count


def _public(fd: int) -> None:
    os.fchmod(fd, 0o644)


def _write(path: str, content: bytes, settle: Callable[[int], None] = _public) -> None:
    """Write ``content`` to a temporary file and rename it over ``path``.

    ``settle`` gives the temporary file its mode, on its descriptor (the name may no
    longer be this file): 0644 unless told. The temporary file is removed on any failure
    before the rename, also on a :class:`BaseException` (a signal handler that raises).
    """
    directory, name = os.path.split(path)
    try:
        fd, temp = tempfile.mkstemp(prefix=f".{name}.", suffix=_TEMPORARY_SUFFIX, dir=directory)
    except OSError as error:
        raise StepError("create", error) from None
    step = "write"
    try:
        try:
            settle(fd)
            _write_all(fd, content, path)
            os.fsync(fd)
        finally:
            os.close(fd)
        step = "rename"
        os.replace(temp, path)
    except BaseException as error:
        try:
            os.unlink(temp)
        except OSError:
            pass
        if isinstance(error, OSError):
            raise StepError(step, error) from None
        raise


def _holds(current: Current, content: bytes | None) -> bool:
    """Whether ``current`` is already what writing ``content`` (``None``: removing) makes."""
    if content is None:
        return current.kind == "absent"
    return current == Current("content", content, len(content))


def replace(
    path: str,
    content: bytes | None,
    expect: Current | None = None,
    *,
    lock_wait: float = 5.0,
    lock: bool = True,
    create: bool = True,
) -> Result:
    """Atomically write ``content`` at ``path`` (``None``: remove it), if it holds ``expect``.

    Under the directory's lock (unless ``lock=False``, for a file that is not a decision
    and that only one writer owns) the path is read again (:func:`read_current`); when
    ``expect`` is given and the path no longer holds it (same kind, size and bytes),
    nothing is written: the status is ``unchanged`` when the path already holds
    ``content`` (another writer wrote the same, e.g. a replica of a producer), else
    ``conflict``. Removing a missing file is ``done``; so is writing one with
    ``create=False``, which then writes nothing. Holding the lock, the writer first removes the directory's stale
    temporary files (see the module's documentation).

    Raises:
        StepError: a filesystem call failed (``step`` names it); nothing was written
            unless the step is ``rename``'s successor (there is none: a failed sync is
            a warning). A lock that is not a regular file is step ``lock``.
        LockBusyError: the lock was held for more than ``lock_wait`` seconds.
        ValueError: ``lock=False`` for a decision (``segment_health_check.*``).
    """
    directory, name = os.path.split(path)
    if not lock and name.startswith(_DECISION_PREFIX):
        raise ValueError(f"{path} is a decision: it is written only under the directory's lock")
    warnings: list[str] = []
    fd, warning = _lock(directory, lock_wait) if lock else (None, None)
    try:
        if warning:
            warnings.append(warning)
        elif fd is not None:  # held: no live writer's temporary file is there
            warnings += _remove_stale_temporaries(directory)
        before = read_current(path)
        if expect is not None and before != expect:
            return Result("unchanged" if _holds(before, content) else "conflict", before, warnings)
        if before.kind == "absent" and (content is None or not create):
            return Result("done", before, warnings)
        if content is None:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            except OSError as error:
                raise StepError("remove", error) from None
        else:
            _write(path, content)
        warning = _sync_directory(directory)
        return Result("done", before, warnings + ([warning] if warning else []))
    finally:
        if fd is not None:
            os.close(fd)  # releases the flock


def list_names(directory: str) -> list[str]:
    """The names in ``directory`` (``os.listdir``)."""
    return os.listdir(directory)


def not_own_file(uid: int | None, nlink: int | None) -> str | None:
    """Why a regular file of owner ``uid`` with ``nlink`` names is not this process's own
    (its effective uid's, with one name), or ``None`` when it is.

    A file another account owns can be rewritten by that account whatever this process
    writes; a second name (a hard link) can be another account's way to make this
    process write to a file it never named.
    """
    if uid != os.geteuid():
        return f"it belongs to uid {uid}"
    if nlink is not None and nlink > 1:
        return f"it has {nlink} names (hard links)"
    return None


def append_text(path: str, text: str) -> None:
    """Append all of ``text`` to this account's own regular file ``path`` (created 0644
    if missing).

    Opened by :func:`open_regular` (``O_RDWR | O_APPEND | O_CREAT``): a symlink or any
    other non-regular file is refused (:class:`NotRegularError`). A file that is not
    this account's own (:func:`not_own_file`) is refused too, before anything is
    written, rather than warned about: a log its owner can rewrite is no trail, and a
    hard link could make a producer running as root append to a file it never named.
    When the file does not end with a newline (an earlier append was cut short), a
    newline is written first, so a new line never continues a cut one. Partial writes
    are continued; a write that fails or makes no progress raises. (A concurrent
    appender can at worst make that check see a byte in the middle of its line: one
    empty line more.)

    Raises:
        NotRegularError: ``path`` is not a regular file.
        OSError: ``EPERM``: ``path`` is not this account's own file (the message says
            why); else opening or writing failed (e.g. ``ENOSPC``), the message names
            ``path`` and how many bytes of ``text`` were written.
    """
    fd, st = open_regular(path, os.O_RDWR | os.O_APPEND | os.O_CREAT)
    try:
        problem = not_own_file(st.st_uid, st.st_nlink)
        if problem is not None:
            raise OSError(errno.EPERM, f"not this account's own file: {problem}", path)
        size = st.st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            _write_all(fd, b"\n", path)
        _write_all(fd, text.encode(), path)
    finally:
        os.close(fd)


# --- the helper process ------------------------------------------------------------------


def _op_read(args: dict[str, Any]) -> Any:
    return read_current(args["path"]).to_wire()


def _op_replace(args: dict[str, Any]) -> Any:
    content = None if args["content"] is None else base64.b64decode(args["content"])
    expect = None if args["expect"] is None else Current.from_wire(args["expect"])
    return replace(
        args["path"],
        content,
        expect,
        lock_wait=args["lock_wait"],
        lock=args["lock"],
        create=args["create"],
    ).to_wire()


def _op_list(args: dict[str, Any]) -> Any:
    return list_names(args["path"])


def _op_append(args: dict[str, Any]) -> Any:
    append_text(args["path"], args["text"])
    return None


OPS = {"read": _op_read, "replace": _op_replace, "list": _op_list, "append": _op_append}


def _answer(request: dict[str, Any]) -> dict[str, Any]:
    try:
        return {"ok": OPS[request["op"]](request["args"])}
    except LockBusyError as error:
        return {"busy": error.waited, "lock": error.lock_path}
    except OSError as error:
        return {
            "errno": error.errno or 0,
            "strerror": error.strerror or str(error),
            "filename": error.filename,
            "step": getattr(error, "step", None),
        }


def serve() -> None:
    """Answer one JSON request per line on stdin with one JSON line on stdout."""
    for line in sys.stdin.buffer:
        reply = json.dumps(_answer(json.loads(line)))
        os.write(1, reply.encode() + b"\n")


if __name__ == "__main__":
    serve()
