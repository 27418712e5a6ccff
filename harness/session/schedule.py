"""The order of a test run: whole jobs first, spread evenly over the xdist workers.

``./dev`` runs the suite with ``pytest-xdist``'s ``worksteal`` scheduler (pinned in
``pyproject.toml``). It hands each worker one contiguous share of the collected tests, in
collection order (:func:`worksteal_shares` gives their sizes), and a worker that runs dry
takes the second half of the longest queue left. In collection order the whole jobs
(minutes each) sit together at the end (``integration/`` after ``tests/``), so one
worker's share holds most of them and the last long job may start when the others have
nothing left to run: the machine then idles while that job ends. :func:`heavy_first`
orders the tests so that every share starts with an even part of the heavy tests and ends
with light ones: the long jobs start early, the queues' tails (what is stolen) are short
tests, and the run ends on unit tests.

Each share starts its heavy part at a different module. Dealt in collection order, every
worker would run the same module's jobs at once: five etcd leader-loss jobs that mostly
wait left a core idle for minutes, five matrix cells then crowded two cores. A module's
tests stay consecutive in a share, so its module-scoped fixtures are set up once.

Each worker collects and orders the same tests in the same way (the order depends only
on the collection and the number of workers), as ``pytest-xdist`` requires.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from itertools import groupby
from typing import TypeVar

__all__ = ["heavy_first", "worksteal_shares"]

T = TypeVar("T")


def worksteal_shares(count: int, workers: int) -> list[int]:
    """The sizes of the contiguous shares ``worksteal`` first hands ``workers`` workers
    out of ``count`` tests: each takes what is left divided by the workers still to serve.

    Raises:
        ValueError: ``workers`` is below 1 or ``count`` below 0.
    """
    if workers < 1 or count < 0:
        raise ValueError(f"need workers >= 1 and count >= 0, got {workers} and {count}")
    shares = []
    left = count
    for served in range(workers):
        share = left // (workers - served)
        shares.append(share)
        left -= share
    return shares


def heavy_first(
    items: Sequence[T],
    is_heavy: Callable[[T], bool],
    workers: int,
    group: Callable[[T], Hashable] = lambda item: None,
) -> list[T]:
    """``items`` reordered for ``workers`` workers: each worker's share (:func:`worksteal_shares`)
    holds every ``workers``-th heavy item, then light items, each in collection order.

    Heavy items are dealt in turn to the shares that have room; light items fill the rest
    of each share, the first share first, so tests of one module stay together. Share
    ``k`` then starts its heavy part at its ``k``-th fraction of its runs of one ``group``
    (a test's module), and wraps around to the runs before it. By default every item is
    of one group: no share rotates.

    Raises:
        ValueError: ``workers`` is below 1.
    """
    shares = worksteal_shares(len(items), workers)
    heavy = [item for item in items if is_heavy(item)]
    light = [item for item in items if not is_heavy(item)]
    parts: list[list[T]] = [[] for _ in shares]
    turn = 0
    for item in heavy:
        while len(parts[turn % workers]) >= shares[turn % workers]:
            turn += 1
        parts[turn % workers].append(item)
        turn += 1
    rest = iter(light)
    for index, (part, share) in enumerate(zip(parts, shares)):
        runs = [list(run) for _, run in groupby(part, key=group)]
        start = index * len(runs) // workers
        part[:] = [item for run in runs[start:] + runs[:start] for item in run]
        part.extend(next(rest) for _ in range(share - len(part)))
    return [item for part in parts for item in part]
