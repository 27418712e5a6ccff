"""Exclusions decided before launch: job array, spares, quorum, regular job."""

from __future__ import annotations

from harness.jobs.simjob import (
    assert_excluded_by_decision,
    assert_refused_by_marker,
    report,
    siblings_after_process_zero,
)
from nvrx_seghealth._demo import JobSpec, SimulatedJob
from nvrx_seghealth._demo.srun import KILL_WAIT


def test_exclusion_known_before_launch(simulate) -> None:
    spec = JobSpec(
        tasks=3,
        max_nodes=4,
        marked=frozenset({1}),
        no_kill_on_bad_exit=frozenset({1}),
        start_after=siblings_after_process_zero(1),
    )
    result = simulate(spec)

    final = result.final_round
    assert final is not None and final.number == 0 and result.round_count == 1
    assert final.world_size == 4 and final.units == (0, 2)
    assert result.completed
    for unit in (0, 2):
        assert [o.returncode for o in result.unit_launchers(unit)] == [0, 0]
    assert_excluded_by_decision(result, 1)
    assert "excluded unit leaves the shared rendezvous open" in result.launcher(1, 0).log()
    assert_refused_by_marker(result, 1, 1)


def test_spare_task_replaces_a_marked_task(simulate) -> None:
    # Four array tasks for a job of three (--nnodes=6:6): one task is a spare.
    spec = JobSpec(
        tasks=4,
        min_nodes=6,
        max_nodes=6,
        marked=frozenset({1}),
        no_kill_on_bad_exit=frozenset({1}),
        start_after=siblings_after_process_zero(1),
    )
    result = simulate(spec)

    final = result.final_round
    assert final is not None and result.round_count == 1
    assert final.world_size == 6 and final.units == (0, 2, 3)
    assert result.completed
    assert_excluded_by_decision(result, 1)
    assert_refused_by_marker(result, 1, 1)


def test_without_quorum_the_join_timeout_applies(simulate) -> None:
    join_timeout = 10
    spec = JobSpec(
        tasks=2,
        join_timeout=join_timeout,
        marked=frozenset({1}),
        no_kill_on_bad_exit=frozenset({1}),
        start_after=siblings_after_process_zero(1),
    )
    result = simulate(spec)

    assert not result.workers and not result.timed_out
    healthy = result.unit_launchers(0)
    assert all(o.returncode not in (None, 0) for o in healthy)
    timed_out = [o for o in healthy if "RendezvousTimeoutError" in o.log()]
    assert timed_out, "no healthy launcher reports the join timeout"
    first = timed_out[0]
    assert first.ended_at is not None and first.started_at is not None
    assert first.ended_at - first.started_at >= join_timeout
    # The exclusion was not relaxed to reach quorum: the excluded unit never joined.
    assert_excluded_by_decision(result, 1)
    assert_refused_by_marker(result, 1, 1)


def test_regular_job_process_zero_ends_the_step(request, tmp_path) -> None:
    spec = JobSpec(array=False, tasks=1, nodes_per_task=2, marked=frozenset({0}))
    with SimulatedJob(spec, tmp_path) as job:
        result = report(request, "job", job.wait(timeout=120))
        markers = job.markers()
        nothing_published = not markers.store.check([markers.prefix + "count"])
        job_marked = markers.is_marked(str(spec.array_job_id))

    assert nothing_published and not job_marked
    assert_excluded_by_decision(result, 0)
    process_zero, process_one = result.unit_launchers(0)
    assert "replacement group" not in process_zero.log()
    # The emulated srun --kill-on-bad-exit=1 ended the step: process 1 was signalled.
    assert process_one.killed_by_srun and process_one.returncode not in (None, 0)
    assert process_zero.ended_at is not None and process_one.ended_at is not None
    assert process_one.ended_at - process_zero.ended_at < KILL_WAIT + 2
    assert not result.workers
