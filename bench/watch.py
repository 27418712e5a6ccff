"""Rows 10 and 11: a decision written while the job trains, with the watch and without.

The job is ``harness/jobs/watchjob.py``'s: real torchrun agents, three units of one
launcher for a world of three, a spare waiting beside it, unit 2's agent looking at its
workers only every 3 s (``--monitor-interval``, an agent that learns late), and unit 1
marked once the world trains. Measured: seconds from the mark until every rank of the
first world without unit 1 formed its process group (the workers' records).

* Row 10: unit 1 trains normally. Watch ``W`` = 5 s against the watch off; off, no world
  without the unit forms while the job runs: the job trains on the unit to its end,
  bounded here at :data:`OFF_WINDOW` seconds after the mark. Target: on <= W + 10 s.
* Row 11: unit 1's worker stops calling the collective before the mark, so every peer
  blocks in it (gloo timeout 120 s); ``--max-restarts=1``. On: the watch re-forms the
  world. Off: the peers' collectives time out, their agents restart, and the gate
  excludes unit 1 at that rendezvous. Target: on <= W + 15 s; off waits for the timeout.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from harness.bench.measure import Row, interleaved_samples, median_or_none, ratio_or_none
from harness.jobs.watchjob import Outcome, Variant, run_job

#: The watch interval of the "on" variants (seconds).
W = 5.0
#: How long the watch-off job of row 10 trains on after the mark (its end).
OFF_WINDOW = 40.0
GLOO_TIMEOUT = 120.0
REPETITIONS = {True: 1, False: 2}


def _measure(variant: Variant) -> Callable[[], Outcome]:
    def run() -> Outcome:
        with tempfile.TemporaryDirectory(prefix=f"bench-watch-{variant.name}-") as workdir:
            return run_job(variant, Path(workdir))

    return run


def _seconds(outcomes: list[Outcome]) -> list[float | None]:
    return [outcome.reformed_after() for outcome in outcomes]


def _show(values: list[float | None]) -> str:
    return ", ".join("none" if value is None else f"{value:.1f}" for value in values)


def _codes(outcomes: list[Outcome]) -> str:
    return "; ".join(
        ",".join(f"{task}:{code}" for task, code in sorted(o.returncodes.items())) for o in outcomes
    )


def exclusion_rows(quick: bool) -> list[Row]:
    """Row 10: the marked unit trains normally."""
    samples = interleaved_samples(
        {
            "on": _measure(Variant("on", watch_interval=W, window=OFF_WINDOW + 60)),
            "off": _measure(Variant("off", window=OFF_WINDOW)),
        },
        REPETITIONS[quick],
    )
    on, off = _seconds(samples["on"]), _seconds(samples["off"])
    median = median_or_none(on)
    off_worlds = [len(outcome.worlds()) for outcome in samples["off"]]
    detail = (
        f"W = {W:g} s; on: mark -> next world {_show(on)} s, exit codes {_codes(samples['on'])}; "
        f"off: no world without the unit in {OFF_WINDOW:g} s after the mark ({_show(off)}), "
        f"worlds per job {off_worlds}, exit codes {_codes(samples['off'])}"
    )
    off_bound = None if any(value is not None for value in off) else OFF_WINDOW
    return [
        Row(
            "decision during training -> next world without the unit, watch on (seconds)",
            median,
            f"<= W + 10 s = {W + 10:g} s",
            median is not None and None not in on and median <= W + 10,
            detail,
        ),
        Row(
            "the same: watch on / watch off (ratio; off never re-formed: bounded by its run)",
            ratio_or_none(median, off_bound),
            "< 1",
            median is not None and off_bound is not None and median < off_bound,
            f"off trained on the unit to its end, {OFF_WINDOW:g} s after the mark; "
            "the ratio is an upper bound",
        ),
    ]


def hung_rows(quick: bool) -> list[Row]:
    """Row 11: the marked unit's worker is stuck, every peer blocks in the collective.

    One repetition in quick and full runs alike: the watch-off side alone waits the whole
    gloo timeout."""
    with_watch = Variant(
        "hung-on",
        watch_interval=W,
        stall=True,
        gloo_timeout=GLOO_TIMEOUT,
        max_restarts=1,
        window=GLOO_TIMEOUT,
    )
    without = replace(with_watch, name="hung-off", watch_interval=0, window=GLOO_TIMEOUT + 90)
    samples = interleaved_samples({"on": _measure(with_watch), "off": _measure(without)}, 1)
    on, off = _seconds(samples["on"]), _seconds(samples["off"])
    on_s, off_s = median_or_none(on), median_or_none(off)
    met = on_s is not None and on_s <= W + 15 and (off_s is None or off_s >= GLOO_TIMEOUT)
    return [
        Row(
            "worker stuck in a collective (gloo timeout 120 s): next world, on / off (ratio)",
            ratio_or_none(on_s, off_s),
            f"on <= W + 15 s = {W + 15:g} s; off >= {GLOO_TIMEOUT:g} s",
            met,
            f"W = {W:g} s, --max-restarts=1; mark -> next world without the unit: "
            f"on {_show(on)} s, off {_show(off)} s; exit codes on {_codes(samples['on'])}, "
            f"off {_codes(samples['off'])}",
        )
    ]
