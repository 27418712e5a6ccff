"""This process's bounded-stat helper processes, as ``/proc`` shows them, and the bound of a
call that must be refused at once."""

from __future__ import annotations

import os
import time
from pathlib import Path

from nvrx_seghealth._decision.boundedstat import HELPER_TAG, stat_within

__all__ = ["helper_pids", "only_helper"]


def helper_pids() -> list[int]:
    """PIDs of this process's stat helpers (live or stuck, not exited), from /proc."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            state, ppid = (entry / "stat").read_text().rsplit(")", 1)[1].split()[:2]
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue
        if int(ppid) == os.getpid() and state not in "ZX" and HELPER_TAG.encode() in argv:
            pids.append(int(entry.name))
    return sorted(pids)


def only_helper() -> int:
    """The one live helper, once an earlier test's abandoned helper has exited.

    A helper abandoned by an earlier test (its stat timed out, then the test continued
    it) exits on its own once its call returns; until then it is still this process's
    child.
    """
    stat_within("/", 5)  # make sure one is running
    deadline = time.monotonic() + 60
    while len(pids := helper_pids()) > 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    (pid,) = pids
    return pid
