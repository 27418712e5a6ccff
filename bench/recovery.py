"""Row 7: recovery from each ordinary failure, segment-health (nothing marked) vs c10d.

For every fault of the matrix (``harness.faults.FAULTS``, the same
faults ``integration/test_fault_matrix.py`` runs), the same job runs on
``segment-health`` with the check on and no decision file, and on plain ``c10d``.
Measured: the recovery time as the harness defines it
(:meth:`nvrx_seghealth._demo.JobResult.recovery`): from the moment the harness
injected the fault until every worker of the next world had joined its process group.
Each job is stopped as soon as that is known. Medians of interleaved repetitions; the
target is "do no harm": segment-health within 10 % of c10d.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from harness.faults import FAULTS, Fault, FaultNotInjected, run_fault

from .common import Row, interleaved_samples, median_or_none, ratio_or_none

REPETITIONS = {True: 1, False: 3}
TARGET = 1.10
BACKENDS = ("c10d", "segment-health")


def measure(fault: Fault, backend: str) -> tuple[float | None, Path | None]:
    """One run: the recovery seconds, and the job's files when it did not recover."""
    workdir = Path(tempfile.mkdtemp(prefix=f"nvrx-bench-{fault.name}-{backend}-"))
    try:
        seconds = fault.recovery(run_fault(fault, backend, workdir, to_the_end=False))
    except FaultNotInjected:
        seconds = None
    if seconds is None:
        return None, workdir
    shutil.rmtree(workdir, ignore_errors=True)
    return seconds, None


def _describe(backend: str, samples: list[tuple[float | None, Path | None]]) -> str:
    seconds = [s for s, _ in samples]
    median = median_or_none(seconds)
    runs = ", ".join("never" if s is None else f"{s:.1f}" for s in seconds)
    kept = [str(path) for _, path in samples if path is not None]
    return f"{backend} {'n/a' if median is None else f'{median:.1f} s'} ({runs})" + (
        f", files of runs that did not recover: {', '.join(kept)}" if kept else ""
    )


def _row(fault: Fault, repetitions: int) -> Row:
    samples = interleaved_samples(
        {backend: (lambda b=backend: measure(fault, b)) for backend in BACKENDS}, repetitions
    )
    medians = {b: median_or_none(s for s, _ in runs) for b, runs in samples.items()}
    ratio = ratio_or_none(medians["segment-health"], medians["c10d"])
    recovered = all(s is not None for runs in samples.values() for s, _ in runs)
    return Row(
        f"recovery, {fault.name}: {fault.title}; segment-health vs c10d",
        ratio,
        f"<= {TARGET:.2f}",
        None if ratio is None else recovered and ratio <= TARGET,
        "; ".join(_describe(b, runs) for b, runs in samples.items()),
    )


def rows(quick: bool) -> list[Row]:
    return [_row(fault, REPETITIONS[quick]) for fault in FAULTS]
