"""One cell of the configuration matrix (``integration/test_config_matrix.py``): its job, what it
came to, and how it is held to plain c10d's answer.

A cell's job has three array tasks: tasks 0 and 1 form the world (``--nnodes`` = their
launchers), task 2 is the spare. :meth:`Cell.record` prints the cell's ``MATRIX`` line
and, where c10d has an answer, asserts "the same outcome or better, never slower beyond
:data:`MARGIN`".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pytest

from harness.session.once import once_per_session
from harness.session.summary import MATRIX
from nvrx_seghealth._demo import JobResult, JobSpec, SimulatedJob
from nvrx_seghealth._demo.logtokens import Exclusion, exclusion
from nvrx_seghealth._demo.outcome import FaultEvent, Round
from nvrx_seghealth._errors import ExclusionReason

from .configurations import REACH_TIMEOUT, Configuration, rank_zero_unit
from .simjob import run_job

__all__ = [
    "MARGIN",
    "SPARE",
    "WORLD",
    "Acted",
    "Cell",
    "Measured",
    "assert_excluded_and_reformed",
    "outcome",
    "spare_labels",
    "victim_of",
]

T = TypeVar("T")

#: The world's units, and the spare.
WORLD = (0, 1)
SPARE = 2
#: Seconds a cell may take beyond plain c10d's (as :data:`harness.jobs.sigterm.MARGIN`: a
#: loaded 2-core machine stalls a launcher's start-up or a store connect by several seconds).
MARGIN = 10.0
#: And in proportion: c10d's job runs right after the cell's, but other test workers'
#: whole jobs start and end beside both, so the two meet different loads. The test
#: catches a cell that waits out a timeout (tens of seconds); the side-by-side ratio on
#: a machine doing nothing else is the benchmark's (BENCHMARKS.md).
SLACK = 1.5


@dataclass(frozen=True)
class Measured:
    """What one run of a cell's scenario came to: ``outcome`` for the table, ``rounds``
    to its final world, ``seconds`` as the scenario measures; ``None``: the run never
    reached the scenario's outcome (for an exclusion: a completed world of the unit
    that stays and the spare)."""

    outcome: str
    rounds: int
    seconds: float | None


@dataclass(frozen=True)
class Acted:
    """What a scenario did to a running job: the round of the world it acted on
    (``first``), the unit it marked (``victim``), the unit of that world that stays, and
    the fault it recorded (the worker's failure, the mark)."""

    first: int
    victim: int
    survivor: int
    fault: FaultEvent


@dataclass
class Cell:
    """One configuration and scenario being run."""

    request: pytest.FixtureRequest
    workdir: Path
    configuration: Configuration
    scenario: str
    etcd_endpoint: str | None

    def spec(self, **fields) -> JobSpec:
        """The three-task job of this configuration (the world: tasks 0 and 1). Its join
        timeout is :data:`REACH_TIMEOUT`: no scenario waits for a join to time out, and
        on a loaded node 30 s do not cover the start-up of the launchers a world waits for."""
        n = self.configuration.launchers
        fields.setdefault("join_timeout", int(REACH_TIMEOUT))
        return self.configuration.spec(
            self.etcd_endpoint, tasks=3, max_nodes=len(WORLD) * n, steps=3, **fields
        )

    def run(
        self, name: str, spec: JobSpec, act: Callable[[SimulatedJob], bool | None]
    ) -> JobResult:
        """Run ``spec`` in its own folder ``name`` and ``act`` on it
        (:func:`harness.jobs.simjob.run_job`)."""
        return run_job(self.request, self.workdir / name, spec, act)

    def c10d_once(self, kind: str, spec: JobSpec, run: Callable[[], T]) -> T:
        """Plain c10d's run of ``spec`` (a :func:`plain_c10d` job) in scenario ``kind``:
        ``run()`` by the first cell of the session that needs it, shared with every other
        (:func:`harness.session.once.once_per_session`). c10d's job does not depend on where a
        cell's store lives or on its watch, so ten runs answer every cell; each runs in
        the same session, under the suite's load, as the cells it answers."""
        shared = once_per_session(self.request, f"c10d|{kind}|{spec!r}", run)
        if shared.computed_by != self.request.node.nodeid:
            print(f"--- c10d: the reference run of {shared.computed_by} (same job)")
        return shared.value

    def record(self, measured: Measured, c10d: Measured | None) -> None:
        """Print the cell's ``MATRIX`` line; with c10d's answer, hold the cell to it."""
        reference = "none (never reads a decision)" if c10d is None else c10d.outcome
        line = (
            f"MATRIX | {self.configuration.name} | {self.scenario} | {measured.outcome} | "
            f"{_seconds(measured.seconds)} | c10d: {reference} | "
            f"{'-' if c10d is None else _seconds(c10d.seconds)}"
        )
        print(line)
        self.request.node.user_properties.append((MATRIX, line))
        if c10d is None or c10d.seconds is None:
            return  # no answer, or c10d never reached the cell's outcome
        assert measured.rounds <= c10d.rounds, f"more rounds than c10d: {line}"
        bound = SLACK * c10d.seconds + MARGIN
        assert measured.seconds is not None and measured.seconds <= bound, (
            f"slower than c10d beyond {SLACK:g} x its time + {MARGIN:g} s: {line}"
        )


def _seconds(value: float | None) -> str:
    return "never" if value is None else f"{value:.1f} s"


def outcome(result: JobResult, excluded: int | None) -> str:
    """The table's words for how ``result`` ended, naming the ``excluded`` unit."""
    final = result.final_round
    if final is None:
        return "no world"
    left = "" if excluded is None else f"; task{excluded} excluded"
    state = "completed" if result.completed else "NOT completed"
    return f"world {final.units} in round {final.number}, {state}{left}"


def assert_excluded_and_reformed(
    result: JobResult, victim: int, survivor: int, *, after_joining: bool, after: int | None = None
) -> None:
    """The job completed in a world of ``survivor`` and the spare, the very next round
    after round ``after`` when given; the victim's process 0 left on its decision file
    (``after_joining`` as given), all of its launchers ended non-zero, every other
    launcher exits 0."""
    final = result.final_round
    assert result.completed and not result.timed_out, result.summary()
    assert final is not None and final.units == tuple(sorted((survivor, SPARE))), result.summary()
    assert after is None or final.number == after + 1, result.summary()
    assert final.world_size == len(WORLD) * result.spec.nodes_per_task
    assert exclusion(result.launcher(victim, 0).log()) == Exclusion(
        ExclusionReason.DECISION_FILE, after_joining
    )
    for outcome in result.unit_launchers(victim):
        assert outcome.returncode not in (None, 0, 93), outcome.label
    for unit in (survivor, SPARE):
        codes = [o.returncode for o in result.unit_launchers(unit)]
        assert codes == [0] * len(codes), (unit, codes)


def victim_of(job: SimulatedJob, first: Round, rank_zero: bool) -> tuple[int, int]:
    """(the unit to mark, the unit that stays) of the world ``first``: the unit holding
    rank 0, or the other one."""
    zero = rank_zero_unit(first)
    other = next(u for u in first.units if u != zero)
    victim, survivor = (zero, other) if rank_zero else (other, zero)
    host = job.spec.store_in_launcher
    assert host is None or not host.startswith(f"task{victim}."), (
        f"the store's host {host} would be excluded (it holds rank 0: {rank_zero})"
    )
    return victim, survivor


def spare_labels(spec: JobSpec) -> list[str]:
    """The spare task's launchers."""
    return [spec.label(SPARE, p) for p in range(spec.nodes_per_task)]
