"""End to end: a spare marked while it waits, then a worker's failure, never ends the array.

The example array runs as three one-node tasks (``--nodes=1 --exclusive``) with
``--nnodes=2:2``, ``--max-restarts=3`` and the watch off, as the script sets it: no
``TORCH_ELASTIC_WORKER_IDENTICAL``. Two tasks train in a world of two; the third waits as
a spare in torch's redundancy list and is marked there (``nvrx-seghealth mark``). Then one
training task's worker is killed (a failure its agent restarts). The two training tasks
finish in a new world of two; the spare never trains.

- torch admits whichever waiting node asks first; when it admits the spare (2 of 2 runs
  here), its process 0 excludes it right after joining, and the others re-form without it.
- Before af8b006, the others then waited in torch's rank exchange for the spare until the
  store read timed out (60 s), and every task failed.
"""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from harness.jobs.slurmjob import exclusion_line, formed_world, task_of, training
from harness.services.slurm import running_nodes
from harness.waits import wait_until
from nvrx_seghealth._demo.rendezvous_state import read_endpoint

if TYPE_CHECKING:
    from harness.services.slurm import SlurmCluster

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(300)]

NAME = "spare"
#: The cluster's name (start.sh): the script's rendezvous id is ``<cluster>-<job id>``.
CLUSTER_NAME = "nvrxtest"


def test_a_spare_marked_while_it_waits_then_a_worker_failure_never_ends_the_array(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    cluster = slurm_cluster
    with training(cluster, tmp_path) as run:
        # Round 0 trains 200 steps of 0.25 s, through the mark and the failure; the new
        # world 20. With --nnodes=2:2, round 0 completes once two launchers joined.
        job_id = run.submit(
            NAME, "--nodes=1", "--exclusive", nnodes="2:2", steps=20, step_seconds=0.25,
            first_round_steps=200, max_restarts=3,
        )  # fmt: skip
        records = run.wait_records(
            NAME, lambda records: bool(formed_world(records, 2)), "world of two", timeout=150
        )
        first = formed_world(records, 2)
        members = sorted({r.array_task for r in first if r.array_task is not None})
        nodes = running_nodes(cluster, job_id)
        assert sorted(nodes) == ["0", "1", "2"], nodes
        [spare] = [int(task) for task in nodes if int(task) not in members]
        run_id = f"{CLUSTER_NAME}-{job_id}"
        timeout = datetime.timedelta(seconds=30)
        wait_until(lambda: read_endpoint("c10d", run.store.endpoint, run_id, timeout).spares, 120)
        decision = run.mark(job_id, str(spare), "e2e: ECC errors")
        [victim] = [r for r in first if r.array_task == max(members)]
        run.kill_worker(victim)
        jobs = cluster.wait_job(job_id, timeout=200)

    for task in members:
        job = task_of(jobs, str(task))
        assert (job.state, job.exit_code) == ("COMPLETED", (0, 0)), job.fields
    finished = [r for r in run.records(NAME) if r.completed]
    assert sorted(r.array_task for r in finished) == members  # type: ignore[type-var]
    assert {r.world_size for r in finished} == {2} and len({r.round for r in finished}) == 1
    assert not [r for r in run.records(NAME) if r.array_task == spare]
    excluded = task_of(jobs, str(spare))
    out = run.output(NAME, excluded)
    admitted = exclusion_line(job_id, str(spare), decision, during_training=True).search(out)
    if admitted:  # torch admitted it to the new round, and it left right after joining
        assert (excluded.state, excluded.exit_code) == ("FAILED", (1, 0)), excluded.fields
    print(f"spare task {spare}: {'excluded right after joining' if admitted else 'not admitted'}")
