"""Row 3: what one ``SegmentHealthCheck`` call costs, in microseconds, beside ``os.stat``.

The check sends the stat to its helper process and reads the answer back (the time
bound: a hung filesystem holds the helper, never the launcher), then judges the
result. Its cost per call is the figure with a target (at most 100 us for a missing,
an empty and a non-empty decision file); a bare in-process ``os.stat`` of the same
path, measured in the same interleaved runs, shows how much of it is the stat itself.
"""

from __future__ import annotations

import os
import tempfile

from harness.bench.measure import Row, interleaved, per_call
from nvrx_seghealth import SegmentHealthCheck, publish_decision

#: Microseconds one check may cost.
TARGET_US = 100.0


def rows(quick: bool) -> list[Row]:
    calls, repetitions = (2000, 5) if quick else (20000, 9)
    result = []
    with tempfile.TemporaryDirectory() as directory:
        check = SegmentHealthCheck(directory, "1", "2")

        def bare_stat() -> None:
            try:
                os.stat(check.path)
            except FileNotFoundError:
                pass

        check()  # the helper process starts once, at the first call
        for state in ("missing", "empty", "non-empty"):
            if state == "empty":
                open(check.path, "wb").close()
            elif state == "non-empty":
                publish_decision(directory, "1", "2", "drained")
            medians = interleaved(
                {"stat": per_call(bare_stat, calls), "check": per_call(check, calls)},
                repetitions,
            )
            micros = medians["check"] * 1e6
            result.append(
                Row(
                    f"one check, {state} decision file (us per call)",
                    micros,
                    f"<= {TARGET_US:g} us",
                    micros <= TARGET_US,
                    f"os.stat in process {medians['stat'] * 1e6:.1f} us; the check "
                    f"{micros:.1f} us = stat in the helper process + two pipe transfers",
                )
            )
    return result
