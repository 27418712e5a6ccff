"""The suite's order (``harness.session.schedule``), checked against pytest-xdist's own scheduler."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from xdist.scheduler import WorkStealingScheduling

from harness.session.schedule import heavy_first, worksteal_shares

pytest_plugins = ("pytester",)


class _Worker:
    """What ``WorkStealingScheduling`` uses of a worker: its name and where tests go."""

    shutting_down = False

    def __init__(self, name: str) -> None:
        self.gateway = SimpleNamespace(id=name)
        self.sent: list[int] = []

    def send_runtest_some(self, indices: list[int]) -> None:
        self.sent.extend(indices)


def _first_shares(
    pytester: pytest.Pytester, collection: list[str], workers: int
) -> list[list[str]]:
    """The tests each worker of ``workers`` gets first from xdist's worksteal scheduler."""
    config = pytester.parseconfig("--tx", f"{workers}*popen")
    scheduler = WorkStealingScheduling(config)
    nodes = [_Worker(f"gw{n}") for n in range(workers)]
    for node in nodes:
        scheduler.add_node(node)
    for node in nodes:
        scheduler.add_node_collection(node, collection)
    scheduler.schedule()
    return [[collection[index] for index in node.sent] for node in nodes]


@pytest.mark.parametrize(("count", "workers"), [(0, 3), (10, 3), (1094, 3), (7, 2), (5, 1)])
def test_the_shares_are_the_ones_worksteal_hands_out(pytester, count, workers) -> None:
    collection = [f"t{n}" for n in range(count)]

    shares = _first_shares(pytester, collection, workers)

    assert [len(share) for share in shares] == worksteal_shares(count, workers)


def test_every_workers_share_starts_with_its_part_of_the_whole_jobs(pytester) -> None:
    # As collected: unit tests first, the whole jobs together at the end.
    collection = [f"unit{n}" for n in range(20)] + [f"job{n}" for n in range(7)]

    shares = _first_shares(pytester, heavy_first(collection, _is_job, 3), 3)

    jobs = [[name for name in share if _is_job(name)] for share in shares]
    assert sorted(len(part) for part in jobs) == [2, 2, 3]
    for share, part in zip(shares, jobs):
        assert share[: len(part)] == part  # the whole jobs first
        assert _is_job(share[0]) and not _is_job(share[-1])
    assert sorted(name for share in shares for name in share) == sorted(collection)


def test_each_part_keeps_the_collection_order() -> None:
    collection = ["a", "J1", "b", "J2", "c", "J3", "d", "J4", "e"]

    ordered = heavy_first(collection, _is_upper, 2)

    assert worksteal_shares(9, 2) == [4, 5]
    assert ordered == ["J1", "J3", "a", "b", "J2", "J4", "c", "d", "e"]


def test_heavy_items_overflow_into_the_shares_with_room() -> None:
    assert worksteal_shares(5, 2) == [2, 3]
    assert heavy_first(["A", "B", "C", "D", "E"], _is_upper, 2) == ["A", "C", "B", "D", "E"]


def test_one_worker_runs_the_heavy_items_first() -> None:
    assert heavy_first(["a", "B", "c", "D"], _is_upper, 1) == ["B", "D", "a", "c"]


def test_each_share_starts_its_whole_jobs_at_another_module() -> None:
    # Three modules of heavy items (A, B, C: two tests each), then light ones.
    collection = ["A1", "A2", "A3", "B1", "B2", "B3", "C1", "C2", "C3"] + list("abcdefghi")

    ordered = heavy_first(collection, _is_upper, 3, group=lambda name: name[0])

    assert worksteal_shares(18, 3) == [6, 6, 6]
    shares = [ordered[0:6], ordered[6:12], ordered[12:18]]
    assert [share[:3] for share in shares] == [
        ["A1", "B1", "C1"],
        ["B2", "C2", "A2"],
        ["C3", "A3", "B3"],
    ]
    assert [share[3:] for share in shares] == [list("abc"), list("def"), list("ghi")]


def test_a_modules_tests_stay_together_in_a_share() -> None:
    collection = ["A1", "A2", "A3", "A4", "B1", "B2", "x", "y"]

    ordered = heavy_first(collection, _is_upper, 2, group=lambda name: name[0])

    assert ordered == ["A1", "A3", "B1", "x", "B2", "A2", "A4", "y"]


@pytest.mark.parametrize(("count", "workers"), [(3, 0), (-1, 2)])
def test_impossible_shares_are_refused(count, workers) -> None:
    with pytest.raises(ValueError, match="workers >= 1"):
        worksteal_shares(count, workers)


def _is_job(name: str) -> bool:
    return name.startswith("job")


def _is_upper(name: str) -> bool:
    return name.isupper()
