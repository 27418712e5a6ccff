"""The operators' filesystem calls with a time bound, for shared filesystems that hang.

``mark``, ``clear``, ``status`` and ``publish-drained`` read, list and write the decision
directory. On a hung Lustre or NFS client any of those calls can block for good, in an
uninterruptible sleep that no signal ends. So they run in a helper process
(:mod:`nvrx_seghealth.decisionfs` served by ``python -I -S``, tagged :data:`HELPER_TAG`),
as the consumer's stat does (:mod:`nvrx_seghealth.boundedstat`):

* one helper is started on first use and reused;
* a call that has not answered within its bound raises :class:`FilesystemTimeout`; the
  helper is abandoned (it exits by itself once the filesystem answers) and the next call
  starts a new one;
* at most one abandoned helper per directory: while one is still stuck there, a new call
  for that directory fails at once instead of sending one more process into it;
* the helper holds none of the caller's standard streams, so a caller that exits is not
  held by it, and waiting for it is interruptible (a signal handler that raises ends the
  wait, e.g. SIGTERM of ``publish-drained --interval``).

Standard library only.
"""

from __future__ import annotations

import base64
import json
import os
import select
import subprocess
import time
from typing import Any

from . import decisionfs
from .boundedstat import StatHelperError, _interpreters
from .decisionfs import Current, LockBusyError, Result, StepError

__all__ = [
    "HELPER_TAG",
    "FilesystemTimeout",
    "append_text",
    "list_names",
    "read_current",
    "replace",
]

#: The helper's last command-line argument, to recognise it (``ps``, ``/proc``).
HELPER_TAG = "nvrx-seghealth-fs-helper"


class FilesystemTimeout(TimeoutError):
    """A filesystem call in ``directory`` did not answer within its bound.

    Attributes:
        directory: where the call went.
        waited: seconds the pending call has been running so far.
        earlier: the call was not even sent: an earlier one in ``directory`` is still
            stuck.
    """

    def __init__(self, directory: str, waited: float, *, earlier: bool = False) -> None:
        what = "an earlier call there is still stuck after" if earlier else "no answer after"
        super().__init__(f"{directory}: {what} {waited:.1f} s (a hung shared filesystem?)")
        self.directory = directory
        self.waited = waited
        self.earlier = earlier


class _Helper:
    def __init__(self) -> None:
        errors = []
        for interpreter in _interpreters():
            try:
                self.process = subprocess.Popen(
                    [interpreter, "-I", "-S", decisionfs.__file__, HELPER_TAG],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                    close_fds=True,
                    bufsize=0,
                )
                break
            except OSError as error:
                errors.append(f"{interpreter}: {error.strerror or error}")
        else:
            raise StatHelperError(
                0, "the filesystem helper process cannot be started (" + "; ".join(errors) + ")"
            )
        assert self.process.stdin is not None and self.process.stdout is not None
        self.unread = b""

    def ask(self, request: bytes, deadline: float) -> bytes | None:
        """Send ``request``; the reply line, or ``None`` once ``deadline`` has passed."""
        assert self.process.stdin is not None and self.process.stdout is not None
        os.write(self.process.stdin.fileno(), request)
        replies = self.process.stdout.fileno()
        while b"\n" not in self.unread:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            if select.select([replies], [], [], remaining)[0]:
                chunk = os.read(replies, 65536)
                if not chunk:
                    raise OSError(0, "the filesystem helper process exited")
                self.unread += chunk
        line, _, self.unread = self.unread.partition(b"\n")
        return line

    def abandon(self) -> None:
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                stream.close()


_helper: _Helper | None = None
_stuck: dict[str, tuple[_Helper, float]] = {}  # directory -> (abandoned helper, start)


def _call(op: str, directory: str, timeout: float, args: dict[str, Any]) -> Any:
    global _helper
    stuck = _stuck.get(directory)
    if stuck is not None:
        if stuck[0].process.poll() is None:
            raise FilesystemTimeout(directory, time.monotonic() - stuck[1], earlier=True)
        del _stuck[directory]
    started = time.monotonic()
    request = json.dumps({"op": op, "args": args}).encode() + b"\n"
    if _helper is None or _helper.process.poll() is not None:
        _helper = _Helper()
    helper = _helper
    try:
        line = helper.ask(request, started + timeout)
    except BaseException:  # the helper died, or a signal handler ended the wait
        helper.abandon()
        _helper = None
        _stuck[directory] = (helper, started)
        raise
    if line is None:
        helper.abandon()
        _helper = None
        _stuck[directory] = (helper, started)
        raise FilesystemTimeout(directory, time.monotonic() - started)
    reply = json.loads(line)
    if "ok" in reply:
        return reply["ok"]
    if "busy" in reply:
        raise LockBusyError(reply["lock"], reply["busy"])
    error = OSError(reply["errno"], reply["strerror"], reply["filename"])
    raise StepError(reply["step"], error) if reply["step"] else error


def read_current(path: str, timeout: float) -> Current:
    """:func:`decisionfs.read_current` within ``timeout`` seconds."""
    return Current.from_wire(_call("read", os.path.dirname(path), timeout, {"path": path}))


def replace(
    path: str, content: bytes | None, expect: Current | None, timeout: float, *, lock: bool = True
) -> Result:
    """:func:`decisionfs.replace` within ``timeout`` seconds (half of it for the lock).

    Raises:
        FilesystemTimeout: no answer in time; whether the write happened is unknown.
        LockBusyError, StepError, OSError: as :func:`decisionfs.replace`.
    """
    args = {
        "path": path,
        "content": None if content is None else base64.b64encode(content).decode(),
        "expect": None if expect is None else expect.to_wire(),
        "lock_wait": timeout / 2,
        "lock": lock,
    }
    return Result.from_wire(_call("replace", os.path.dirname(path), timeout, args))


def list_names(directory: str, timeout: float) -> list[str]:
    """``os.listdir(directory)`` within ``timeout`` seconds."""
    return list(_call("list", directory, timeout, {"path": directory}))


def append_text(path: str, text: str, timeout: float) -> None:
    """:func:`decisionfs.append_text` within ``timeout`` seconds."""
    _call("append", os.path.dirname(path) or ".", timeout, {"path": path, "text": text})
