"""Row 7: recovery from each ordinary failure, segment-health (nothing marked) vs c10d,
with the watch off and on.

For every fault of the matrix (``harness.jobs.faults.FAULTS``, the same faults
``integration/test_fault_matrix.py`` runs), the same job runs once per entry of
``harness.jobs.faults.RUNS``: on plain ``c10d``, on ``segment-health`` with the check on and no
decision file, and on ``segment-health`` with the watch on too
(``harness.jobs.faults.WATCH_SECONDS``). Measured: the recovery time as the harness defines it
(:meth:`nvrx_seghealth._demo.JobResult.recovery`): from the moment the harness injected
the fault until every worker of the next world had joined its process group. Each job is
stopped as soon as that is known. Medians of interleaved repetitions; two rows per fault,
each wrapper run against c10d; the target is "do no harm": within 10 % of c10d.
"""

from __future__ import annotations

import functools
import shutil
import tempfile
from pathlib import Path

from harness.bench.measure import Row, interleaved_samples, median_or_none, ratio_or_none
from harness.jobs.faults import FAULTS, RUNS, WATCH_SECONDS, Fault, FaultNotInjected, run_fault

REPETITIONS = {True: 1, False: 3}
TARGET = 1.10
#: The run every other run of a fault is compared with.
REFERENCE = "c10d"
#: How a row names each run compared with c10d.
TITLES = {
    "segment-health": "segment-health",
    "segment-health+watch": f"segment-health, watch every {WATCH_SECONDS:g} s",
}


def measure(fault: Fault, run: str) -> tuple[float | None, Path | None]:
    """One run: the recovery seconds, and the job's files when it did not recover."""
    workdir = Path(tempfile.mkdtemp(prefix=f"nvrx-bench-{fault.name}-{run}-"))
    try:
        seconds = fault.recovery(run_fault(fault, run, workdir, to_the_end=False))
    except FaultNotInjected:
        seconds = None
    if seconds is None:
        return None, workdir
    shutil.rmtree(workdir, ignore_errors=True)
    return seconds, None


def _describe(run: str, samples: list[tuple[float | None, Path | None]]) -> str:
    seconds = [s for s, _ in samples]
    median = median_or_none(seconds)
    runs = ", ".join("never" if s is None else f"{s:.1f}" for s in seconds)
    kept = [str(path) for _, path in samples if path is not None]
    return f"{run} {'n/a' if median is None else f'{median:.1f} s'} ({runs})" + (
        f", files of runs that did not recover: {', '.join(kept)}" if kept else ""
    )


def _rows(fault: Fault, repetitions: int) -> list[Row]:
    """One row per run other than c10d, all from the same interleaved samples."""
    samples = interleaved_samples(
        {run: functools.partial(measure, fault, run) for run in RUNS}, repetitions
    )
    medians = {r: median_or_none(s for s, _ in runs) for r, runs in samples.items()}
    rows = []
    for run, title in TITLES.items():
        ratio = ratio_or_none(medians[run], medians[REFERENCE])
        recovered = all(s is not None for r in (run, REFERENCE) for s, _ in samples[r])
        rows.append(
            Row(
                f"recovery, {fault.name}: {fault.title}; {title} vs c10d",
                ratio,
                f"<= {TARGET:.2f}",
                None if ratio is None else recovered and ratio <= TARGET,
                "; ".join(_describe(r, samples[r]) for r in (REFERENCE, run)),
            )
        )
    return rows


def rows(quick: bool) -> list[Row]:
    return [row for fault in FAULTS for row in _rows(fault, REPETITIONS[quick])]
