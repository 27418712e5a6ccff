"""Row 1: a healthy rendezvous through ``segment-health`` against plain ``c10d``.

The same simulated job (array tasks of two nodes, every launcher in the world, no
spares) runs with ``--rdzv-backend=segment-health`` (a decision directory configured,
no decision file in it: process 0 of every task stats a missing file) and with plain
``c10d``; everything else is identical (store outside the units, ``is_host=false``).
Measured: seconds from launch until every worker of the first world has started, from
the workers' own records. That span holds the agents' start-up, the rendezvous and
the workers' start-up; the check is one stat per task on top of it. The job is
stopped once every worker has started.
"""

from __future__ import annotations

from collections.abc import Callable

from harness.bench.measure import Row, interleaved_samples, median_or_none, ratio_or_none
from nvrx_seghealth._demo import JobSpec

from .simjobs import JobFacts, first_world_started, run_job

#: Launchers per job (two per array task), quick and full.
SIZES = {True: (4,), False: (4, 8)}
#: Interleaved repetitions of each variant, quick and full.
REPETITIONS = {True: 2, False: 3}
TARGET = 1.02


def _spec(launchers: int, backend: str) -> JobSpec:
    return JobSpec(
        tasks=launchers // 2, nodes_per_task=2, backend=backend, steps=1, step_seconds=0.0
    )


def _row(launchers: int, samples: dict[str, list[JobFacts]]) -> Row:
    times = {
        name: [
            f.first_world_started
            for f in facts
            if f.first_world_started is not None and f.rounds == 1
        ]
        for name, facts in samples.items()
    }
    medians = {name: median_or_none(values) for name, values in times.items()}
    ratio = ratio_or_none(medians["segment-health"], medians["c10d"])
    runs = len(samples["c10d"])
    spread = ", ".join(
        f"{name} {min(values):.1f}-{max(values):.1f} s" for name, values in times.items() if values
    )
    failed = {name: runs - len(values) for name, values in times.items() if len(values) < runs}
    detail = (
        f"median to all workers started: segment-health "
        f"{_seconds(medians['segment-health'])}, c10d {_seconds(medians['c10d'])} "
        f"({runs} interleaved runs each; range {spread})"
    )
    if failed:
        detail += f"; runs whose first world did not start in round 0 (left out): {failed}"
    return Row(
        f"healthy rendezvous, {launchers} launchers: segment-health vs c10d",
        ratio,
        f"<= {TARGET}",
        None if ratio is None else ratio <= TARGET,
        detail,
    )


def _seconds(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f} s"


def _variant(launchers: int, backend: str) -> Callable[[], JobFacts]:
    return lambda: run_job(_spec(launchers, backend), first_world_started)


def rows(quick: bool) -> list[Row]:
    result = []
    for launchers in SIZES[quick]:
        samples = interleaved_samples(
            {backend: _variant(launchers, backend) for backend in ("segment-health", "c10d")},
            REPETITIONS[quick],
        )
        result.append(_row(launchers, samples))
    return result
