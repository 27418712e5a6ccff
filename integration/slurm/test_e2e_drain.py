"""End to end: Slurm DRAIN while the array trains, consumed at the next rendezvous.

The example array (3 tasks of 2 nodes, ``--nnodes=4:6``) trains in a world of six. A
node of task 2 is drained; Slurm does not evict the running task. The reference producer
(``nvrx-seghealth publish-drained --once``, run as an operator would) publishes task 2's
decision. A worker of task 0 then dies (SIGKILL): torchrun restarts the worker groups and
every launcher comes back to the rendezvous, where task 2's process 0 reads the decision
and is excluded; srun ends task 2, and tasks 0 and 1 finish the training in a world of
four. The node is resumed in any case.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from harness.commands import nvrx_seghealth
from harness.jobs.slurmjob import (
    array_task_exit_reported,
    exclusion_line,
    formed_world,
    install_line,
    task_of,
    training,
)
from harness.services.slurm import node_state
from nvrx_seghealth._producer.publisher import producer_tag

if TYPE_CHECKING:
    from harness.services.slurm import SlurmCluster

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(240)]

NAME = "drain"
REASON = "e2e: ecc errors"


def test_a_drained_task_is_excluded_at_the_next_rendezvous(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    with training(slurm_cluster, tmp_path) as run:
        # 60 steps of 0.25 s: the world of six still trains while the node is drained and
        # the decision published (a few seconds); the world of four takes 15 s more.
        job_id = run.submit(NAME, nnodes="4:6", steps=60, step_seconds=0.25)
        # Usually round 0; launchers that start late make a second round.
        records = run.wait_records(
            NAME, lambda records: bool(formed_world(records, 6)), "world of six", timeout=150
        )
        first = formed_world(records, 6)
        nodelist = task_of(slurm_cluster.jobs(job_id), "2").fields["NodeList"]
        node = slurm_cluster.run("scontrol", "show", "hostnames", nodelist).stdout.split()[0]
        decisions = run.decisions(job_id)
        with node_state(slurm_cluster, node, "drain", REASON):
            done = nvrx_seghealth(
                "publish-drained", "--dir", str(decisions), "--job-id", job_id, "--once",
                "--slurm-timeout", "10", "--producer-id", "e2e", env=slurm_cluster.env)  # fmt: skip
            assert done.returncode == 0, done.stdout + done.stderr
            written = [p.name for p in decisions.iterdir() if not p.name.startswith(".")]
            assert written == [f"segment_health_check.{job_id}.2"]
            still = [r for r in run.records(NAME) if r.round == first[0].round]
            assert not [r for r in still if r.finished_at], "the world of six still trains"
            [victim] = [r for r in first if (r.array_task, r.procid) == (0, 1)]
            run.kill_worker(victim)
            jobs = slurm_cluster.wait_job(job_id, timeout=150)
            # Task 2 ended by its exclusion, not by Slurm: only now is the node drained.
            state = slurm_cluster.run("sinfo", "-h", "-N", "-n", node, "-o", "%t").stdout
            assert state.strip() == "drain"

    decision = decisions / f"segment_health_check.{job_id}.2"
    assert decision.read_text() == (
        f"{producer_tag('e2e')} unavailable nodes: {node} drng ({REASON})\n"
    )

    drained = task_of(jobs, "2")
    assert drained.state == "FAILED" and drained.exit_code in ((1, 0), (143, 0)), drained.fields
    for task in ("0", "1"):
        job = task_of(jobs, task)
        assert (job.state, job.exit_code) == ("COMPLETED", (0, 0)), job.fields

    assert sorted((r.array_task, r.procid) for r in first) == [
        (task, procid) for task in (0, 1, 2) for procid in (0, 1)]  # fmt: skip
    finished = [r for r in run.records(NAME) if r.completed]
    assert len(finished) == 4 and {r.world_size for r in finished} == {4}
    assert finished[0].round is not None and first[0].round is not None
    assert len({r.round for r in finished}) == 1 and finished[0].round > first[0].round
    assert sorted((r.array_task, r.procid) for r in finished) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    [replacement] = [r for r in finished if (r.array_task, r.procid) == (0, 1)]
    assert replacement.restart_count == 1, "a failure restart of the killed worker's group"

    # Task 2 trained in the world of six and was excluded when it came back to the
    # rendezvous: the check was installed once and consulted again at the restart.
    out = run.output(NAME, drained)
    assert len(install_line(0, decisions, job_id, "2").findall(out)) == 1, out
    excluded = exclusion_line(job_id, "2", decision).search(out)
    assert excluded, out
    assert out.index(f"{NAME}: round {first[0].round}, rank") < excluded.start()
    assert array_task_exit_reported(out), out
    assert f"_step_signal: Terminating StepId={drained.job_id}.0" in out
