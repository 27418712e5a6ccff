"""``os.stat`` with a time bound, run in a helper process, for shared filesystems that hang.

A Lustre or NFS client can block a ``stat`` for minutes, or for ever, and the blocked
thread sleeps uninterruptibly: no signal wakes it, and a process cannot finish exiting
while one of its threads sleeps so. A bounded stat on a thread of the launcher would
release the caller but keep the launcher from ever exiting. So the stat runs in a
small helper process (a fresh ``python -I -S``, tagged :data:`HELPER_TAG` in its
command line):

* The helper is started on first use and reused: a healthy call costs one request and
  one reply over two private pipes.
* When a stat has not answered within the bound, the helper is *abandoned*: its pipes
  are closed and the next call starts a new helper. The abandoned helper exits on its
  own as soon as its stat returns (its reply meets a closed pipe), and a daemon thread
  waiting for it reaps it then; once the filesystem answers, nothing is left behind.
* At most one stuck stat per path: while an abandoned helper still waits on a path, a
  new stat of that path is refused at once (:class:`StatTimeoutError`) instead of
  sending one more process into the hung filesystem.
* A stuck helper holds none of the launcher's standard streams (its stdin and stdout
  are the private pipes, its stderr is ``/dev/null``): srun, or any caller reading the
  launcher's output through a pipe, is not held by it. It stays in the launcher's
  process group and Slurm step, so Slurm still sees a node whose filesystem hangs.

Standard library only.
"""

from __future__ import annotations

import errno
import os
import select
import shutil
import subprocess
import sys
import threading
import time

__all__ = ["HELPER_TAG", "StatHelperError", "StatTimeoutError", "stat_within"]

#: The helper's last command-line argument, to recognise it (``ps``, ``/proc``).
HELPER_TAG = "nvrx-seghealth-stat-helper"

# The helper: read NUL-terminated paths on stdin, answer one line each on stdout.
# Its reply to a request that met a closed pipe raises BrokenPipeError: it exits.
_HELPER_CODE = r"""
import os
pending = b""
while True:
    chunk = os.read(0, 65536)
    if not chunk:
        break
    pending += chunk
    while b"\0" in pending:
        path, _, pending = pending.partition(b"\0")
        try:
            st = os.stat(path)
        except OSError as error:
            reply = "E %d" % (error.errno or 0)
        else:
            reply = "S " + " ".join(repr(field) for field in (
                st.st_mode, st.st_ino, st.st_dev, st.st_nlink, st.st_uid, st.st_gid,
                st.st_size, st.st_atime, st.st_mtime, st.st_ctime))
        os.write(1, reply.encode() + b"\n")
"""


class StatTimeoutError(TimeoutError):
    """A ``stat`` of ``path`` did not return within the bound.

    Attributes:
        path: the path whose stat is still pending.
        waited: seconds the pending stat has been running so far.
    """

    def __init__(self, path: str, waited: float) -> None:
        super().__init__(f"stat({path!r}) has not returned after {waited:.1f} s")
        self.path = path
        self.waited = waited


class StatHelperError(OSError):
    """The helper process could not be started: no stat was made."""


def _interpreters() -> list[str]:
    """Pythons to run the helper with, best first: this one, then any ``python3``.

    The helper needs only the standard library, so any Python 3 will do when this
    process's own interpreter cannot be executed (e.g. its path is unreadable to the
    user this process now runs as).
    """
    candidates = [sys.executable, getattr(sys, "_base_executable", ""), shutil.which("python3")]
    return list(dict.fromkeys(c for c in candidates if c))


def _start_helper() -> subprocess.Popen[bytes]:
    errors = []
    for interpreter in _interpreters():
        try:
            return subprocess.Popen(
                [interpreter, "-I", "-S", "-c", _HELPER_CODE, HELPER_TAG],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                close_fds=True,
                bufsize=0,
            )
        except OSError as error:
            errors.append(f"{interpreter}: {error.strerror or error}")
    raise StatHelperError(
        errno.ENOEXEC, f"the stat helper process cannot be started ({'; '.join(errors)})"
    )


class _Helper:
    """One helper process and the pipes to it."""

    def __init__(self) -> None:
        self.process = _start_helper()
        assert self.process.stdin is not None and self.process.stdout is not None
        self.requests = self.process.stdin.fileno()
        self.replies = self.process.stdout.fileno()
        self.poller = select.poll()
        self.poller.register(self.replies, select.POLLIN)
        self.unread = b""

    def ask(self, path: bytes, deadline: float) -> bytes | None:
        """Send one request; return the reply line, or ``None`` when ``deadline`` passed.

        Raises:
            OSError: the helper is gone (it died, or its pipe broke).
        """
        os.write(self.requests, path + b"\0")
        while b"\n" not in self.unread:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self.poller.poll(max(1, int(remaining * 1000) + 1)):
                if time.monotonic() >= deadline:
                    return None
                continue
            chunk = os.read(self.replies, 4096)
            if not chunk:
                raise OSError(errno.EPIPE, "the stat helper process exited")
            self.unread += chunk
        line, _, self.unread = self.unread.partition(b"\n")
        return line

    def abandon(self) -> None:
        """Close the pipes; the process exits once its stat (if any) returns."""
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                stream.close()


_lock = threading.Lock()
_helper: _Helper | None = None
# path -> (abandoned helper still inside its stat, monotonic start of that stat)
_stuck: dict[str, tuple[_Helper, float]] = {}


def _reap_when_done(path: str, helper: _Helper) -> None:
    """Wait for an abandoned helper to exit (its stat returned), then forget it.

    Runs on a daemon thread per abandoned helper (at most one per path). ``waitpid``
    sleeps interruptibly, so this thread does not keep the process from exiting.
    """
    helper.process.wait()
    with _lock:
        if _stuck.get(path, (None, 0.0))[0] is helper:
            del _stuck[path]


def _parse(path: str, reply: bytes) -> os.stat_result:
    kind, _, rest = reply.decode().partition(" ")
    if kind == "E":
        code = int(rest)
        raise OSError(code, os.strerror(code), path)
    values = rest.split()
    ints = [int(value) for value in values[:7]]
    times = [float(value) for value in values[7:10]]
    # indices 7-9 hold the times in whole seconds, 10-12 (``st_atime`` ...) as floats
    return os.stat_result(ints + [int(t) for t in times] + times)


def stat_within(path: str, timeout: float) -> os.stat_result:
    """Return ``os.stat(path)`` (following symlinks), waiting at most ``timeout`` s.

    The stat runs in the helper process (see the module doc). The result carries
    ``st_mode``, ``st_ino``, ``st_dev``, ``st_nlink``, ``st_uid``, ``st_gid``,
    ``st_size`` and the three times.

    Raises:
        ValueError: ``path`` contains a NUL byte, or ``timeout`` is not positive.
        StatHelperError: the helper process could not be started.
        OSError: whatever ``os.stat`` raised in the helper, or the helper died.
        StatTimeoutError: the stat did not return in time, or an earlier stat of the
            same path is still pending.
    """
    global _helper
    if not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    encoded = os.fsencode(path)
    if b"\0" in encoded:
        raise ValueError(f"embedded null byte in path {path!r}")
    started = time.monotonic()
    deadline = started + timeout
    if not _lock.acquire(timeout=timeout):
        raise StatTimeoutError(path, time.monotonic() - started)
    try:
        if path in _stuck:
            raise StatTimeoutError(path, time.monotonic() - _stuck[path][1])
        for attempt in (1, 2):  # a helper that died since the last call is replaced once
            if _helper is None:
                _helper = _Helper()
            helper = _helper
            try:
                reply = helper.ask(encoded, deadline)
                break
            except OSError:
                helper.abandon()
                _helper = None
                if attempt == 2:
                    raise
        if reply is None:
            helper.abandon()
            _helper = None
            _stuck[path] = (helper, started)
            threading.Thread(
                target=_reap_when_done,
                args=(path, helper),
                name="nvrx-seghealth-reaper",
                daemon=True,
            ).start()
            raise StatTimeoutError(path, time.monotonic() - started)
        return _parse(path, reply)
    finally:
        _lock.release()
