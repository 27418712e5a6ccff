"""The fault matrix: ordinary failures that torchrun survives, each defined once.

"Do no harm" (docs/concepts.md, "Do no harm"): with the check on and nothing marked, every
failure torchrun survives must be survived the same way and about as fast through the
``segment-health`` wrapper as through plain ``c10d``, and so with the wrapper's watch on
(``segment_health_check_watch_interval``): a watch that finds nothing restarts nobody.
Each :class:`Fault` here is one such failure: the job it hits (one
:class:`nvrx_seghealth._demo.spec.JobSpec`, run once per entry of :data:`RUNS` with
:meth:`Fault.spec_for`), how the harness injects it, and which injected events its
recovery time counts. The integration tests (``integration/test_fault_matrix.py``) and
the benchmark (``bench/recovery.py``) both take their faults from :data:`FAULTS` and run
them with :func:`run_fault`; :func:`outcome` gives the facts every run must share.

Recovery time is :meth:`nvrx_seghealth._demo.outcome.JobResult.recovery`: from the moment
the harness injected the fault until the next world formed (every worker of the first round after
the fault joined its process group).

The worlds that faults hit compute without collectives (:data:`COMPUTE_SECONDS`), as
NCCL training does between collectives: peers then notice a failed rank only through
torchrun's ``num_nodes_waiting``, never through a gloo error, and the recovery path is
the rendezvous alone. Standard library only.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from nvrx_seghealth._demo.job import SimulatedJob
from nvrx_seghealth._demo.outcome import JobResult, Round
from nvrx_seghealth._demo.spec import JobSpec, StartAfter

from . import configurations
from .simjob import kill_agent, kill_worker

__all__ = [
    "COMPUTE_SECONDS",
    "FAULTS",
    "JOB_TIMEOUT",
    "RUNS",
    "WATCH_SECONDS",
    "Fault",
    "FaultNotInjected",
    "Outcome",
    "outcome",
    "run_fault",
]

#: Seconds of collective-free compute in the worlds a fault hits: longer than the
#: slowest recovery worth seeing (a sibling waiting out the hand-off's 30 s bound while
#: its peers compute), so the world's own end never hides a slow recovery. Nothing
#: waits for it: the fault ends that world, and the world after the last fault runs
#: its short steps only.
COMPUTE_SECONDS = 120.0
#: How late process 0 starts in the ``process-0-late`` fault.
LATE_START_SECONDS = 40.0
#: Bound of one fault's job, injection included.
JOB_TIMEOUT = 240.0
#: torch's agent logs this once its round is complete (and so is everyone's).
AGENT_JOINED = r"Rendezvous complete for workers"
#: The watch interval of the watch-on runs: short, so process 0 of every unit looks at
#: its (absent) decision file many times in each world a fault hits.
WATCH_SECONDS = 1.0
#: How each fault's job runs, by name: its backend and watch interval (0: off). Plain
#: ``c10d`` first (the reference), then the wrapper with the check on, then with the
#: watch on too; nothing is ever marked.
RUNS: Mapping[str, tuple[str, float]] = {
    "c10d": ("c10d", 0.0),
    "segment-health": ("segment-health", 0.0),
    "segment-health+watch": ("segment-health", WATCH_SECONDS),
}


class FaultNotInjected(RuntimeError):
    """The job never reached the point where the fault is injected."""


@dataclass(frozen=True)
class Fault:
    """One failure of the matrix.

    Attributes:
        name: a short identifier (``sibling-worker``).
        title: what happens, in a few words.
        spec: the job; :meth:`spec_for` sets the backend and the watch.
        inject: ``inject(job, deadline)`` waits for its moment(s) in the running job and
            injects the fault through the job (which records each event), by the
            ``time.monotonic()`` ``deadline``; raises :class:`FaultNotInjected` otherwise.
        measured: which recorded events (in order) the recovery time adds up.
    """

    name: str
    title: str
    spec: JobSpec
    inject: Callable[[SimulatedJob, float], None]
    measured: tuple[int, ...] = (0,)

    def spec_for(self, run: str) -> JobSpec:
        """The job as run ``run`` of :data:`RUNS` runs it (nothing marked in any).

        Raises:
            ValueError: ``run`` is not a key of :data:`RUNS`.
        """
        if run not in RUNS:
            raise ValueError(f"unknown run {run!r}; choose from {', '.join(RUNS)}")
        backend, watch_interval = RUNS[run]
        return dataclasses.replace(self.spec, backend=backend, watch_interval=watch_interval)

    def recovery(self, result: JobResult) -> float | None:
        """Seconds of recovery from the measured events; ``None`` unless each recovered."""
        if len(result.faults) <= max(self.measured):
            return None
        seconds = [result.recovery(result.faults[index]) for index in self.measured]
        return None if None in seconds else sum(s for s in seconds if s is not None)


@dataclass(frozen=True)
class Outcome:
    """The recorded facts of a fault's job that must not depend on the run (:data:`RUNS`).

    Attributes:
        exits: how each launcher ended, by label: ``exit 0``, ``exit non-zero``,
            ``ended by srun`` or ``never started``.
        worlds: the rounds that formed: ``(round, world size, array tasks, computed)``,
            where ``computed`` says a worker of the round got through its compute phase.
            A world a fault hit must not have: its agents restarted it through the
            rendezvous before, not after its next collective failed on the lost rank.
        completed: the final world finished every step with correct results.
        timed_out: the harness had to stop launchers still running at the time limit.
    """

    exits: Mapping[str, str]
    worlds: tuple[tuple[int, int, tuple[int, ...], bool], ...]
    completed: bool
    timed_out: bool


def outcome(result: JobResult) -> Outcome:
    """The facts of ``result`` that every run of its fault must share."""

    def how(label: str) -> str:
        launcher = result.launchers[label]
        if not launcher.started:
            return "never started"
        if launcher.killed_by_srun:
            return "ended by srun"
        return "exit 0" if launcher.returncode == 0 else "exit non-zero"

    return Outcome(
        exits={label: how(label) for label in result.launchers},
        worlds=tuple(
            (r.number, r.world_size, r.units, any(w.computed_at for w in r.workers))
            for r in result.rounds
            if r.formed
        ),
        completed=result.completed,
        timed_out=result.timed_out,
    )


def run_fault(
    fault: Fault,
    run: str,
    workdir: Path,
    *,
    to_the_end: bool = True,
    timeout: float = JOB_TIMEOUT,
) -> JobResult:
    """Run ``fault``'s job as ``run`` (a key of :data:`RUNS`) in ``workdir``, inject the
    fault, return the result.

    ``to_the_end``: wait until every launcher has exited (the outcome is then complete);
    otherwise stop the job as soon as the measured recovery is known. Bounded by
    ``timeout`` seconds in all.

    Raises:
        FaultNotInjected: the job ended, or the time ran out, before a fault's moment.
    """
    deadline = time.monotonic() + timeout
    with SimulatedJob(fault.spec_for(run), workdir) as job:
        fault.inject(job, deadline)
        if to_the_end:
            return job.wait(timeout=_remaining(deadline))
        try:
            job.wait_until(
                lambda: job.ended or fault.recovery(job.result()) is not None,
                _remaining(deadline),
                "the recovery",
            )
        except TimeoutError:
            pass  # the result says it did not recover
        return job.stop_now()


def _remaining(deadline: float) -> float:
    return max(0.0, deadline - time.monotonic())


def _await(job: SimulatedJob, condition: Callable[[], bool], deadline: float, what: str) -> None:
    """Advance ``job`` until ``condition()``; raise if the job ends or time runs out first."""
    try:
        job.wait_until(lambda: condition() or job.ended, _remaining(deadline), what)
    except TimeoutError as error:
        raise FaultNotInjected(f"{error}; files: {job.paths.workdir}") from None
    if not condition():
        raise FaultNotInjected(f"the job ended before {what}; files: {job.paths.workdir}")


def _world_after(job: SimulatedJob, number: int | None, deadline: float) -> Round:
    """Wait until a round numbered above ``number`` (any, for ``None``) formed; return it."""
    _await(
        job,
        lambda: job.result().formed_after(number) is not None,
        deadline,
        "a world" if number is None else f"a world after round {number}",
    )
    world = job.result().formed_after(number)
    assert world is not None
    return world


def _kill_worker(job: SimulatedJob, world: Round, label: str) -> None:
    records = [w for w in world.workers if w.launcher == label]
    if not records:
        raise FaultNotInjected(f"{label} has no worker in round {world.number}")
    kill_worker(job, records[0])


def _spares_waiting(job: SimulatedJob, labels: Iterable[str], deadline: float) -> None:
    wanted = frozenset(labels)

    def waiting() -> bool:
        found = configurations.spares(job)
        return found is not None and wanted <= found

    _await(
        job,
        waiting,
        deadline,
        f"{', '.join(sorted(wanted))} waiting as spares",
    )


def _worker_failures(label: str, count: int = 1) -> Callable[[SimulatedJob, float], None]:
    """Kill ``label``'s worker ``count`` times: in the first world, then in each next one."""

    def inject(job: SimulatedJob, deadline: float) -> None:
        after = None
        for _ in range(count):
            world = _world_after(job, after, deadline)
            _kill_worker(job, world, label)
            after = world.number

    return inject


def _agent_killed(
    label: str, spares: tuple[str, ...], then_worker_of: str | None = None
) -> Callable[[SimulatedJob, float], None]:
    """Once the first world formed and ``spares`` wait, SIGKILL ``label``'s agent; then,
    if given, kill ``then_worker_of``'s worker in the world that follows."""

    def inject(job: SimulatedJob, deadline: float) -> None:
        world = _world_after(job, None, deadline)
        _spares_waiting(job, spares, deadline)
        kill_agent(job, label)
        if then_worker_of is not None:
            _kill_worker(job, _world_after(job, world.number, deadline), then_worker_of)

    return inject


def _late_start(job: SimulatedJob, deadline: float) -> None:
    """The fault is in the spec (a start delay): record it at the job's launch."""
    late = ", ".join(f"{label} {delay:g} s" for label, delay in job.spec.start_delays.items())
    job.record_fault(f"launchers started late: {late}", None, at=job.started_at)


#: Two array tasks of two nodes, every launcher needed (``--nnodes=4:4``).
_TWO_TASKS = JobSpec(tasks=2, max_restarts=1, compute_seconds=COMPUTE_SECONDS)
#: The launchers of the spare task of :data:`_WITH_SPARE_TASK`.
_SPARE_TASK = ("task2.proc0", "task2.proc1")
#: Three array tasks of two nodes for a world of four (``--nnodes=4:4``). Task 2 starts
#: once round 0 is complete, so both its launchers wait as spares (torch's redundancy
#: list) and take a failed task's place.
_WITH_SPARE_TASK = JobSpec(
    tasks=3,
    max_nodes=4,
    max_restarts=1,
    compute_seconds=COMPUTE_SECONDS,
    start_after={label: StartAfter("task0.proc0", AGENT_JOINED) for label in _SPARE_TASK},
)


#: Every fault of the matrix, in the order of the tables.
FAULTS: tuple[Fault, ...] = (
    Fault(
        "process-0-worker",
        "worker failure on process 0's node",
        _TWO_TASKS,
        _worker_failures("task1.proc0"),
    ),
    Fault(
        "sibling-worker",
        "worker failure on a sibling (SLURM_PROCID=1) while its peers compute",
        _TWO_TASKS,
        _worker_failures("task1.proc1"),
    ),
    Fault(
        # A spare runs no worker while it waits: its worker can fail once it has been
        # promoted, here by the sibling-agent-killed fault. Measured: the second event.
        "spare-worker",
        "worker failure on a spare (promoted after a task was lost; its sibling node)",
        dataclasses.replace(_WITH_SPARE_TASK, compute_rounds=2),
        _agent_killed("task1.proc1", _SPARE_TASK, then_worker_of="task2.proc1"),
        measured=(1,),
    ),
    Fault(
        "sibling-agent-killed",
        "a sibling's agent SIGKILLed (srun ends its task; the spare task steps in)",
        _WITH_SPARE_TASK,
        _agent_killed("task1.proc1", _SPARE_TASK),
    ),
    Fault(
        "sibling-worker-twice",
        "two successive worker failures on a sibling, the second after the first recovery",
        dataclasses.replace(_TWO_TASKS, max_restarts=2, compute_rounds=2),
        _worker_failures("task1.proc1", count=2),
        measured=(0, 1),
    ),
    Fault(
        # Every launcher is needed, so the first world waits for the late one; the
        # rendezvous must wait longer than the delay plus start-up.
        "process-0-late",
        f"process 0 starts {LATE_START_SECONDS:g} s after its siblings (to the first world)",
        JobSpec(
            tasks=2,
            max_restarts=1,
            join_timeout=120,
            start_delays={"task1.proc0": LATE_START_SECONDS},
        ),
        _late_start,
    ),
)
