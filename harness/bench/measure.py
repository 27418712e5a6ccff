"""The benchmarks' measuring pieces: interleaved repetitions, medians, the table (``bench/``
measures with them, ``tests/test_measure.py`` checks them)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


@dataclass
class Row:
    """One line of the result table: what was compared, the result, the target.

    Attributes:
        name: what was compared, and in which unit the result is (a ratio unless the
            name says otherwise). ratio: the result (``None`` when it could not be
            measured, e.g. a variant never completed). target: the goal, as text.
        met: whether the target was met; ``None`` for rows without a target.
        detail: the absolute numbers behind the ratio, and counts.
    """

    name: str
    ratio: float | None
    target: str
    met: bool | None
    detail: str

    def line(self) -> str:
        """The row as one line of a Markdown table."""
        verdict = {True: "met", False: "MISSED", None: "-"}[self.met]
        ratio = "n/a" if self.ratio is None else f"{self.ratio:.3f}"
        return f"| {self.name} | {ratio} | {self.target} | {verdict} | {self.detail} |"


def interleaved_samples(
    variants: Mapping[str, Callable[[], T]], repetitions: int
) -> dict[str, list[T]]:
    """Run each variant ``repetitions`` times, interleaved; return every sample.

    Repetition ``i`` runs every variant once before repetition ``i + 1`` starts, so a
    slow spell of the machine hits all variants alike; odd repetitions run them in
    reverse order, so no variant always goes first.
    """
    samples: dict[str, list[T]] = {name: [] for name in variants}
    names = list(variants)
    for repetition in range(repetitions):
        for name in names if repetition % 2 == 0 else reversed(names):
            samples[name].append(variants[name]())
    return samples


def interleaved(variants: Mapping[str, Callable[[], float]], repetitions: int) -> dict[str, float]:
    """Run each variant ``repetitions`` times, interleaved; return each one's median.

    Each callable returns the quantity it measured (seconds, or a count).
    """
    samples = interleaved_samples(variants, repetitions)
    return {name: statistics.median(values) for name, values in samples.items()}


def median_or_none(values: Iterable[float | None]) -> float | None:
    """The median of the values that are not ``None``; ``None`` when there are none."""
    present = [value for value in values if value is not None]
    return statistics.median(present) if present else None


def ratio_or_none(numerator: float | None, denominator: float | None) -> float | None:
    """``numerator / denominator``, or ``None`` when either is missing or the divisor is 0."""
    if numerator is None or not denominator:
        return None
    return numerator / denominator


def per_call(function: Callable[[], object], calls: int) -> Callable[[], float]:
    """A measurement: the mean seconds per call over ``calls`` calls."""

    def measure() -> float:
        started = time.perf_counter()
        for _ in range(calls):
            function()
        return (time.perf_counter() - started) / calls

    return measure


def table(rows: Sequence[Row]) -> str:
    """The rows as a Markdown table."""
    head = "| row | result | target | | detail |\n|---|---|---|---|---|"
    return "\n".join([head, *(row.line() for row in rows)])
