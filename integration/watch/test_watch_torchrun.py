"""A decision written while the world trains, with real torchrun agents (:mod:`harness.jobs.watchjob`).

Three units train in one world, a spare waits beside it, and unit 1 is marked while its
worker trains; unit 2's agent looks at its workers only every 3 s (it learns late).

* With the watch on, every launcher of the world restarts its workers once, together, as
  a membership change (torchrun's restart count stays 0 with ``--max-restarts=0``); the
  marked unit's launcher exits 1 on its decision file, after joining; the spare takes its
  place and the job completes.
* With the watch off, and through plain c10d, nothing happens until the job ends: the
  marked unit trains on to the end (the job is stopped a while after the mark).
* The hung collective: the marked unit's worker stops calling the collective, so every
  peer blocks in it (gloo timeout 120 s). With the watch on the world re-forms without
  the unit long before the timeout; with the watch off it is still blocked 25 s
  later (the job is then stopped; ``bench/watch.py`` runs it to the timeout).

Only the world changes and the exit codes are asserted, from the workers' records and
the wrapper's tokens; the seconds are measured in ``bench/watch.py`` (BENCHMARKS.md).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.jobs.watchjob import MARKED, SPARE, UNITS, Outcome, Variant, run_job
from nvrx_seghealth import ExclusionReason
from nvrx_seghealth._demo.logtokens import Exclusion, exclusion

#: A generous bound on "mark -> the next world formed" (about 8 s measured with W = 1 on
#: two busy cores; the gloo timeout is 120 s).
REFORM_BOUND = 60.0
HEALTHY = [t for t in UNITS if t != MARKED]


def assert_reformed_without_the_marked_unit(outcome: Outcome) -> None:
    """The world restarted once, together and without failures, into the healthy units
    and the spare; the marked unit's launcher left on its decision file; all else exit 0."""
    tail = outcome.output_tail()
    assert outcome.markers == (str(MARKED),), tail
    assert outcome.worlds() == [UNITS, (*HEALTHY, SPARE)], tail
    starts = {task: outcome.starts(task) for task in (*UNITS, SPARE)}
    assert starts == {**{t: 2 for t in HEALTHY}, MARKED: 1, SPARE: 1}, tail
    assert {record.restart for record in outcome.formed()} == {"0"}, tail  # no failure
    assert not outcome.stopped, tail  # every launcher ended on its own
    assert outcome.returncodes == {**{t: 0 for t in HEALTHY}, MARKED: 1, SPARE: 0}, tail
    assert exclusion(outcome.outputs[MARKED]) == Exclusion(ExclusionReason.DECISION_FILE, True)
    reformed = outcome.reformed_after()
    assert reformed is not None and reformed < REFORM_BOUND, (reformed, tail)


def test_a_decision_during_training_restarts_the_world_once_without_the_unit(
    tmp_path: Path,
) -> None:
    outcome = run_job(Variant("on", watch_interval=1, window=REFORM_BOUND + 30), tmp_path)
    assert_reformed_without_the_marked_unit(outcome)


@pytest.mark.parametrize(
    "variant",
    [Variant("off", window=12), Variant("c10d", backend="c10d", window=12)],
    ids=lambda variant: variant.name,
)
def test_without_the_watch_the_marked_unit_trains_on_to_the_end(
    tmp_path: Path, variant: Variant
) -> None:
    outcome = run_job(variant, tmp_path)
    tail = outcome.output_tail()
    assert outcome.markers == (), tail
    assert outcome.worlds() == [UNITS], tail
    assert {task: outcome.starts(task) for task in (*UNITS, SPARE)} == {
        **{t: 1 for t in UNITS},
        SPARE: 0,
    }, tail
    assert [outcome.returncodes[t] for t in UNITS] == [0, 0, 0], tail
    assert "watch-train done" in outcome.outputs[MARKED], tail
    assert exclusion(outcome.outputs[MARKED]) is None, tail


def test_a_hung_collective_ends_with_the_watch_long_before_its_timeout(tmp_path: Path) -> None:
    variant = Variant("hung-on", watch_interval=1, stall=True, window=REFORM_BOUND + 30)
    outcome = run_job(variant, tmp_path)
    assert "watch-train stalled" in outcome.outputs[MARKED], outcome.output_tail()
    assert_reformed_without_the_marked_unit(outcome)


def test_a_hung_collective_holds_the_world_without_the_watch(tmp_path: Path) -> None:
    outcome = run_job(Variant("hung-off", stall=True, window=20, end_timeout=5), tmp_path)
    tail = outcome.output_tail()
    assert "watch-train stalled" in outcome.outputs[MARKED], tail
    assert outcome.worlds() == [UNITS], tail
    assert outcome.markers == (), tail
    assert not any("watch-train done" in text for text in outcome.outputs.values()), tail
    # Still blocked in the collective when stopped, 25 s after the mark.
    assert outcome.stopped >= set(UNITS), tail
