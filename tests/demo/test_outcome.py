"""The demo's outcome held against the contract (:func:`check_outcome`), from recorded
facts: the marked tasks out of the final world, the healthy ones in, the world whole, the
job completed."""

from __future__ import annotations

from pathlib import Path

import pytest

from nvrx_seghealth._demo import JobResult, JobSpec, WorkerRecord
from nvrx_seghealth._demo.outcome import LauncherOutcome, check_outcome
from nvrx_seghealth._demo.paths import RunPaths

#: Three tasks of one node each, a world of two: task 1 marked, one spare.
SPEC = JobSpec(tasks=3, nodes_per_task=1, min_nodes=2, max_nodes=2)


def worker(task: int, round_: int, *, done: bool = True, world: int = 2) -> WorkerRecord:
    """Task ``task``'s worker in ``round_`` of a world of ``world``, in the process group
    at 5 s."""
    return WorkerRecord(
        f"task{task}.proc0", task, 0, 100 * round_ + task, task % world, world, task % world,
        world,
        round_, 0, 4.0, 5.0, None, 5 if done else 2, 6.0 if done else None,
        True if done else None,
    )  # fmt: skip


def result(
    tmp_path: Path,
    workers: list[WorkerRecord],
    *,
    marked: tuple[int, ...] = (1,),
    spec: JobSpec = SPEC,
    timed_out: bool = False,
) -> JobResult:
    """A job whose ``marked`` tasks had decision files, and whose ``workers`` ran."""
    paths = RunPaths(tmp_path)
    launchers = {
        label: LauncherOutcome(label, unit, 0, 10 + unit, 0, False, tmp_path / "none.log", 0, 9)
        for unit, label in enumerate(spec.labels)
    }
    decisions = {unit: paths.decisions / f"segment_health_check.1000.{unit}" for unit in marked}
    return JobResult(spec, paths, launchers, workers, decisions, 0.0, 10.0, timed_out)


def test_the_marked_task_left_out_and_the_job_completed_is_as_expected(tmp_path: Path) -> None:
    assert check_outcome(result(tmp_path, [worker(0, 0), worker(2, 0)])) == []


def test_a_world_that_later_left_the_marked_task_out_is_as_expected(tmp_path: Path) -> None:
    """Only the final world counts (``demo --watch``: the first one trained on it)."""
    workers = [worker(0, 0, done=False), worker(1, 0, done=False), worker(0, 1), worker(2, 1)]
    assert check_outcome(result(tmp_path, workers)) == []


@pytest.mark.parametrize(
    ("workers", "problems"),
    [
        pytest.param([], ["no world ever formed", "the job did not complete"], id="no-world"),
        pytest.param(
            [worker(0, 0), worker(1, 0)],
            ["marked tasks in the final world: [1]", "healthy tasks [0, 2] are not all in the final world"],
            id="marked-in-the-world",
        ),
        pytest.param(
            [worker(0, 0, world=1)],
            ["the final world has 1 nodes, not 2", "healthy tasks [0, 2] are not all in the final world"],
            id="world-not-whole",
        ),
        pytest.param(
            [worker(0, 0), worker(2, 0, done=False)],
            ["the job did not complete"],
            id="not-completed",
        ),
    ],
)  # fmt: skip
def test_each_difference_from_the_contract_is_named(
    tmp_path: Path, workers: list[WorkerRecord], problems: list[str]
) -> None:
    assert check_outcome(result(tmp_path, workers)) == problems


def test_a_job_that_timed_out_did_not_complete(tmp_path: Path) -> None:
    done = result(tmp_path, [worker(0, 0), worker(2, 0)], timed_out=True)
    assert check_outcome(done) == ["the job did not complete"]


def test_too_few_healthy_tasks_is_said_with_why_no_world_forms(tmp_path: Path) -> None:
    """Two of three tasks marked, two needed: the exclusion is never relaxed."""
    problems = check_outcome(result(tmp_path, [], marked=(0, 1)))
    assert problems == [
        "no world ever formed",
        (
            "only 1 healthy tasks for the 2 the job needs: the rendezvous cannot form (the "
            "exclusion is never relaxed to reach quorum)"
        ),
        "the job did not complete",
    ]


def test_with_more_healthy_tasks_than_needed_any_of_them_may_train(tmp_path: Path) -> None:
    """No task marked, one spare: a world of tasks 0 and 2 leaves a healthy task out, as
    it may."""
    assert check_outcome(result(tmp_path, [worker(0, 0), worker(2, 0)], marked=())) == []
