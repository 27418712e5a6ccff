"""The shutdown trap: an excluded launcher must not close the rendezvous for everyone.

torchrun calls ``rdzv_handler.shutdown()`` after ``next_rendezvous()`` raised, and the
dynamic handler's ``shutdown()`` closes the shared rendezvous. The same job runs twice:
with the wrapper's protection switched off by a test-only patch (proving the scenario
detects the trap), and as shipped.
"""

from __future__ import annotations

import os
from pathlib import Path

from harness.jobs.simjob import (
    assert_excluded_by_decision,
    assert_refused_by_marker,
    siblings_after_process_zero,
)
from nvrx_seghealth._demo import JobSpec, StartAfter

PATCH_DIR = Path(__file__).parent / "shutdown_trap"
PATCH_LINE = "TEST PATCH: segment-health shutdown() delegates to the inner handler"


def trap_scenario(protected: bool) -> JobSpec:
    """Task 1 is marked; tasks 0 and 2 start only once task 1's process 0 has exited.

    So the exclusion and its ``shutdown()`` surely happen before the healthy tasks
    join: a closed rendezvous cannot be missed.
    """
    healthy_wait = {
        f"task{unit}.proc{procid}": StartAfter("task1.proc0")
        for unit in (0, 2)
        for procid in (0, 1)
    }
    path = os.pathsep.join(filter(None, [str(PATCH_DIR), os.environ.get("PYTHONPATH")]))
    return JobSpec(
        tasks=3,
        max_nodes=4,
        marked=frozenset({1}),
        no_kill_on_bad_exit=frozenset({1}),
        start_after=siblings_after_process_zero(1) | healthy_wait,
        agent_env={} if protected else {"PYTHONPATH": path},
    )


def test_without_protection_the_excluded_unit_closes_the_rendezvous(simulate) -> None:
    result = simulate(trap_scenario(protected=False))

    assert PATCH_LINE in result.launcher(1, 0).log()
    assert_excluded_by_decision(result, 1)
    assert not result.workers
    for unit in (0, 2):
        for outcome in result.unit_launchers(unit):
            assert outcome.returncode not in (None, 0)
            assert outcome.killed_by_srun or "RendezvousClosedError" in outcome.log()
        assert any("RendezvousClosedError" in o.log() for o in result.unit_launchers(unit))


def test_with_protection_the_healthy_units_complete(simulate) -> None:
    result = simulate(trap_scenario(protected=True))

    assert all(PATCH_LINE not in o.log() for o in result.launchers.values())
    assert_excluded_by_decision(result, 1)
    assert_refused_by_marker(result, 1, 1)
    final = result.final_round
    assert final is not None and result.round_count == 1
    assert final.world_size == 4 and final.units == (0, 2)
    assert result.completed
    for unit in (0, 2):
        assert [o.returncode for o in result.unit_launchers(unit)] == [0, 0]
