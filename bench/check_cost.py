"""Row 3: one ``SegmentHealthCheck`` call against a bare ``os.stat`` of the same path.

The check adds the time bound (a hand-off to a reusable stat thread) and the decision;
the table gives the ratio for a missing, an empty and a non-empty decision file, and
the unbounded variant (``stat_timeout=None``) to show where the cost lies.
"""

from __future__ import annotations

import os
import tempfile

from nvrx_seghealth import SegmentHealthCheck, publish_decision

from .common import Row, interleaved, per_call


def rows(quick: bool) -> list[Row]:
    calls, repetitions = (2000, 5) if quick else (20000, 9)
    result = []
    with tempfile.TemporaryDirectory() as directory:
        bounded = SegmentHealthCheck(directory, "1", "2")
        unbounded = SegmentHealthCheck(directory, "1", "2", stat_timeout=None)

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
                {"stat": per_call(bare_stat, calls),
                 "check": per_call(bounded, calls),
                 "unbounded": per_call(unbounded, calls)},
                repetitions,
            )
            ratio = medians["check"] / medians["stat"]
            result.append(Row(
                f"check vs os.stat, {state} file", ratio, "<= 3", ratio <= 3,
                f"stat {medians['stat'] * 1e6:.1f} us, check {medians['check'] * 1e6:.1f} us, "
                f"check without bound {medians['unbounded'] * 1e6:.1f} us "
                f"(x{medians['unbounded'] / medians['stat']:.2f})",
            ))
    return result
