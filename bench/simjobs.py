"""Whole simulated jobs for rows 1, 2 and 6: run one, read the facts the rows need.

Every job is real: one ``torchrun`` agent per simulated node on 127.0.0.1, a store
outside every allocation unit, ``srun --kill-on-bad-exit=1`` per unit (see
:mod:`nvrx_seghealth._demo`). Times come from the workers' own records and the
harness's launch time, never from how long the harness took to notice.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from nvrx_seghealth._demo import JobResult, JobSpec, SimulatedJob, WorkerRecord

__all__ = ["JobFacts", "first_world_started", "run_job", "some_world_completed"]

#: Seconds one simulated job may run before the harness stops it.
JOB_TIMEOUT = 180.0


@dataclass(frozen=True)
class JobFacts:
    """What one simulated job did, as the rows use it.

    Attributes:
        completed: the final world finished every step with correct all-reduce results.
        first_world_started: seconds from launch until every worker of round 0 had
            started (``None`` when round 0 never started all its workers).
        completed_after: seconds from launch until the last worker of the final world
            finished (``None`` when the job did not complete).
        rounds: rendezvous rounds up to the final world (the final round number + 1).
        rounds_with_workers: rounds that started at least one worker.
        units_in_first_round: the allocation units whose workers started in round 0.
        summary: one line: rounds and the final world.
        kept: where the job's files were kept (only when it did not complete).
        log_excerpt: lines of the launchers' logs that name the failure (incomplete
            jobs only), e.g. a rejected ``--rdzv-conf`` key.
    """

    completed: bool
    first_world_started: float | None
    completed_after: float | None
    rounds: int
    rounds_with_workers: int
    units_in_first_round: tuple[int, ...]
    summary: str
    kept: Path | None = None
    log_excerpt: str = ""


def _rounds(records: list[WorkerRecord]) -> dict[int, list[WorkerRecord]]:
    """The records by round; a worker whose round could not be read is in none."""
    rounds: dict[int, list[WorkerRecord]] = {}
    for record in records:
        if record.round is not None:
            rounds.setdefault(record.round, []).append(record)
    return rounds


def first_world_started(records: list[WorkerRecord]) -> bool:
    """Every worker of the first round that started workers has started."""
    rounds = _rounds(records)
    if not rounds:
        return False
    first = rounds[min(rounds)]
    return len(first) == first[0].world_size


def some_world_completed(records: list[WorkerRecord]) -> bool:
    """Every worker of some round finished all its steps with correct results."""
    return any(
        len(workers) == workers[0].world_size and all(w.completed for w in workers)
        for workers in _rounds(records).values()
    )


def _summary(result: JobResult, completed: bool) -> str:
    final = result.final_round
    if final is None:
        return f"{result.round_count} round(s), no world"
    return (
        f"{result.round_count} round(s), final world {final.world_size} from units "
        f"{list(final.units)} in round {final.number}, "
        f"{'completed' if completed else 'not completed'}"
    )


def _facts(result: JobResult, kept: Path | None) -> JobFacts:
    rounds = result.rounds
    first = rounds[0] if rounds else None
    started = None
    if first is not None and len(first.workers) == first.world_size:
        started = max(w.started_at for w in first.workers) - result.started_at
    final = result.final_round
    # The job is stopped deliberately once it has what the row measures, so the
    # harness's own verdict (which counts that stop as a time-out) is not used.
    completed = final is not None and final.completed
    completed_after = None
    if completed and final is not None:
        finished = [w.finished_at for w in final.workers if w.finished_at is not None]
        completed_after = max(finished) - result.started_at
    excerpt = ""
    if not completed:
        lines = [
            line
            for outcome in result.launchers.values()
            if outcome.started
            for line in outcome.log().splitlines()
            if "Error" in line or "error:" in line
        ]
        excerpt = "\n".join(dict.fromkeys(lines))[:2000]
    return JobFacts(
        completed=completed,
        first_world_started=started,
        completed_after=completed_after,
        rounds=result.round_count,
        rounds_with_workers=len(rounds),
        units_in_first_round=first.units if first is not None else (),
        summary=_summary(result, completed),
        kept=kept,
        log_excerpt=excerpt,
    )


def run_job(
    spec: JobSpec,
    until: Callable[[list[WorkerRecord]], bool] = some_world_completed,
    timeout: float = JOB_TIMEOUT,
) -> JobFacts:
    """Run ``spec`` until ``until(worker records)`` holds or no launcher runs; stop it.

    Whatever still runs then is stopped: the agents' exit after training (a barrier
    and the rendezvous' close, seconds on a busy machine) is not what the rows measure
    and would only make the benchmark longer. The job's files (logs, worker records)
    are removed when ``until`` held and kept in a temporary directory otherwise;
    :attr:`JobFacts.kept` names it.
    """
    workdir = Path(tempfile.mkdtemp(prefix="nvrx-bench-job-"))
    # Stopping a job on purpose makes the harness warn that it was still running.
    logging.getLogger(SimulatedJob.__module__).setLevel(logging.ERROR)
    with SimulatedJob(spec, workdir) as job:

        def reached() -> bool:
            ended = not any(launcher.running for launcher in job.launchers.values())
            return ended or until(job.workers())

        try:
            job.wait_until(reached, timeout, "the measured point of the job")
        except TimeoutError:
            pass
        held = until(job.workers())
        result = job.wait(timeout=0)  # stops what still runs
    kept = None if held else workdir
    facts = _facts(result, kept)
    if kept is None:
        shutil.rmtree(workdir, ignore_errors=True)
    return facts
