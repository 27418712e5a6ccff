"""Two runs side by side: a task with a decision file, written at launch or while the job
trained, is never part of a healthy world; a decision written during training is timed to
the next world."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from nvrx_seghealth._demo import JobResult, JobSpec, WorkerRecord
from nvrx_seghealth._demo.comparison import Comparison, Variant
from nvrx_seghealth._demo.outcome import FaultEvent, LauncherOutcome
from nvrx_seghealth._demo.paths import RunPaths

#: Three tasks of one node each, a world of two.
SPEC = JobSpec(tasks=3, nodes_per_task=1, max_nodes=2, record_telemetry=True)


def worker(task: int, round_: int, joined: float, *, done: bool) -> WorkerRecord:
    """Task ``task``'s worker in ``round_``, in the process group at ``joined``."""
    return WorkerRecord(
        f"task{task}.proc0", task, 0, 100 * round_ + task, task % 2, 2, task % 2, 2,
        round_, 0, joined - 1, joined, None, 5 if done else 2,
        joined + 1 if done else None, True if done else None,
    )  # fmt: skip


def result(tmp_path: Path, workers: list[WorkerRecord], fault_at: float, watch: float) -> JobResult:
    """A job launched at 0 s whose task 1 got its decision at ``fault_at`` in round 0."""
    spec = dataclasses.replace(SPEC, watch_interval=watch)
    paths = RunPaths(tmp_path / f"watch-{watch:g}")
    launchers = {
        label: LauncherOutcome(
            label, unit, 0, 10 + unit, 0, False, tmp_path / "none.log", 0.0, 30.0
        )
        for unit, label in enumerate(spec.labels)
    }
    decision = paths.decisions / "segment_health_check.1000.1"
    faults = (FaultEvent("decision published for task1 while it trains", fault_at, 0),)
    return JobResult(spec, paths, launchers, workers, {1: decision}, 0.0, 30.0, False, faults)


def test_a_world_that_trained_on_the_marked_task_is_not_healthy(tmp_path: Path) -> None:
    off = Variant(
        "watch off",
        result(tmp_path, [worker(0, 0, 5.0, done=True), worker(1, 0, 5.0, done=True)], 8.0, 0.0),
    )
    assert off.result.completed and off.healthy_after is None and off.recovered_after is None
    facts = off.as_dict()
    assert (facts["time_to_healthy_world"], facts["recovered_after"], facts["watch_interval"]) == (
        None,
        None,
        0.0,
    )


def test_the_next_world_is_timed_from_the_decision(tmp_path: Path) -> None:
    workers = [
        worker(0, 0, 5.0, done=False),
        worker(1, 0, 5.0, done=False),
        worker(0, 1, 14.5, done=True),
        worker(2, 1, 14.0, done=True),
    ]
    on = Variant("watch every 1 s", result(tmp_path, workers, 8.0, 1.0))
    off = Variant("watch off", result(tmp_path, workers[:2], 8.0, 0.0))
    assert on.recovered_after == 6.5 and on.healthy_after == 14.5 and on.restarts_charged == 0
    facts = Comparison(off, on, keys=("watch-off", "watch-on"), subject="The watch").as_dict()
    assert facts["watch-on"]["trained"] == {
        "0": {"tasks": [0, 1], "state": "failed"},
        "1": {"tasks": [0, 2], "state": "completed"},
    }
    assert facts["rounds_saved"] == -1 and facts["seconds_saved"] is None


def test_a_saved_round_measured_slower_is_said_as_measured(tmp_path: Path) -> None:
    """Ungated, the marked task's round fails and the next forms at 14.5 s; gated, the
    only round forms at 20 s (a load between the two runs): a round saved, 5.5 s later."""
    ungated = [
        worker(0, 0, 5.0, done=False),
        worker(1, 0, 5.0, done=False),
        worker(0, 1, 14.5, done=True),
        worker(2, 1, 14.0, done=True),
    ]
    gated = [worker(0, 0, 20.0, done=True), worker(2, 0, 19.0, done=True)]
    comparison = Comparison(
        Variant("ungated", result(tmp_path / "off", ungated, 1.0, 0.0)),
        Variant("gated", result(tmp_path / "on", gated, 1.0, 0.0)),
    )
    assert (comparison.rounds_saved, comparison.seconds_saved) == (1, -5.5)
    verdict = comparison.render().splitlines()[-1]
    assert "saved 1 round" in verdict and "5.5 s later" in verdict and "-5.5" not in verdict
