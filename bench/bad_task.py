"""Row 2: one bad array task, gated by its decision file against not gated at all.

Three array tasks of two nodes for a world of four (``--nnodes=4:4``): one task's worth
of spares. Task 1 sits on a broken node. The spare task (2) starts once task 1's
process 0 is about to join, so task 1 is in the first round whenever it joins at all,
as a task that went bad during training would be.

* gated: task 1's decision file exists. Its process 0 excludes it before the first
  round; the spare task joins the first round instead.
* ungated, node down: no decision file. Task 1 joins the first round; right after the
  process group forms, its node goes down (its worker kills its agent and exits; see
  ``BROKEN_TASKS_ENV``/``BROKEN_HOW_ENV`` in the simulation's worker), srun's
  ``--kill-on-bad-exit`` ends the task, the healthy workers fail on the lost peer, their
  agents restart them (``--max-restarts=1``) and the spare task takes task 1's place.
* ungated, training crashes: as above, but only task 1's workers crash; its agents
  live on and restart them, and they crash again in every round they join. torch's
  agent that runs out of restarts shuts the rendezvous down for every node, so this
  job only completes if a round happens to form without task 1. Full runs only.

The gated time is an upper bound: its first world waits for the spare's start-up.

Measured: seconds from launch until the last worker of the final world finished its
steps (a completed job), and the rendezvous rounds up to the final world, counted from
the workers' records. The result is what the gate saves, in rounds and seconds: a
ratio of job times would mostly measure the start-up both variants share.
"""

from __future__ import annotations

from harness.bench.measure import Row, interleaved_samples, median_or_none
from nvrx_seghealth._demo import JobSpec, StartAfter
from nvrx_seghealth._demo.worker import BROKEN_HOW_ENV, BROKEN_TASKS_ENV

from .simjobs import JobFacts, run_job

__all__ = ["JOINING", "rows"]

#: torch's agent logs this right before it calls ``next_rendezvous()``.
JOINING = r"Rendezvous'ing worker group"
#: The bad array task.
BAD = 1
REPETITIONS = {True: 1, False: 2}


def spec(gated: bool, how: str = "node") -> JobSpec:
    """The job of one variant; ``how`` the broken node fails (``node`` or ``worker``)."""
    return JobSpec(
        tasks=3,
        max_nodes=4,
        marked=frozenset({BAD}) if gated else frozenset(),
        max_restarts=1,
        agent_env={BROKEN_TASKS_ENV: str(BAD), BROKEN_HOW_ENV: how},
        start_after={
            f"task2.proc{procid}": StartAfter(f"task{BAD}.proc0", JOINING) for procid in (0, 1)
        },
    )


def _describe(name: str, facts: list[JobFacts]) -> str:
    done = [f.completed_after for f in facts if f.completed_after is not None]
    median = median_or_none(done)
    rounds = [f.rounds for f in facts]
    text = (
        f"{name}: median {'n/a' if median is None else f'{median:.1f} s'} to a completed job "
        f"({len(done)}/{len(facts)} completed), rounds {rounds}"
    )
    if name.startswith("ungated"):
        joined = sum(BAD in f.units_in_first_round for f in facts)
        text += f", task {BAD} in round 0 in {joined}/{len(facts)}"
    kept = [str(f.kept) for f in facts if f.kept is not None]
    return text + (f", files of incomplete jobs: {', '.join(kept)}" if kept else "")


def rows(quick: bool) -> list[Row]:
    samples = interleaved_samples(
        {"gated": lambda: run_job(spec(True)), "ungated": lambda: run_job(spec(False))},
        REPETITIONS[quick],
    )
    medians = {
        name: median_or_none(f.completed_after for f in facts) for name, facts in samples.items()
    }
    rounds = {name: median_or_none(f.rounds for f in facts) for name, facts in samples.items()}
    saved = (
        None
        if medians["gated"] is None or medians["ungated"] is None
        else medians["ungated"] - medians["gated"]
    )
    result = [
        Row(
            "one bad array task (node down): seconds saved by the gate (ungated - gated, "
            "to a completed job)",
            saved,
            "> 0 s",
            None if saved is None else saved > 0,
            "; ".join(_describe(name, facts) for name, facts in samples.items()),
        ),
        Row(
            "one bad array task (node down): rendezvous rounds saved by the gate",
            None
            if rounds["gated"] is None or rounds["ungated"] is None
            else rounds["ungated"] - rounds["gated"],
            ">= 1, gated in 1 round",
            None
            if rounds["gated"] is None or rounds["ungated"] is None
            else rounds["gated"] == 1 and rounds["ungated"] - rounds["gated"] >= 1,
            f"median rounds up to the final world: gated {rounds['gated']}, "
            f"ungated {rounds['ungated']} (from the workers' records)",
        ),
    ]
    if not quick:
        crashing = [run_job(spec(False, how="worker"))]
        done = median_or_none(f.completed_after for f in crashing)
        result.append(
            Row(
                "one bad array task (training crashes): seconds saved by the gate",
                None if medians["gated"] is None or done is None else done - medians["gated"],
                "> 0 s, or ungated never completes",
                None if medians["gated"] is None else done is None or done > medians["gated"],
                _describe("ungated, training crashes", crashing)
                + f" (one run; it completes only if a round forms without task {BAD}): "
                + "; ".join(f.summary for f in crashing),
            )
        )
    return result
