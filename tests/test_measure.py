"""The benchmark's shared pieces (no timing here) and the simulation's broken-node option."""

from __future__ import annotations

import pytest

from harness.bench.measure import (
    Row,
    interleaved,
    interleaved_samples,
    median_or_none,
    ratio_or_none,
    table,
)
from nvrx_seghealth._demo import worker


def test_interleaved_alternates_the_order_of_the_variants() -> None:
    calls: list[str] = []

    def variant(name: str, value: float):
        def measure() -> float:
            calls.append(name)
            return value

        return measure

    samples = interleaved_samples({"a": variant("a", 1.0), "b": variant("b", 2.0)}, 3)

    assert calls == ["a", "b", "b", "a", "a", "b"]
    assert samples == {"a": [1.0, 1.0, 1.0], "b": [2.0, 2.0, 2.0]}


def test_interleaved_returns_each_variants_median() -> None:
    values = iter([5.0, 1.0, 3.0])
    assert interleaved({"only": lambda: next(values)}, 3) == {"only": 3.0}


def test_median_and_ratio_skip_what_is_missing() -> None:
    assert median_or_none([None, 4.0, 2.0, None]) == 3.0
    assert median_or_none([None]) is None
    assert ratio_or_none(1.0, 4.0) == 0.25
    assert ratio_or_none(None, 4.0) is None
    assert ratio_or_none(1.0, 0.0) is None


def test_table_renders_missing_ratios_and_verdicts() -> None:
    rows = [Row("measured", 0.5, "<= 1", True, "d1"), Row("not measured", None, "-", None, "d2")]
    lines = table(rows).splitlines()
    assert lines[2] == "| measured | 0.500 | <= 1 | met | d1 |"
    assert lines[3] == "| not measured | n/a | - | - | d2 |"
    assert "MISSED" in Row("x", 2.0, "<= 1", False, "").line()


@pytest.mark.parametrize(
    ("listed", "task", "broken"),
    [("1", 1, True), (" 0, 2 ", 2, True), ("1", 0, False), ("", 1, False), ("1", None, False)],
)
def test_broken_node_option_names_array_tasks(
    monkeypatch: pytest.MonkeyPatch, listed: str, task: int | None, broken: bool
) -> None:
    monkeypatch.setenv(worker.BROKEN_TASKS_ENV, listed)
    assert worker._on_broken_node(task) is broken
