"""Row 3: one ``SegmentHealthCheck`` call against a bare ``os.stat`` of the same path.

The check adds the time bound (a hand-off to a reusable stat thread) and the decision;
the table gives the ratio for a missing, an empty and a non-empty decision file, the
unbounded variant (``stat_timeout=None``), and the floor of any thread hand-off: a
no-op handed to a resident thread and waited for, the way the bound hands the stat
over. The check's cost beyond ``os.stat`` is then read off directly.
"""

from __future__ import annotations

import _thread
import os
import queue
import tempfile
import threading

from nvrx_seghealth import SegmentHealthCheck, publish_decision

from .common import Row, interleaved, per_call


class _NoOpThread:
    """A resident daemon thread that answers each request at once: the hand-off alone."""

    def __init__(self) -> None:
        self.requests: queue.SimpleQueue[_thread.LockType] = queue.SimpleQueue()
        threading.Thread(target=self._serve, name="bench-no-op", daemon=True).start()

    def _serve(self) -> None:
        while True:
            self.requests.get().release()

    def __call__(self) -> None:
        done = _thread.allocate_lock()
        done.acquire()
        self.requests.put(done)
        done.acquire(timeout=10)


def rows(quick: bool) -> list[Row]:
    calls, repetitions = (2000, 5) if quick else (20000, 9)
    result = []
    with tempfile.TemporaryDirectory() as directory:
        bounded = SegmentHealthCheck(directory, "1", "2")
        unbounded = SegmentHealthCheck(directory, "1", "2", stat_timeout=None)
        hand_off = _NoOpThread()

        def bare_stat() -> None:
            try:
                os.stat(bounded.path)
            except FileNotFoundError:
                pass

        for state in ("missing", "empty", "non-empty"):
            if state == "empty":
                open(bounded.path, "wb").close()
            elif state == "non-empty":
                publish_decision(directory, "1", "2", "drained")
            medians = interleaved(
                {
                    "stat": per_call(bare_stat, calls),
                    "check": per_call(bounded, calls),
                    "unbounded": per_call(unbounded, calls),
                    "hand-off": per_call(hand_off, calls),
                },
                repetitions,
            )
            ratio = medians["check"] / medians["stat"]
            result.append(
                Row(
                    f"check vs os.stat, {state} file",
                    ratio,
                    "<= 3",
                    ratio <= 3,
                    f"stat {medians['stat'] * 1e6:.1f} us, check {medians['check'] * 1e6:.1f} us, "
                    f"check without bound {medians['unbounded'] * 1e6:.1f} us "
                    f"(x{medians['unbounded'] / medians['stat']:.2f}), thread hand-off of a "
                    f"no-op alone {medians['hand-off'] * 1e6:.1f} us",
                )
            )
    return result
