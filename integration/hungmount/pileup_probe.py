"""Probe for the pile-up test: many bounded stats of one hung path, seen from /proc.

Usage: ``python pileup_probe.py HUNG_PATH NORMAL_PATH ROUNDS BOUND SETTLE``

1. Calls ``evaluate(HUNG_PATH, BOUND)`` ROUNDS times, waits up to SETTLE seconds for a
   child stuck in the kernel to show, and prints one JSON line: ``outcomes`` (each
   round's outcome value), ``threads`` (this process's thread count after the first and
   after the last round) and ``children``.
2. Waits for one line on stdin (the test has aborted the hung mount meanwhile).
3. Without another stat, waits up to SETTLE seconds for every child that was stuck to
   have exited (``exited``: the children then), and up to SETTLE seconds more for them
   and their stuck records (which exit once their helper has) to be reaped, gone from
   /proc (``reaped``); a child still a zombie then has every thread's stack, state and
   kernel wait channel written on stderr. Then evaluates NORMAL_PATH once and prints a
   second JSON line: ``exited``, ``reaped``, ``fresh`` (the outcome value of that
   evaluation) and ``children_after_fresh``.

A child is described as ``{"pid", "state", "stuck", "record"}``: ``state`` is the process
state letter (``Z`` for an exited child not yet reaped), ``stuck`` is true when one of its
threads waits for the filesystem: for FUSE's answer (kernel wait channel
``request_wait_answer``; the wait is interruptible until a signal arrives, then
uninterruptible) or in state ``D``; ``record`` is true for a stuck record (its command
line carries ``STUCK_TAG``; a zombie's command line is empty, so an exited record is
not one). This process has no children but the ones its stats make.
"""

from __future__ import annotations

import faulthandler
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

from nvrx_seghealth._decision.decision_file import evaluate
from nvrx_seghealth._decision.helperprocess import STUCK_TAG

#: The bound of the final stat of NORMAL_PATH: generous, it may start a new helper.
FRESH_BOUND = 5.0
#: The kernel function where a thread waits for a FUSE server's answer.
FUSE_WAIT = "request_wait_answer"


def _state(stat_file: Path) -> str:
    # The state letter follows the command name, which is in parentheses.
    return stat_file.read_text().rpartition(")")[2].split()[0]


def _waits_for_filesystem(task: Path) -> bool:
    return _state(task / "stat") == "D" or (task / "wchan").read_text().strip() == FUSE_WAIT


def _children() -> list[dict]:
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            fields = (proc / "stat").read_text().rpartition(")")[2].split()
            if int(fields[1]) != os.getpid():
                continue
            stuck = any(_waits_for_filesystem(task) for task in (proc / "task").iterdir())
            record = STUCK_TAG.encode() in (proc / "cmdline").read_bytes().split(b"\0")
        except (FileNotFoundError, ProcessLookupError):
            continue  # exited meanwhile
        found.append({"pid": int(proc.name), "state": fields[0], "stuck": stuck, "record": record})
    return found


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def _settled(done: Callable[[list[dict]], bool], settle: float) -> list[dict]:
    """This process's children once ``done(children)`` holds, or after ``settle`` s."""
    deadline = time.monotonic() + settle
    while True:
        children = _children()
        if done(children) or time.monotonic() > deadline:
            return children
        time.sleep(0.05)


def main() -> None:
    hung, normal, rounds, bound, settle = sys.argv[1:]
    outcomes = [evaluate(hung, float(bound)).outcome.value]
    threads = [_threads()]
    outcomes += [evaluate(hung, float(bound)).outcome.value for _ in range(int(rounds) - 1)]
    threads.append(_threads())
    # A stat that timed out may still be on its way into the kernel: give it time to hang.
    children = _settled(lambda found: any(child["stuck"] for child in found), float(settle))
    print(json.dumps({"outcomes": outcomes, "threads": threads, "children": children}), flush=True)

    sys.stdin.readline()
    stuck = {child["pid"] for child in children if child["stuck"]}
    exited = _settled(
        lambda found: all(c["state"] == "Z" for c in found if c["pid"] in stuck), float(settle)
    )
    # A stuck record exits once its helper has: on a loaded node, some time after it.
    # An exited record is a zombie until reaped, and a zombie's command line is empty
    # (its ``record`` is false): wait for zombies too, not only for live records.
    reaped = _settled(
        lambda found: (
            not [c for c in found if c["pid"] in stuck or c["record"] or c["state"] == "Z"]
        ),
        float(settle),
    )
    if any(child["state"] == "Z" for child in reaped):
        # Not reaped in time: where each thread is, in Python (the reaper's wait) and in
        # the kernel (state and wait channel: asleep in do_wait, or runnable), for the
        # test's log.
        faulthandler.dump_traceback(all_threads=True)
        for task in sorted(Path("/proc/self/task").iterdir()):
            kernel = f"{_state(task / 'stat')} {(task / 'wchan').read_text().strip()}"
            print(f"thread {task.name}: {kernel}", file=sys.stderr, flush=True)
    fresh = evaluate(normal, FRESH_BOUND).outcome.value
    print(
        json.dumps(
            {
                "exited": exited,
                "reaped": reaped,
                "fresh": fresh,
                "children_after_fresh": _children(),
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
