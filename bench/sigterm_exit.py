"""Row 12: a launcher told to stop while it trains exits as fast as plain c10d's.

The job is ``harness.jobs.sigterm.job_spec``'s: one array task of two real ``torchrun``
launchers, the store outside the unit, rounds that would train for 100 s. Once both
launchers' workers train, SIGTERM goes to process 0's process group (as ``slurmstepd``
signals a step's tasks), on plain ``c10d``, on ``segment-health`` and on
``segment-health`` with the watch on (every :data:`WATCH_SECONDS` s). Measured: seconds
from the signal to the launcher's exit, and its exit code. Process 0 is the launcher
with the most of the wrapper's own threads then (the responder that answers its
siblings, and the watch); the exit must wait for each of them to leave its store call
(``nvrx_seghealth._launcher.exiting``). Target: each wrapped median within 10 % of
c10d's, exit code 1 (torch's).
"""

from __future__ import annotations

import functools
import signal
import tempfile
from collections.abc import Callable
from pathlib import Path

from harness.bench.measure import Row, interleaved_samples, median_or_none, ratio_or_none
from harness.jobs.sigterm import (
    BOTH,
    C10D_PATIENCE,
    PROCESS_ZERO,
    TORCH_EXIT_CODE,
    Termination,
    job_spec,
    terminate,
    wait_for_round,
)
from nvrx_seghealth._demo import SimulatedJob

REPETITIONS = {True: 2, False: 5}
TARGET = 1.10
#: The watch interval of the watch-on run (seconds).
WATCH_SECONDS = 5.0
#: Each run compared with c10d, and its job's extra settings.
WRAPPED = {
    "segment-health": {},
    f"segment-health, watch every {WATCH_SECONDS:g} s": {"watch_interval": WATCH_SECONDS},
}


def _training(job: SimulatedJob) -> None:
    wait_for_round(job, 0, BOTH)


def _measure(backend: str, **settings: float) -> Termination:
    with tempfile.TemporaryDirectory(prefix="nvrx-bench-sigterm-") as workdir:
        spec = job_spec(backend, **settings)
        return terminate(spec, Path(workdir) / "job", PROCESS_ZERO, _training, C10D_PATIENCE)


def _describe(name: str, runs: list[Termination]) -> str:
    median = median_or_none(run.seconds for run in runs)
    shown = ", ".join(run.shown.removesuffix(" s") for run in runs)
    codes = sorted({str(run.launcher.returncode) for run in runs})
    return (
        f"{name} {'n/a' if median is None else f'{median:.2f} s'} ({shown}), "
        f"exit {', '.join(codes)}"
    )


def rows(quick: bool) -> list[Row]:
    variants: dict[str, Callable[[], Termination]] = {"c10d": functools.partial(_measure, "c10d")}
    for name, settings in WRAPPED.items():
        variants[name] = functools.partial(_measure, "segment-health", **settings)
    samples = interleaved_samples(variants, REPETITIONS[quick])
    c10d = median_or_none(run.seconds for run in samples["c10d"])
    result = []
    for name in WRAPPED:
        runs = samples[name]
        median = median_or_none(run.seconds for run in runs)
        ratio = ratio_or_none(median, c10d)
        exits_as_torch = all(run.launcher.returncode == TORCH_EXIT_CODE for run in runs)
        result.append(
            Row(
                f"SIGTERM to process 0 while it trains: seconds to its exit, {name} / c10d",
                ratio,
                f"<= {TARGET:.2f}, exit {TORCH_EXIT_CODE}",
                ratio is not None and ratio <= TARGET and exits_as_torch,
                f"{_describe(name, runs)}; {_describe('c10d', samples['c10d'])}; "
                f"signal {signal.SIGTERM.name} to its process group",
            )
        )
    return result
