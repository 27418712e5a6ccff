"""The operators' filesystem calls with a time bound, for shared filesystems that hang.

``mark``, ``clear``, ``status`` and ``publish-drained`` read, list and write the decision
directory. On a hung Lustre or NFS client any of those calls can block for good, in an
uninterruptible sleep that no signal ends. So they run in a helper process
(:mod:`nvrx_seghealth._decision.files` served by ``python -I -S``, tagged :data:`HELPER_TAG`;
:mod:`nvrx_seghealth._decision.helperprocess`), as the consumer's stat does
(:mod:`nvrx_seghealth._decision.boundedstat`):

* one helper is started on first use and reused; its start-up is not part of any call's
  bound;
* a call that has not answered within its bound raises :class:`FilesystemTimeout`; the
  helper is abandoned (it exits by itself once the filesystem answers) and the next call
  starts a new one;
* at most one abandoned helper per directory, across this account's processes and
  shared with the bounded stat's: while a call is still stuck there, a new call for that
  directory fails at once (``FilesystemTimeout(earlier=True)``) instead of sending one
  more process into it;
* the helper holds none of the caller's standard streams, so a caller that exits is not
  held by it, and waiting for it is interruptible (a signal handler that raises ends the
  wait, e.g. SIGTERM of ``publish-drained --interval``).
"""

from __future__ import annotations

import base64
import json
import os
from typing import Any

from . import files as decisionfs
from .files import Current, LockBusyError, Result, StepError
from .helperprocess import READY, HelperClient

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


def _timeout_error(directory: str, waited: float, earlier: bool) -> FilesystemTimeout:
    return FilesystemTimeout(directory, waited, earlier=earlier)


# The helper: load files.py by its path (not as __main__), say it is ready, serve.
_READY_LINE = READY + b"\n"
_HELPER_CODE = f"""
import os, runpy, sys
serve = runpy.run_path(sys.argv[1])["serve"]
os.write(1, {_READY_LINE!r})
serve()
"""

_client = HelperClient(
    "filesystem", ["-c", _HELPER_CODE, decisionfs.__file__], HELPER_TAG, _timeout_error
)


def _call(op: str, directory: str, timeout: float, args: dict[str, Any]) -> Any:
    """Run ``op`` of :data:`decisionfs.OPS` in the helper; its result, or its error raised."""
    request = json.dumps({"op": op, "args": args}).encode() + b"\n"
    reply = json.loads(_client.call(directory, request, timeout))
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
