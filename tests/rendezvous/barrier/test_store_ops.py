"""The barrier rendezvous' store operations per launcher do not grow with the world.

Every launcher's store is a counting ``torch.distributed.Store`` over its own real
TCPStore client, so torch's ``PrefixStore`` runs on it as on the client. A round of 8 and
a round of 64 must cost each launcher the same number of operations: the joiners, and
the one closer, whose reads and writes of every slot are one ``multi_get`` and one
``multi_set`` whatever the world.
"""

from __future__ import annotations

import datetime
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import torch.distributed as dist

from harness.rendezvous import tcp_client
from nvrx_seghealth._rendezvous.barrier import BarrierRendezvousHandler, BarrierSettings


class CountingStore(dist.Store):
    """A torch store that forwards to ``store`` and counts each call by name; a clone
    (the heartbeat's own client) counts apart."""

    def __init__(self, store: dist.TCPStore) -> None:
        super().__init__()
        self.store = store
        self.calls: Counter[str] = Counter()
        #: the clones made, kept alive here: torch holds only their C++ half
        self.clones: list[CountingStore] = []

    def _call(self, name: str, *args: Any) -> Any:
        self.calls[name] += 1
        return getattr(self.store, name)(*args)

    def set(self, key: str, value: Any) -> None:
        self._call("set", key, value)

    def get(self, key: str) -> bytes:
        return self._call("get", key)

    def add(self, key: str, amount: int) -> int:
        return self._call("add", key, amount)

    def compare_set(self, key: str, expected: Any, desired: Any) -> bytes:
        return self._call("compare_set", key, expected, desired)

    def check(self, keys: list[str]) -> bool:
        return self._call("check", keys)

    def wait(self, keys: list[str], timeout: datetime.timedelta | None = None) -> None:
        self._call("wait", keys, *([] if timeout is None else [timeout]))

    def multi_get(self, keys: list[str]) -> list[bytes]:
        return self._call("multi_get", keys)

    def multi_set(self, keys: list[str], values: list[Any]) -> None:
        self._call("multi_set", keys, values)

    def clone(self) -> CountingStore:
        # a new client: a TCPStore's clone() takes a quarter of a second
        self.clones.append(CountingStore(tcp_client(self.store)))
        return self.clones[-1]


@pytest.fixture
def master() -> Iterator[dist.TCPStore]:
    yield dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, use_libuv=True)


def ops_per_launcher(master: dist.TCPStore, size: int) -> tuple[int, int]:
    """One round of ``size`` launchers: the most operations a joiner made, and the
    closer's (the launcher that got rank 0: arrival 1)."""
    settings = BarrierSettings(
        run_id=f"ops{size}",
        min_nodes=size,
        max_nodes=size,
        join_timeout=300,
        # no waiter's look at the closer's heartbeat within the round: a fixed count
        keep_alive_interval=5,
        keep_alive_max_attempt=60,
        local_addr="127.0.0.1",
    )
    stores = [CountingStore(tcp_client(master)) for _ in range(size)]
    handlers = [BarrierRendezvousHandler(store, settings) for store in stores]
    try:
        with ThreadPoolExecutor(max_workers=size) as pool:
            infos = list(pool.map(lambda h: h.next_rendezvous(), handlers, timeout=300))
        counts = [sum(store.calls.values()) for store in stores]
    finally:
        handlers[0].set_closed()
        for handler in handlers:
            handler._heartbeat.stop()
    assert sorted(info.rank for info in infos) == list(range(size))
    closer = counts[[info.rank for info in infos].index(0)]
    joiners = [count for count, info in zip(counts, infos) if info.rank != 0]
    return max(joiners), closer


def test_a_launchers_store_operations_do_not_grow_with_the_world(master) -> None:
    small = ops_per_launcher(master, 8)
    large = ops_per_launcher(master, 64)
    assert small == large
    joiner, closer = large
    # measured: 11 and 23 (the bootstrap store's keys included)
    assert joiner <= 12 and closer <= 25


def test_the_agents_frequent_question_reads_the_store_once_a_second(master) -> None:
    settings = BarrierSettings("asked", 1, 1, last_call_timeout=0, local_addr="127.0.0.1")
    store = CountingStore(tcp_client(master))
    handler = BarrierRendezvousHandler(store, settings)
    try:
        handler.next_rendezvous()
        before = sum(store.calls.values())
        # torchrun's agent asks every 0.1 s; twenty questions in a row take far less than
        # a second, so at most two of them read the store
        assert [handler.num_nodes_waiting() for _ in range(20)] == [0] * 20
        assert sum(store.calls.values()) - before <= 2
    finally:
        handler.shutdown()
