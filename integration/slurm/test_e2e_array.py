"""End to end: a job array whose task 1 has a decision before it starts.

``examples/segment-health-array.sbatch`` is submitted as it stands (``--array=0-2``,
``--no-requeue``, 2 nodes per task, one launcher per node, ``--nnodes=4:6``) with
``--hold``; the decision of task 1 is published under the array job id that sbatch
returned, then the array is released. All three tasks run at once (2 of the 4 nodes'
CPUs each). Task 1's process 0 is excluded and srun ends the task; tasks 0 and 2 train
together. The run happens once per module; each test reads one side of it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from harness.jobs.slurmjob import (
    Training,
    array_task_exit_reported,
    exclusion_line,
    install_line,
    task_of,
    training,
)

if TYPE_CHECKING:
    from harness.services.slurm import Job, SlurmCluster

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(240)]

NAME = "array"


@dataclass(frozen=True)
class ArrayRun:
    """The finished array: its id, one ``scontrol`` record per task, task 1's decision."""

    run: Training
    job_id: str
    jobs: list[Job]
    decision: Path

    def task(self, task: str) -> Job:
        return task_of(self.jobs, task)

    def output(self, task: str) -> str:
        return self.run.output(NAME, self.task(task))


@pytest.fixture(scope="module")
def array(
    slurm_cluster: SlurmCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ArrayRun]:
    """Run the array once for the module."""
    with training(slurm_cluster, tmp_path_factory.mktemp("e2e-array")) as run:
        job_id = run.submit(NAME, "--hold", nnodes="4:6", steps=5)
        decision = run.mark(job_id, "1", "e2e: task 1 must not be used")
        slurm_cluster.run("scontrol", "release", job_id)
        yield ArrayRun(run, job_id, slurm_cluster.wait_job(job_id, timeout=150), decision)


def test_the_task_with_a_decision_fails_and_srun_ends_its_step(array: ArrayRun) -> None:
    job = array.task("1")
    # srun's exit code is the largest of its tasks': process 0's 1, or 143 when srun's
    # SIGTERM ended process 1 (not yet in its rendezvous, or waiting in it).
    assert job.state == "FAILED" and job.exit_code in ((1, 0), (143, 0)), job.fields
    assert job.fields["Requeue"] == "0", "--no-requeue from the script"
    out = array.output("1")
    assert exclusion_line(array.job_id, "1", array.decision).search(out), out
    assert array_task_exit_reported(out), out
    assert f"_step_signal: Terminating StepId={job.job_id}.0" in out
    assert not [r for r in array.run.records(NAME) if r.array_task == 1], "task 1 never trained"


def test_the_other_tasks_train_together_without_it(array: ArrayRun) -> None:
    for task in ("0", "2"):
        job = array.task(task)
        assert (job.state, job.exit_code) == ("COMPLETED", (0, 0)), task
    finished = [r for r in array.run.records(NAME) if r.completed]
    assert len(finished) == 4
    assert {r.world_size for r in finished} == {4}
    assert len({r.round for r in finished}) == 1, "one world"
    assert sorted(r.rank for r in finished) == [0, 1, 2, 3]
    assert sorted((r.array_task, r.procid) for r in finished) == [(0, 0), (0, 1), (2, 0), (2, 1)]


def test_identities_come_from_slurm(array: ArrayRun) -> None:
    decisions = array.run.decisions(array.job_id)
    assert sorted(job.fields["ArrayTaskId"] for job in array.jobs) == ["0", "1", "2"]
    for job in array.jobs:
        task = job.fields["ArrayTaskId"]
        assert job.fields["ArrayJobId"] == array.job_id
        # The last task keeps the array's id as its job id; the others get new ones.
        assert (job.job_id == array.job_id) == (task == "2"), job.fields
        out = array.output(task)
        # SLURM_ARRAY_JOB_ID, SLURM_ARRAY_TASK_ID and SLURM_JOB_ID as the task saw them.
        assert (
            f"segment-health: array job {array.job_id} task {task} is job {job.job_id} on "
            f"{job.fields['NodeList']}; decisions in {decisions}\n" in out
        )
        # Exactly one install line: process 0's, naming the file from the array ids
        # (never from SLURM_JOB_ID); process 1 installs no check.
        assert out.count("Segment health check installed") == 1, out
        assert install_line(0, decisions, array.job_id, task).search(out), out
