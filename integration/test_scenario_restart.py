"""Restart boundary: a decision that appears while the job runs (Slurm DRAIN)."""

from __future__ import annotations

from harness.jobs.simjob import JOB_TIMEOUT, kill_worker, run_job
from nvrx_seghealth._demo import JobSpec, SimulatedJob
from nvrx_seghealth._demo.logtokens import Exclusion, exclusion
from nvrx_seghealth._errors import ExclusionReason


def test_decision_is_consumed_at_the_next_rendezvous(request, tmp_path) -> None:
    # Two nodes per task: at the new attempt, task 2's sibling must take its process 0's
    # new verdict, not the healthy one of round 0 (the hand-off's restart boundary).
    spec = JobSpec(
        tasks=3,
        min_nodes=4,
        max_restarts=1,
        first_round_steps=400,  # the healthy job runs (up to 100 s) until it is acted on
        step_seconds=0.25,
    )

    def act(job: SimulatedJob) -> None:
        job.wait_until(
            lambda: len([w for w in job.workers() if w.initialized_at is not None]) == 6,
            timeout=JOB_TIMEOUT,
            what="a healthy world of three tasks",
        )
        job.publish_decision(2)  # DRAIN does not evict the running task...
        victim = next(w for w in job.workers() if w.launcher == "task0.proc0")
        kill_worker(job, victim)  # ...until a failure elsewhere restarts the job

    result = run_job(request, tmp_path / "job", spec, act)

    # The world of three tasks is round 0, or round 1 on a loaded node: with --nnodes=4:6
    # a world of the first four launchers may form before the last two joined.
    healthy = next(r for r in result.rounds if r.world_size == 6)
    final = result.final_round
    assert healthy.units == (0, 1, 2)
    assert final is not None and final.number == healthy.number + 1  # the very next rendezvous
    assert final.world_size == 4 and final.units == (0, 1)  # no stale verdict admitted task 2
    # The victim's agent restarted for the failure; the others may count it as a
    # membership change (torch counts only failure restarts).
    restarted = {w.launcher: w.restart_count for w in final.workers}
    assert restarted["task0.proc0"] == 1
    assert result.completed
    assert [result.launcher(u, 0).returncode for u in (0, 1)] == [0, 0]
    drained = result.launcher(2, 0)
    assert drained.returncode not in (None, 0, 93)
    text = drained.log()
    # Both of task 2's launchers ran in the world of three tasks, and in no later round.
    task2 = [(w.launcher, w.round) for w in result.workers if w.array_task == 2]
    assert {label for label, round_ in task2 if round_ == healthy.number} == {
        "task2.proc0",
        "task2.proc1",
    }
    assert all(round_ is not None and round_ <= healthy.number for _, round_ in task2)
    # Task 2 ran there and was excluded when it came back to the rendezvous.
    assert exclusion(text) == Exclusion(ExclusionReason.DECISION_FILE, after_joining=False)
    decision_file = f"reason={ExclusionReason.DECISION_FILE.value}"
    assert text.index(f"task2.proc0: round {healthy.number}, rank") < text.index(decision_file)
