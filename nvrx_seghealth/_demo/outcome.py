"""What a simulated job did: launcher exits, worker records, rendezvous rounds.

Everything here is read from recorded facts (exit codes, log files, worker records);
nothing is inferred from the absence of an exception. :func:`check_outcome` holds the
facts against the contract the demo shows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .paths import RunPaths, read_log
from .records import WorkerRecord
from .spec import JobSpec
from .telemetry import RecordedEvent, RecordedMetric, read_events, read_metrics

__all__ = ["FaultEvent", "JobResult", "LauncherOutcome", "Round", "check_outcome"]


@dataclass(frozen=True)
class FaultEvent:
    """A fault the harness injected, recorded at the moment it did.

    Attributes:
        what: which fault, e.g. ``"SIGKILL worker pid 123 of task1.proc1"``.
        at: wall-clock time of the injection.
        round: the round of the world the fault hit; ``None`` when no world had
            started workers yet (a launcher that starts late delays the first world),
            or when the round of the worker it hit is unknown.
    """

    what: str
    at: float
    round: int | None


@dataclass(frozen=True)
class LauncherOutcome:
    """How one launcher ended.

    Attributes:
        label, unit, procid: which launcher.
        pid: its process id, ``None`` when it never started.
        returncode: its exit code (negative: killed by that signal), ``None`` when it
            never started.
        killed_by_srun: the emulated srun ended its step and signalled it.
        log_path: its log (agent and workers).
        started_at, ended_at: wall-clock times, ``None`` when it never started.
        events_path, metrics_path: its recorded telemetry, ``None`` when the job
            recorded none (:attr:`.spec.JobSpec.record_telemetry`).
    """

    label: str
    unit: int
    procid: int
    pid: int | None
    returncode: int | None
    killed_by_srun: bool
    log_path: Path
    started_at: float | None
    ended_at: float | None
    events_path: Path | None = None
    metrics_path: Path | None = None

    @property
    def started(self) -> bool:
        """Whether the launcher was started at all."""
        return self.pid is not None

    def log(self) -> str:
        """The launcher's whole log."""
        return read_log(self.log_path)

    def events(self) -> list[RecordedEvent]:
        """The rendezvous events its agent recorded (torch's and the wrapper's)."""
        return read_events(self.events_path)

    def metrics(self) -> list[RecordedMetric]:
        """The ``nvrx_seghealth`` metrics its agent recorded."""
        return read_metrics(self.metrics_path)


@dataclass(frozen=True)
class Round:
    """The workers one rendezvous round started.

    Attributes:
        number: the torch rendezvous round (0-based).
        world_size: the world size the round announced to its workers.
        workers: the records of the workers that started in it, by rank.
        units: the allocation units (array task ids) of those workers.
    """

    number: int
    world_size: int
    workers: tuple[WorkerRecord, ...]
    units: tuple[int, ...]

    @property
    def formed(self) -> bool:
        """Every rank of the world joined the process group."""
        joined = [w for w in self.workers if w.initialized_at is not None]
        return len(joined) == self.world_size

    @property
    def formed_at(self) -> float | None:
        """When the last rank joined the process group, if the world formed."""
        if not self.formed:
            return None
        return max(w.initialized_at for w in self.workers if w.initialized_at is not None)

    @property
    def completed(self) -> bool:
        """Every rank of the world finished all steps with correct results."""
        return len(self.workers) == self.world_size and all(w.completed for w in self.workers)


@dataclass(frozen=True)
class JobResult:
    """The recorded outcome of one simulated job.

    Attributes:
        spec: what was simulated. paths: where its files are.
        launchers: every launcher's outcome, by label, in spec order.
        workers: every worker record.
        decisions: the decision file of each marked unit.
        started_at, ended_at: wall-clock bounds of the job.
        timed_out: the harness had to stop launchers that were still running.
        faults: the faults the harness injected, in order.
    """

    spec: JobSpec
    paths: RunPaths
    launchers: Mapping[str, LauncherOutcome]
    workers: Sequence[WorkerRecord]
    decisions: Mapping[int, Path]
    started_at: float
    ended_at: float
    timed_out: bool
    faults: Sequence[FaultEvent] = ()

    @property
    def duration(self) -> float:
        """Seconds from the first launch to the last exit."""
        return self.ended_at - self.started_at

    @property
    def rounds(self) -> list[Round]:
        """The rounds that started workers, in order (workers of an unknown round are
        in none: :attr:`workers_of_unknown_round`)."""
        numbers = sorted({w.round for w in self.workers if w.round is not None})
        return [self._round(n) for n in numbers]

    @property
    def workers_of_unknown_round(self) -> list[WorkerRecord]:
        """The workers that could not read their round from torch's rendezvous state."""
        return [w for w in self.workers if w.round is None]

    def _round(self, number: int) -> Round:
        workers = sorted((w for w in self.workers if w.round == number), key=lambda w: w.rank)
        units = sorted({self.launchers[w.launcher].unit for w in workers})
        return Round(number, workers[0].world_size, tuple(workers), tuple(units))

    @property
    def final_round(self) -> Round | None:
        """The last round that started workers."""
        rounds = self.rounds
        return rounds[-1] if rounds else None

    @property
    def round_count(self) -> int:
        """Rendezvous rounds up to the final world (rounds that started no worker count too)."""
        final = self.final_round
        return 0 if final is None else final.number + 1

    @property
    def completed(self) -> bool:
        """Every rank of the final world finished its steps, within the time limit.

        Launcher exit codes are facts of their own: an unused spare exits 1 when the
        finished job closes the rendezvous (torch raises ``RendezvousGracefulExitError``
        and then fails on its result), and srun may then signal its unit's other
        launchers.
        """
        final = self.final_round
        return not self.timed_out and final is not None and final.completed

    @property
    def time_to_healthy_world(self) -> float | None:
        """Seconds from the first launch until the final world had formed."""
        final = self.final_round
        formed = None if final is None else final.formed_at
        return None if formed is None else formed - self.started_at

    def formed_after(self, number: int | None) -> Round | None:
        """The first round numbered above ``number`` (any round for ``None``) that formed."""
        return next(
            (r for r in self.rounds if (number is None or r.number > number) and r.formed), None
        )

    def recovery(self, fault: FaultEvent) -> float | None:
        """Seconds from ``fault`` until the next world formed; ``None`` if none did.

        The next world is the first round after the round the fault hit (the first
        round at all for a fault before any world) whose workers all initialized their
        process group: from then on the job trains again. The one definition of
        recovery time, used by the integration tests and the benchmark alike.
        """
        world = self.formed_after(fault.round)
        formed = None if world is None else world.formed_at
        return None if formed is None else formed - fault.at

    def launcher(self, unit: int, procid: int) -> LauncherOutcome:
        """The outcome of launcher ``procid`` of ``unit``."""
        return self.launchers[self.spec.label(unit, procid)]

    def unit_launchers(self, unit: int) -> list[LauncherOutcome]:
        """The outcomes of ``unit``'s launchers, by procid."""
        return [self.launcher(unit, p) for p in range(self.spec.nodes_per_task)]

    def summary(self) -> str:
        """One line: duration, rounds and final world."""
        final = self.final_round
        world = (
            "no world"
            if final is None
            else (
                f"final world {final.world_size} from units {list(final.units)} in round "
                f"{final.number}, {'completed' if self.completed else 'not completed'}"
            )
        )
        timed_out = ", TIMED OUT" if self.timed_out else ""
        return f"{self.duration:.1f} s, {self.round_count} round(s), {world}{timed_out}"


def check_outcome(result: JobResult) -> list[str]:
    """What, if anything, differs from the contract; an empty list means as expected.

    The contract: the marked tasks are absent from the final world, the healthy tasks
    are in it when the job needs them all, the world is whole, and the job completed.
    The marked tasks are those with a decision file, written at launch or while the
    job trained (``demo --watch``).
    """
    spec = result.spec
    marked = set(result.decisions)
    healthy = sorted(set(spec.units) - marked)
    needed = spec.nnodes[1] // spec.nodes_per_task
    final = result.final_round
    problems = []
    if final is None:
        problems.append("no world ever formed")
    else:
        if set(final.units) & marked:
            problems.append(f"marked tasks in the final world: {sorted(set(final.units) & marked)}")
        if final.world_size != spec.nnodes[1]:
            problems.append(f"the final world has {final.world_size} nodes, not {spec.nnodes[1]}")
        if len(healthy) <= needed and sorted(final.units) != healthy:
            problems.append(f"healthy tasks {healthy} are not all in the final world")
    if len(healthy) < needed:
        problems.append(
            f"only {len(healthy)} healthy tasks for the {needed} the job needs: the "
            "rendezvous cannot form (the exclusion is never relaxed to reach quorum)"
        )
    if not result.completed:
        problems.append("the job did not complete")
    return problems
