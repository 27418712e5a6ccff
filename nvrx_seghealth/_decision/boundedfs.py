"""The operators' filesystem calls with a time bound, for shared filesystems that hang.

``mark``, ``clear``, ``status`` and ``publish-drained`` read, list and write the decision
directory. On a hung Lustre or NFS client any of those calls can block for good, so they
run in a helper process (:mod:`nvrx_seghealth._decision.files` served by ``python -I -S``,
tagged :data:`HELPER_TAG`) through :class:`~.helperprocess.HelperClient`, whose module
tells why and how, as the consumer's stat does (:mod:`nvrx_seghealth._decision.boundedstat`):
a call that has not answered within its bound raises :class:`~.helperprocess.HelperTimeout`
naming the directory, and once a helper is abandoned no later call goes there, across this
account's processes and shared with the bounded stat's (it is refused at once, ``earlier``):
a command, which makes one call at a time, leaves at most one stuck helper per directory.
Waiting for a helper is interruptible: a signal handler that raises ends the wait, e.g.
SIGTERM of ``publish-drained --interval``.
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
    "append_text",
    "list_names",
    "read_current",
    "replace",
]

#: The helper's last command-line argument, to recognise it (``ps``, ``/proc``).
HELPER_TAG = "nvrx-seghealth-fs-helper"


# The helper: load files.py by its path (not as __main__), say it is ready, serve.
_READY_LINE = READY + b"\n"
_HELPER_CODE = f"""
import os, runpy, sys
serve = runpy.run_path(sys.argv[1])["serve"]
os.write(1, {_READY_LINE!r})
serve()
"""

_client = HelperClient("filesystem", ["-c", _HELPER_CODE, decisionfs.__file__], HELPER_TAG)


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
    path: str,
    content: bytes | None,
    expect: Current | None,
    timeout: float,
    *,
    lock: bool = True,
    create: bool = True,
) -> Result:
    """:func:`decisionfs.replace` within ``timeout`` seconds (half of it for the lock).

    Raises:
        HelperTimeout: no answer in time; whether the write happened is unknown.
        LockBusyError, StepError, OSError: as :func:`decisionfs.replace`.
    """
    args = {
        "path": path,
        "content": None if content is None else base64.b64encode(content).decode(),
        "expect": None if expect is None else expect.to_wire(),
        "lock_wait": timeout / 2,
        "lock": lock,
        "create": create,
    }
    return Result.from_wire(_call("replace", os.path.dirname(path), timeout, args))


def list_names(directory: str, timeout: float) -> list[str]:
    """``os.listdir(directory)`` within ``timeout`` seconds."""
    return list(_call("list", directory, timeout, {"path": directory}))


def append_text(path: str, text: str, timeout: float) -> None:
    """:func:`decisionfs.append_text` within ``timeout`` seconds."""
    _call("append", os.path.dirname(path) or ".", timeout, {"path": path, "text": text})
