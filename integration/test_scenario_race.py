"""The documented race: a sibling joins before its process 0 publishes the marker."""

from __future__ import annotations

import re

from simhelpers import JOINED, JOINING, assert_excluded_by_decision

from nvrx_seghealth.simulation import JobSpec, StartAfter

#: The late sibling's worker is running in round 0.
SIBLING_WORKER_UP = r"task1\.proc1: round 0, rank"


def test_sibling_joined_first_needs_at_most_one_more_rendezvous(simulate) -> None:
    # Three tasks of two nodes for a job of four nodes (--nnodes=4:4): one task's worth
    # of spares. Task 1's process 1 joins first, and task 2 starts only once it is
    # joining, so task 1 is surely in round 0 (with task 0 and half of task 2; the other
    # half waits as a spare). Task 1's process 0 starts late: once its sibling's worker
    # runs in round 0.
    spec = JobSpec(
        tasks=3,
        max_nodes=4,
        marked=frozenset({1}),
        max_restarts=1,
        first_round_steps=400,  # round 0 runs (up to 100 s) until process 0 excludes the task
        step_seconds=0.25,
        start_after={
            "task2.proc0": StartAfter("task1.proc1", JOINING),
            "task2.proc1": StartAfter("task1.proc1", JOINING),
            "task1.proc0": StartAfter("task1.proc1", SIBLING_WORKER_UP),
        },
    )
    result = simulate(spec)

    first = result.rounds[0]
    assert first.number == 0 and 1 in first.units  # the race happened
    assert_excluded_by_decision(result, 1)
    assert result.launcher(1, 1).killed_by_srun  # srun ended task 1 after process 0 exited
    final = result.final_round
    assert final is not None and final.number <= 1  # at most one more rendezvous
    assert final.world_size == 4 and final.units == (0, 2)
    assert result.completed


def test_sibling_leaving_a_completed_round_costs_one_round(simulate) -> None:
    """The marker appears while the sibling waits inside round 0: it leaves after joining.

    torch's agent, by default, assigns worker ranks through the store and waits for
    every member of the round; a member that leaves after the round completed blocks
    the others until the store read times out (60 s), and then the whole job fails
    (measured with this very job: no world at all). TORCH_ELASTIC_WORKER_IDENTICAL=1
    (every node runs the same workers, as here) skips that exchange; the member that
    left then costs one more round, as the contract says.
    """
    spec = JobSpec(
        tasks=3,
        max_nodes=4,
        marked=frozenset({1}),
        max_restarts=1,
        # Task 1's sibling joins first and waits for a fourth member; its process 0
        # excludes the task meanwhile; task 2 then completes round 0. srun's kill is off
        # for task 1, so that the sibling surely sees round 0 complete.
        no_kill_on_bad_exit=frozenset({1}),
        start_after={
            "task1.proc0": StartAfter("task1.proc1", JOINING),
            "task2.proc0": StartAfter("task1.proc0"),
            "task2.proc1": StartAfter("task1.proc0"),
        },
        agent_env={"TORCH_ELASTIC_WORKER_IDENTICAL": "1"},
    )
    result = simulate(spec)

    sibling = result.launcher(1, 1)
    assert "is excluded (after joining): its process 0 marked" in sibling.log()
    assert not re.search(JOINED, sibling.log())
    assert sibling.returncode not in (None, 0, 93)
    assert_excluded_by_decision(result, 1)
    final = result.final_round
    assert final is not None and final.number == 1  # one more rendezvous
    assert final.world_size == 4 and final.units == (0, 2)
    assert result.completed
