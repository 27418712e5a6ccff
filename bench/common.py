"""Shared pieces of the benchmarks: interleaved repetitions, medians, the table."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass
class Row:
    """One line of the result table: what was compared, the ratio, the target."""

    name: str
    ratio: float
    target: str
    met: bool | None
    detail: str

    def line(self) -> str:
        verdict = {True: "met", False: "MISSED", None: "-"}[self.met]
        return f"| {self.name} | {self.ratio:.3f} | {self.target} | {verdict} | {self.detail} |"


def interleaved(variants: dict[str, Callable[[], float]], repetitions: int) -> dict[str, float]:
    """Run each variant ``repetitions`` times, interleaved; return each one's median.

    Each callable returns the quantity it measured (seconds, or a count). Interleaving
    spreads the machine's noise over all variants alike.
    """
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(repetitions):
        for name, measure in variants.items():
            samples[name].append(measure())
    return {name: statistics.median(values) for name, values in samples.items()}


def per_call(function: Callable[[], object], calls: int) -> Callable[[], float]:
    """A measurement: the mean seconds per call over ``calls`` calls."""

    def measure() -> float:
        started = time.perf_counter()
        for _ in range(calls):
            function()
        return (time.perf_counter() - started) / calls

    return measure


def table(rows: Sequence[Row]) -> str:
    head = "| row | ratio | target | | detail |\n|---|---|---|---|---|"
    return "\n".join([head, *(row.line() for row in rows)])
