"""End to end: a regular job (no array) with a decision, beside a healthy one.

Both jobs are ``sbatch -N2 --ntasks-per-node=1 --no-requeue`` running the example
script's launch (the script's ``#SBATCH --array`` line cannot be unset, so bash runs it
in a regular job). They are released together and run at the same time, each its own
rendezvous (``--nnodes=2``) on the same store. The unit of a regular job is the job:
its decision is ``segment_health_check.<JOBID>.<JOBID>``, and there is no replacement
group, so srun ``--kill-on-bad-exit=1`` ends the step once process 0 exits.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from harness.jobs.slurmjob import (
    JOIN_TIMEOUT,
    exclusion_line,
    install_line,
    run_seconds,
    srun_exit_line,
    training,
)

if TYPE_CHECKING:
    from harness.services.slurm import SlurmCluster

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(180)]

REGULAR = ("-N2", "--ntasks-per-node=1", "--no-requeue", "--hold")


def test_a_regular_job_with_a_decision_fails_and_nothing_else(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    with training(slurm_cluster, tmp_path) as run:
        bad = run.submit("bad", *REGULAR, nnodes="2", steps=5, regular=True)
        good = run.submit("good", *REGULAR, nnodes="2", steps=25, regular=True)
        decision = run.mark(bad, bad, "e2e: this job must not be used")
        assert decision.name == f"segment_health_check.{bad}.{bad}"
        slurm_cluster.run("scontrol", "release", f"{bad},{good}")
        [bad_job] = slurm_cluster.wait_job(bad, timeout=120)
        [good_job] = slurm_cluster.wait_job(good, timeout=120)

    assert "ArrayJobId" not in bad_job.fields and "ArrayJobId" not in good_job.fields
    # The bad job: process 0 excluded, srun ended the step well before any rendezvous
    # timeout, the job FAILED (143: srun's SIGTERM ended process 1, waiting for a peer).
    assert bad_job.state == "FAILED" and bad_job.exit_code in ((1, 0), (143, 0)), bad_job.fields
    assert run_seconds(bad_job) < JOIN_TIMEOUT / 2, bad_job.fields
    out = run.output("bad", bad_job)
    assert f"is job {bad} on " in out
    assert install_line(0, run.decisions(bad), bad, bad).search(out), out
    assert out.count("Segment health check installed") == 1
    assert exclusion_line(bad, bad, decision).search(out), out
    assert "UnhealthyNodeException" in out
    assert srun_exit_line(0, 1).search(out), out
    assert f"_step_signal: Terminating StepId={bad}.0" in out
    assert run.records("bad") == [], "the bad job never trained"

    # The good job ran at the same time, installed its own (clean) check, and trained.
    assert (good_job.state, good_job.exit_code) == ("COMPLETED", (0, 0))
    assert good_job.fields["StartTime"] <= bad_job.fields["EndTime"] <= good_job.fields["EndTime"]
    out = run.output("good", good_job)
    assert install_line(0, run.decisions(good), good, good).search(out), out
    finished = [r for r in run.records("good") if r.completed]
    assert sorted((r.procid, r.world_size, r.array_task) for r in finished) == [
        (0, 2, None),
        (1, 2, None),
    ]
    assert sorted(r.rank for r in finished) == [0, 1]
