"""``os.stat`` with a time bound, run in a helper process, for shared filesystems that hang.

A Lustre or NFS client can block a ``stat`` for minutes, or for ever, and the blocked
thread sleeps uninterruptibly: no signal wakes it, and a process cannot finish exiting
while one of its threads sleeps so. A bounded stat on a thread of the launcher would
release the caller but keep the launcher from ever exiting. So the stat runs in a
small helper process (a fresh ``python -I -S``, tagged :data:`HELPER_TAG` in its
command line; :mod:`nvrx_seghealth._decision.helperprocess`):

* The helper is started on first use, or ahead of time (:func:`prepare`), and reused: a
  healthy call costs one request and one reply over two private pipes. Its start-up is
  not part of any stat's bound.
* When a stat has not answered within the bound, the helper is *abandoned*: its pipes
  are closed and the next call starts a new helper. The abandoned helper exits on its
  own as soon as its stat returns (its reply meets a closed pipe), and a daemon thread
  waiting for it reaps it then; once the filesystem answers, nothing is left behind.
* At most one stuck call per directory, across this account's processes: while an
  abandoned helper still waits on a path, a new stat of any path in the same directory
  (the key is ``os.path.dirname`` of the absolute path, shared with the operators'
  reads and writes there, :mod:`nvrx_seghealth._decision.boundedfs`) is refused at once
  (:class:`StatTimeoutError`) instead of sending one more process into the hung
  filesystem; :func:`stuck_for` tells whether it would be.
* A stuck helper holds none of the launcher's standard streams (its stdin and stdout
  are the private pipes, its stderr is ``/dev/null``): srun, or any caller reading the
  launcher's output through a pipe, is not held by it. It stays in the launcher's
  process group and Slurm step, so Slurm still sees a node whose filesystem hangs.
"""

from __future__ import annotations

import os

from . import helperprocess
from .helperprocess import READY, HelperClient, HelperStartError

__all__ = [
    "HELPER_TAG",
    "StatHelperError",
    "StatTimeoutError",
    "prepare",
    "stat_within",
    "stuck_for",
]

#: The helper's last command-line argument, to recognise it (``ps``, ``/proc``).
HELPER_TAG = "nvrx-seghealth-stat-helper"

# The helper: say it is ready, then read NUL-terminated paths on stdin and answer one
# line each on stdout; at end of file (the client closed its pipe) it exits.
_READY_LINE = READY + b"\n"
_HELPER_CODE = rf"""
import os
os.write(1, {_READY_LINE!r})
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
        path: the path whose stat is still pending, or was not sent.
        waited: seconds the pending stat has been running so far.
        earlier: the stat of ``path`` was not sent: an earlier one in its directory is
            still stuck, for ``waited`` seconds.
    """

    def __init__(self, path: str, waited: float, *, earlier: bool = False) -> None:
        super().__init__(
            f"stat({path!r}) not sent: an earlier stat in its directory has not returned "
            f"after {waited:.1f} s"
            if earlier
            else f"stat({path!r}) has not returned after {waited:.1f} s"
        )
        self.path = path
        self.waited = waited
        self.earlier = earlier


#: The helper process could not be started: no stat was made.
StatHelperError = HelperStartError


def _timeout_error(directory: str, waited: float, earlier: bool) -> StatTimeoutError:
    """The client's error names the call's key, the directory; :func:`stat_within`
    names the path."""
    return StatTimeoutError(directory, waited, earlier=earlier)


_client = HelperClient("stat", ["-c", _HELPER_CODE], HELPER_TAG, _timeout_error)


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


def _key(path: str) -> str:
    return os.path.dirname(os.path.abspath(path))


def prepare() -> None:
    """Start the stat helper now, so that the first :func:`stat_within` does not wait
    for it (each stat's bound excludes start-up anyway). Blocks until the helper is
    ready, at most :data:`~.helperprocess.STARTUP_TIMEOUT` seconds per interpreter
    tried; a no-op while a live helper is ready. Call it once when the check is set up.

    Raises:
        StatHelperError: no helper process could be started (a later stat tries again).
    """
    _client.start()


def stuck_for(path: str) -> float | None:
    """Seconds an abandoned call in ``path``'s directory has been stuck, or ``None``
    when a stat of ``path`` would be sent (see the module doc)."""
    return helperprocess.stuck_for(_key(path))


def stat_within(path: str, timeout: float) -> os.stat_result:
    """Return ``os.stat(path)`` (following symlinks), waiting at most ``timeout`` s.

    The stat runs in the helper process (see the module doc); ``timeout`` does not
    include starting it. The result carries
    ``st_mode``, ``st_ino``, ``st_dev``, ``st_nlink``, ``st_uid``, ``st_gid``,
    ``st_size`` and the three times.

    Raises:
        ValueError: ``path`` contains a NUL byte, or ``timeout`` is not positive.
        StatHelperError: the helper process could not be started.
        OSError: whatever ``os.stat`` raised in the helper, or the helper died.
        StatTimeoutError: the stat did not return in time, or an earlier call in the
            same directory is still stuck (:func:`stuck_for`).
    """
    if not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    encoded = os.fsencode(path)
    if b"\0" in encoded:
        raise ValueError(f"embedded null byte in path {path!r}")
    try:
        reply = _client.call(_key(path), encoded + b"\0", timeout)
    except StatTimeoutError as error:
        raise StatTimeoutError(path, error.waited, earlier=error.earlier) from None
    return _parse(path, reply)
