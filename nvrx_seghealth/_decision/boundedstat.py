"""``os.stat`` with a time bound, run in a helper process, for shared filesystems that hang.

The stat runs in a helper process (a fresh ``python -I -S``, tagged :data:`HELPER_TAG` in
its command line) through :class:`~.helperprocess.HelperClient`, whose module tells why and
how: a stat that has not answered within its bound raises
:class:`~.helperprocess.HelperTimeout` naming the path, and abandons its helper; while it
is stuck, a new stat of any path in the same directory (the key is ``os.path.dirname`` of
the absolute path, shared with the operators' reads and writes there,
:mod:`nvrx_seghealth._decision.boundedfs`) is refused at once instead of sending one more
process into the hung filesystem; :func:`stuck_for` tells whether it would be. A stat
made while another thread's is in flight has a helper of its own and its own bound: it
never waits for that stat. A stuck helper stays in the launcher's process group and Slurm step, so Slurm still sees a node
whose filesystem hangs.
"""

from __future__ import annotations

import os

from . import helperprocess
from .helperprocess import READY, HelperClient

__all__ = ["HELPER_TAG", "prepare", "stat_within", "stuck_for"]

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


_client = HelperClient("stat", ["-c", _HELPER_CODE], HELPER_TAG)


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


def prepare(path: str) -> None:
    """Make the first :func:`stat_within` of ``path`` as quick as a later one; call it
    once when the check is set up.

    It looks for other processes' stuck calls in ``path``'s directory now (a read of
    ``/proc``, :func:`stuck_for`), then starts the stat helper. It blocks until the helper
    is ready, at most :data:`~.helperprocess.STARTUP_TIMEOUT` seconds per interpreter
    tried; a no-op for the helper while a live one is ready.

    Raises:
        HelperStartError: no helper process could be started (a later stat tries again).
    """
    stuck_for(path)
    _client.start()


def stuck_for(path: str) -> float | None:
    """Seconds an abandoned call in ``path``'s directory has been stuck, or ``None``
    when a stat of ``path`` would be sent (see the module doc)."""
    return helperprocess.stuck_for(_key(path))


def stat_within(path: str, timeout: float) -> os.stat_result:
    """Return ``os.stat(path)`` (following symlinks), waiting ``timeout`` s of its own.

    The stat runs in the helper process (see the module doc); ``timeout`` does not
    include starting it, nor the time the kernel holds the stat behind another one in
    the same directory that answers meanwhile
    (:meth:`~.helperprocess.HelperClient.call`). The result carries
    ``st_mode``, ``st_ino``, ``st_dev``, ``st_nlink``, ``st_uid``, ``st_gid``,
    ``st_size`` and the three times.

    Raises:
        ValueError: ``path`` contains a NUL byte, or ``timeout`` is not positive.
        HelperStartError: the helper process could not be started.
        OSError: whatever ``os.stat`` raised in the helper, or the helper died.
        HelperTimeout: the stat did not return in time, or an earlier call in the same
            directory is still stuck (:func:`stuck_for`); its ``subject`` names the path.
    """
    if not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    encoded = os.fsencode(path)
    if b"\0" in encoded:
        raise ValueError(f"embedded null byte in path {path!r}")
    reply = _client.call(_key(path), encoded + b"\0", timeout, subject=f"stat({path!r})")
    return _parse(path, reply)
