"""Writing decision files without losing another writer's decision.

The producer side of the artifact, as file operations:

* :func:`read_current` — what a decision path holds now: nothing (``absent``), some
  bytes (``content``; an empty file is content ``b""``), or something this process
  cannot read (``unreadable``: a permission error, a FIFO, a directory, an I/O error).
* :func:`replace` — write (or remove) a decision atomically, *only if* the path still
  holds what the caller read (``expect``). Every writer of this package takes an
  exclusive ``flock`` on :data:`LOCK_NAME` in the decision directory around its
  re-read, compare and rename, so a ``mark`` that lands between a producer's read and
  its rename is never overwritten: either it lands first and the producer's compare
  fails (``conflict``), or it waits for the lock and lands after.
* :func:`list_names`, :func:`append_text` — listing and an append-only log.

Writes go to a temporary file in the same directory (``.<name>.<random>.tmp``), are
flushed, made mode 0644 and renamed over the decision; then the directory is synced.
A failed directory sync after a successful rename is a *warning* of the result, not a
failure: the new decision is in place.

Where ``flock`` is not supported (``ENOLCK``, ``EOPNOTSUPP``, ...; e.g. a Lustre client
mounted without ``-o flock``), writes still compare before they rename but are not
serialised; the result carries a warning saying so.

This module imports nothing from the package and only the standard library: the same
code runs in-process (:func:`nvrx_seghealth.publish_decision`) and, for the operators'
commands, in a helper process (``python -I -S decisionfs.py``, see
:mod:`nvrx_seghealth._boundedfs`) that answers JSON requests on stdin, one per line.
"""

from __future__ import annotations

import base64
import errno
import fcntl
import json
import os
import stat
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "LOCK_NAME",
    "READ_LIMIT",
    "Current",
    "LockBusyError",
    "Result",
    "StepError",
    "append_text",
    "list_names",
    "read_current",
    "replace",
]

#: The lock file every writer of this package flocks in the decision directory.
LOCK_NAME = ".segment_health_check.lock"
#: Bytes read at most from one decision.
READ_LIMIT = 64 * 1024

_UNSUPPORTED_LOCK = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL, errno.EBADF}
#: What a path that is not a regular file is, by ``stat`` mode test (also the consumer's
#: words for it, :func:`nvrx_seghealth._artifact.judge`).
FILE_TYPES = (
    (stat.S_ISDIR, "directory"),
    (stat.S_ISFIFO, "FIFO"),
    (stat.S_ISSOCK, "socket"),
    (stat.S_ISCHR, "character device"),
    (stat.S_ISBLK, "block device"),
)


class StepError(OSError):
    """A filesystem call of a write failed; ``step`` names it.

    Steps: ``lock`` (open the lock file), ``create`` (the temporary file), ``write``,
    ``rename`` (over the decision), ``remove``.
    """

    def __init__(self, step: str, error: OSError) -> None:
        super().__init__(error.errno, error.strerror, error.filename)
        self.step = step


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
    """

    kind: str
    data: bytes = b""
    size: int = 0
    error: str = ""

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
        }

    @classmethod
    def from_wire(cls, wire: dict[str, Any]) -> Current:
        return cls(wire["kind"], base64.b64decode(wire["data"]), wire["size"], wire["error"])


@dataclass(frozen=True)
class Result:
    """The outcome of :func:`replace`.

    Attributes:
        status: ``done``, or ``conflict`` (the path no longer held ``expect``; nothing
            was written).
        before: what the path held when the lock was taken.
        warnings: problems that did not stop the write (directory sync, no lock).
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


def read_current(path: str, limit: int = READ_LIMIT) -> Current:
    """Read what ``path`` holds (following symlinks); never blocks on a FIFO."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return Current("absent")
    except OSError as error:
        return Current("unreadable", error=_describe(error))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = next((name for test, name in FILE_TYPES if test(st.st_mode)), "special file")
            return Current("unreadable", error=f"not a regular file: {kind}")
        chunks, left = [], limit
        while left > 0:
            chunk = os.read(fd, left)
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return Current("content", b"".join(chunks), st.st_size)
    except OSError as error:
        return Current("unreadable", error=_describe(error))
    finally:
        os.close(fd)


def _lock(directory: str, wait: float) -> tuple[int, str | None]:
    """Open and flock :data:`LOCK_NAME`; return the fd and a warning when unsupported."""
    lock_path = os.path.join(directory, LOCK_NAME)
    try:
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except PermissionError:  # another account's lock file (a sticky directory)
            fd = os.open(lock_path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as error:
        raise StepError("lock", error) from None
    started = time.monotonic()
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd, None
        except BlockingIOError:
            waited = time.monotonic() - started
            if waited >= wait:
                os.close(fd)
                raise LockBusyError(lock_path, waited) from None
            time.sleep(0.01)
        except OSError as error:
            if error.errno not in _UNSUPPORTED_LOCK:
                os.close(fd)
                raise StepError("lock", error) from None
            return fd, (
                f"{lock_path} cannot be locked ({_describe(error)}): concurrent "
                "writers are not serialised on this filesystem"
            )


def _sync_directory(directory: str) -> str | None:
    """fsync ``directory``; a warning instead of an error (the rename already happened)."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
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


def _write(path: str, content: bytes) -> None:
    directory, name = os.path.split(path)
    try:
        fd, temp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=directory)
    except OSError as error:
        raise StepError("create", error) from None
    step = "write"
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(content)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temp, 0o644)
        step = "rename"
        os.replace(temp, path)
    except OSError as error:
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise StepError(step, error) from None


def replace(
    path: str,
    content: bytes | None,
    expect: Current | None = None,
    *,
    lock_wait: float = 5.0,
    lock: bool = True,
) -> Result:
    """Atomically write ``content`` at ``path`` (``None``: remove it), if it holds ``expect``.

    Under the directory's lock (unless ``lock=False``, for files only one writer owns)
    the path is read again; when ``expect`` is given and the path no longer holds it
    (same kind, size and bytes), nothing is written and the status is ``conflict``.
    Removing a missing file is ``done``.

    Raises:
        StepError: a filesystem call failed (``step`` names it); nothing was written
            unless the step is ``rename``'s successor (there is none: a failed sync is
            a warning).
        LockBusyError: the lock was held for more than ``lock_wait`` seconds.
    """
    directory = os.path.dirname(path)
    warnings: list[str] = []
    fd = None
    if lock:
        fd, warning = _lock(directory, lock_wait)
        if warning:
            warnings.append(warning)
    try:
        before = read_current(path)
        if expect is not None and before != expect:
            return Result("conflict", before, warnings)
        if content is None:
            if before.kind == "absent":
                return Result("done", before, warnings)
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


def append_text(path: str, text: str) -> None:
    """Append ``text`` to ``path`` (created 0644 if missing) with one ``write``."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


# --- the helper process ------------------------------------------------------------------


def _op_read(args: dict[str, Any]) -> Any:
    return read_current(args["path"]).to_wire()


def _op_replace(args: dict[str, Any]) -> Any:
    content = None if args["content"] is None else base64.b64decode(args["content"])
    expect = None if args["expect"] is None else Current.from_wire(args["expect"])
    return replace(
        args["path"], content, expect, lock_wait=args["lock_wait"], lock=args["lock"]
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
