"""Row 6: a sibling joins before its process 0 has judged the task, with and without the hand-off.

Three array tasks of two nodes for a world of four (``--nnodes=4:4``); task 1 is marked
unhealthy before launch. Task 1's process 1 (the sibling) starts first; its process 0
and the spare task start once the sibling is about to join, so the sibling is always
ahead of its process 0: the spec's documented race.

* with the hand-off (the default): the sibling waits, bounded, for process 0's verdict
  before it joins; the verdict excludes the task and the sibling never joins.
* without (``segment_health_check_handoff_timeout=0``): the sibling joins at once and
  is counted in the first round; process 0 then excludes the task, the sibling leaves,
  and one more round is needed.

Both variants run with ``TORCH_ELASTIC_WORKER_IDENTICAL=1``: a member that leaves a
completed round otherwise blocks the others until a store read times out (see
``integration/test_scenario_race.py``). Measured: seconds from launch until the last
worker of the final world finished, and rounds up to the final world, from the
workers' records.
"""

from __future__ import annotations

from harness.bench.measure import Row, interleaved_samples, median_or_none, ratio_or_none
from nvrx_seghealth._demo import JobSpec, StartAfter

from .bad_task import JOINING
from .simjobs import JobFacts, run_job

#: The rdzv-conf key of the hand-off's bound (``0`` disables the hand-off).
HANDOFF_KEY = "segment_health_check_handoff_timeout"
REPETITIONS = {True: 1, False: 2}


def spec(handoff: bool) -> JobSpec:
    """The job of one variant."""
    sibling_joining = StartAfter("task1.proc1", JOINING)
    return JobSpec(
        tasks=3,
        max_nodes=4,
        marked=frozenset({1}),
        max_restarts=1,
        start_after={
            "task1.proc0": sibling_joining,
            "task2.proc0": sibling_joining,
            "task2.proc1": sibling_joining,
        },
        agent_env={"TORCH_ELASTIC_WORKER_IDENTICAL": "1"},
        rdzv_conf={} if handoff else {HANDOFF_KEY: "0"},
    )


def _describe(name: str, facts: list[JobFacts]) -> str:
    done = [f.completed_after for f in facts if f.completed_after is not None]
    median = median_or_none(done)
    text = (
        f"{name}: median {'n/a' if median is None else f'{median:.1f} s'} to a completed job "
        f"({len(done)}/{len(facts)} completed), rounds {[f.rounds for f in facts]}"
    )
    failed = [f for f in facts if not f.completed]
    if failed:
        first_error = failed[0].log_excerpt.splitlines()[:1]
        text += f", first error of an incomplete job: {first_error or ['none logged']}"
        text += f", its files: {failed[0].kept}"
    return text


def rows(quick: bool) -> list[Row]:
    samples = interleaved_samples(
        {"with hand-off": lambda: run_job(spec(True)), "without": lambda: run_job(spec(False))},
        REPETITIONS[quick],
    )
    times = {n: median_or_none(f.completed_after for f in facts) for n, facts in samples.items()}
    rounds = {n: median_or_none(f.rounds for f in facts) for n, facts in samples.items()}
    ratio = ratio_or_none(times["with hand-off"], times["without"])
    met = None if ratio is None else ratio < 1 and rounds["with hand-off"] == 1
    return [
        Row(
            "sibling-first exclusion: time to a completed job, with vs without the hand-off",
            ratio,
            "< 1, and 1 round with",
            met,
            f"median rounds: with {rounds['with hand-off']}, without {rounds['without']}; "
            + "; ".join(_describe(name, facts) for name, facts in samples.items()),
        )
    ]
