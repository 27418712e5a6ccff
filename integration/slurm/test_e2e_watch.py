"""End to end: a drain while the array trains re-forms the world in seconds, with the watch.

The example array runs as three one-node tasks (``--nodes=1 --exclusive``) with
``--nnodes=2:2`` and the watch on (``segment_health_check_watch_interval=1``): two tasks
train in a world of two, the third waits as a spare. ``publish-drained --interval 600
--pid-file`` follows the array (its polling cannot explain a decision), and a permanent
``strigger --set --node --drained`` runs ``examples/publish-drained-now.sh`` to wake it.
The node of one training task is drained together with the cluster's idle fourth node:
Slurm 22.05 raises ``--drained`` only for a node without jobs, so the idle node fires the
trigger (see ``test_publish_drained_trigger.py``). Nothing fails: the trigger wakes the
producer, its pass writes the task's decision, the task's process 0 finds it on its next
look and excludes the unit during training, every launcher restarts its workers (a
membership change, which counts no restart), srun ends the drained task, and the other
task and the spare finish in a new world of two. The drain's timeline is printed.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from harness.jobs.slurmjob import (
    array_task_exit_reported,
    exclusion_line,
    formed_world,
    task_of,
    training,
)
from harness.ports import PORT_TAKEN
from harness.services.slurm import PROGRAM, drained, running_nodes, running_producer, trigger
from nvrx_seghealth._producer.publisher import producer_tag

if TYPE_CHECKING:
    from harness.services.slurm import SlurmCluster

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(300)]

NAME = "watch"
REASON = "e2e: link flaps"
WATCH_INTERVAL = 1.0


def test_a_drain_during_training_reaches_a_new_world_through_the_trigger_and_the_watch(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    cluster = slurm_cluster
    with training(cluster, tmp_path) as run:
        # Round 0 trains 200 steps of 0.25 s, through the trigger's period (about 15 s)
        # and the restart; the new world 20. With --nnodes=2:2, round 0 completes as soon
        # as two launchers have joined, and the third waits.
        job_id = run.submit(
            NAME, "--nodes=1", "--exclusive", nnodes="2:2", steps=20, step_seconds=0.25,
            watch_interval=WATCH_INTERVAL, first_round_steps=200,
        )  # fmt: skip
        records = run.wait_records(
            NAME, lambda records: bool(formed_world(records, 2)), "world of two", timeout=150
        )
        first = formed_world(records, 2)
        assert first[0].round == 0, first
        members = sorted({r.array_task for r in first if r.array_task is not None})
        nodes = running_nodes(cluster, job_id)
        assert sorted(nodes) == ["0", "1", "2"], nodes
        [spare] = [int(task) for task in nodes if int(task) not in members]
        victim = max(members)
        [node] = nodes[str(victim)]
        [idle] = [n for n in cluster.nodes if all(n not in used for used in nodes.values())]
        decisions = run.decisions(job_id)
        decision = decisions / f"segment_health_check.{job_id}.{victim}"
        pid_file = tmp_path / "publish-drained.pid"
        with (
            running_producer(cluster, job_id, decisions, pid_file),
            trigger(cluster, "drained", f"{PROGRAM} {pid_file}"),
        ):
            assert not decision.exists()
            drained_at = time.time()
            with drained(cluster, [node, idle], REASON):
                jobs = cluster.wait_job(job_id, timeout=200)
        written_at = decision.stat().st_mtime

    assert decision.read_text() == (
        f"{producer_tag('t')} unavailable nodes: {node} drng ({REASON})\n"
    )
    excluded = task_of(jobs, str(victim))
    assert excluded.state == "FAILED" and excluded.exit_code in ((1, 0), (143, 0)), excluded.fields
    for task in {0, 1, 2} - {victim}:
        job = task_of(jobs, str(task))
        assert (job.state, job.exit_code) == ("COMPLETED", (0, 0)), job.fields

    finished = [r for r in run.records(NAME) if r.completed]
    # Each worker here ran in an array task: its task id is not None.
    tasks = sorted(r.array_task for r in finished)  # type: ignore[type-var]
    assert tasks == sorted({0, 1, 2} - {victim})
    assert {r.world_size for r in finished} == {2} and len({r.round for r in finished}) == 1
    assert finished[0].round is not None and finished[0].round > 0
    # Restarted by a membership change, not a failure: no restart is counted, unless a
    # worker lost torch's race for the port of the workers' store (its task says so).
    for record in finished:
        if record.restart_count:
            restarted = task_of(jobs, str(record.array_task))
            assert PORT_TAKEN in run.output(NAME, restarted), (record, "a restart was counted")
    assert not [r for r in run.records(NAME) if r.round == 0 and r.completed]

    out = run.output(NAME, excluded)
    assert exclusion_line(job_id, str(victim), decision, during_training=True).search(out), out
    assert array_task_exit_reported(out), out

    formed_at = min(r.initialized_at for r in finished if r.initialized_at is not None)
    print(
        f"drain during training, trigger + watch (W = {WATCH_INTERVAL:g} s): task {victim} "
        f"drained, spare task {spare} in; drain -> decision file {written_at - drained_at:.1f} "
        f"s, drain -> new world without it {formed_at - drained_at:.1f} s"
    )
