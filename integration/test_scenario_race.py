"""The race inside an array task: a sibling reaches the rendezvous before its process 0.

With the hand-off (on by default) the sibling waits for process 0's verdict and never
joins for an excluded task: no extra round. Without it (``segment_health_check_handoff_
timeout=0``) the spec's fallback holds: at most one more rendezvous.
"""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from harness.jobs.simjob import JOINED, JOINING, assert_excluded_by_decision
from nvrx_seghealth._demo import JobSpec, StartAfter
from nvrx_seghealth._demo.logtokens import Exclusion, exclusion
from nvrx_seghealth._errors import ExclusionReason

#: The late sibling's worker is running in round 0.
SIBLING_WORKER_UP = r"task1\.proc1: round 0, rank"
#: The hand-off turned off.
NO_HANDOFF = {"segment_health_check_handoff_timeout": "0"}
#: Launchers here start only once another reached a point, so the first joiner waits for
#: the start-up (a torch import) of those behind it: the scenarios do not depend on the
#: join timeout, and on a loaded node 30 s does not cover that chain.
JOIN_TIMEOUT = 120


def test_sibling_started_first_costs_no_round_with_the_handoff(simulate) -> None:
    # Three tasks of two nodes for a job of four nodes (--nnodes=4:4): one task's worth
    # of spares. Task 1's process 1 starts first; everyone else starts once it is
    # about to join, so its process 0 comes seconds later (its own start-up).
    after_sibling = StartAfter("task1.proc1", JOINING)
    spec = JobSpec(
        tasks=3,
        max_nodes=4,
        marked=frozenset({1}),
        # srun would end the sibling once process 0 exits; here it must speak for itself.
        no_kill_on_bad_exit=frozenset({1}),
        join_timeout=JOIN_TIMEOUT,
        start_after={
            label: after_sibling
            for label in ("task0.proc0", "task0.proc1", "task1.proc0", "task2.proc0", "task2.proc1")
        },
    )
    result = simulate(spec)

    sibling = result.launcher(1, 1)
    text = sibling.log()
    assert_excluded_by_decision(result, 1)
    # It waited for its process 0 and left on its verdict, never joining.
    assert re.search(r"process 0 of array task 1000_1 answered request \d+: excluded", text)
    assert exclusion(text) == Exclusion(ExclusionReason.MARKER, after_joining=False)
    assert not re.search(JOINED, text)
    assert not [w for w in result.workers if w.array_task == 1]
    # The spares were selected in the first round: no additional rendezvous.
    assert [r.number for r in result.rounds] == [0]
    assert result.rounds[0].world_size == 4 and result.rounds[0].units == (0, 2)
    assert result.completed


def test_process_zero_never_starting_holds_its_sibling_only_for_the_bound(simulate) -> None:
    spec = JobSpec(
        tasks=2,
        min_nodes=3,
        max_nodes=4,
        never_started=frozenset({"task1.proc0"}),
        rdzv_conf={"segment_health_check_handoff_timeout": "5"},
    )
    result = simulate(spec)

    text = result.launcher(1, 1).log()
    assert (
        "no verdict from process 0 of array task 1000_1 within 5 s (process 0 absent, slow, "
        "or running without the check); joining without it (fail open)" in text
    )
    assert text.count("no verdict from process 0") == 1
    assert [r.number for r in result.rounds] == [0]
    assert result.rounds[0].world_size == 3 and result.rounds[0].units == (0, 1)
    assert result.completed


def test_slow_healthy_process_zero_holds_its_sibling_until_its_verdict(simulate) -> None:
    # Every launcher is needed (--nnodes=4:4); task 1's process 0 starts last, only once
    # its sibling and task 0 are about to join.
    spec = JobSpec(
        tasks=2,
        join_timeout=JOIN_TIMEOUT,
        start_after={
            "task0.proc0": StartAfter("task1.proc1", JOINING),
            "task0.proc1": StartAfter("task1.proc1", JOINING),
            "task1.proc0": StartAfter("task0.proc1", JOINING),
        },
    )
    result = simulate(spec)

    text = result.launcher(1, 1).log()
    waited = re.search(
        r"process 0 of array task 1000_1 answered request \d+: healthy \(waited (\d+\.\d) s\)",
        text,
    )
    assert waited and float(waited.group(1)) >= 1.0, "the sibling did not wait for process 0"
    assert "no verdict from process 0" not in text
    assert [r.number for r in result.rounds] == [0]
    assert result.rounds[0].world_size == 4 and result.rounds[0].units == (0, 1)
    assert result.completed


def test_without_the_handoff_a_sibling_joined_first_needs_at_most_one_more_round(
    simulate,
) -> None:
    # As above, but task 2 starts only once the sibling is joining, so task 1 is surely
    # in round 0 (with task 0 and half of task 2; the other half waits as a spare), and
    # task 1's process 0 starts once its sibling's worker runs in round 0.
    spec = JobSpec(
        tasks=3,
        max_nodes=4,
        marked=frozenset({1}),
        max_restarts=1,
        first_round_steps=400,  # round 0 runs (up to 100 s) until process 0 excludes the task
        step_seconds=0.25,
        join_timeout=JOIN_TIMEOUT,
        start_after={
            "task2.proc0": StartAfter("task1.proc1", JOINING),
            "task2.proc1": StartAfter("task1.proc1", JOINING),
            "task1.proc0": StartAfter("task1.proc1", SIBLING_WORKER_UP),
        },
        rdzv_conf=NO_HANDOFF,
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


def test_without_the_handoff_a_sibling_leaving_a_completed_round_costs_one_round(
    simulate, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The marker appears while the sibling waits inside round 0: it leaves after joining.

    The launchers run as the README's torchrun line does: neither
    ``TORCH_ELASTIC_WORKER_IDENTICAL`` nor ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE`` in their
    environment. The handler sets the first to 1, so torch's agents skip their rank
    exchange; the member that left costs one more round, as the contract says.

    - Before af8b006, which sets it, the others waited in that exchange for the member
      that left until the store read timed out (60 s): no world at all.
    - Plain c10d beside it, with store sharing off, trains the same launchers to the end.
    - The hand-off avoids this path; it remains for a sibling that joined without a verdict.
    """
    # A handler built earlier in this process may have set it in os.environ.
    monkeypatch.delenv("TORCH_ELASTIC_WORKER_IDENTICAL", raising=False)
    spec = JobSpec(
        tasks=3,
        max_nodes=4,
        marked=frozenset({1}),
        max_restarts=1,
        # Task 1's sibling joins first and waits for a fourth member; its process 0
        # excludes the task meanwhile; task 2 then completes round 0. srun's kill is off
        # for task 1, so that the sibling surely sees round 0 complete.
        no_kill_on_bad_exit=frozenset({1}),
        join_timeout=JOIN_TIMEOUT,
        start_after={
            "task1.proc0": StartAfter("task1.proc1", JOINING),
            "task2.proc0": StartAfter("task1.proc0"),
            "task2.proc1": StartAfter("task1.proc0"),
        },
        disable_shared_store=None,
        rdzv_conf=NO_HANDOFF,
    )
    plain = simulate(
        replace(spec, backend="c10d", disable_shared_store="1", rdzv_conf={}), name="c10d"
    )
    assert plain.completed
    result = simulate(spec)

    sibling = result.launcher(1, 1)
    assert exclusion(sibling.log()) == Exclusion(ExclusionReason.MARKER, after_joining=True)
    assert not re.search(JOINED, sibling.log())
    assert sibling.returncode not in (None, 0, 93)
    assert_excluded_by_decision(result, 1)
    final = result.final_round
    assert final is not None and final.number == 1  # one more rendezvous
    assert final.world_size == 4 and final.units == (0, 2)
    assert result.completed
