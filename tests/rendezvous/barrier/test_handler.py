"""The barrier rendezvous handler on a real TCPStore: several launchers, each with its own
client and handler, joining from threads.

Only a launcher's death is injected (its heartbeat stopped, or its join cut short by
calling the protocol's first steps alone): a thread cannot be killed. Every wait is for
a state, bounded generously; nothing asserts how long a round took.
"""

from __future__ import annotations

import dataclasses
import functools
import signal
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import pytest
from torch.distributed import TCPStore
from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.elastic.rendezvous import (
    RendezvousClosedError,
    RendezvousGracefulExitError,
    RendezvousInfo,
    RendezvousTimeoutError,
)

from harness.rendezvous import tcp_client
from harness.torchsignal import sigterm_after
from harness.waits import wait_until
from nvrx_seghealth._rendezvous.barrier import BarrierRendezvousHandler, BarrierSettings, keys
from nvrx_seghealth._rendezvous.barrier.closer import close

#: Seconds a test waits for a round it expects; far beyond any round's own timeouts.
BOUND = 60.0

#: Heartbeats every 0.5 s, dead after 4 s without one: a loaded machine's scheduling
#: delays do not pass for a death.
SETTINGS = BarrierSettings(
    run_id="job",
    min_nodes=2,
    max_nodes=2,
    join_timeout=BOUND,
    last_call_timeout=1.0,
    keep_alive_interval=0.5,
    keep_alive_max_attempt=8,
    local_addr="127.0.0.1",
)


@pytest.fixture
def master() -> Iterator[TCPStore]:
    store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, use_libuv=True)
    yield store


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(max_workers=16) as executor:
        yield executor


class Launchers:
    """Handlers of one rendezvous, each over its own client of ``master``."""

    def __init__(self, master: TCPStore, pool: ThreadPoolExecutor, **settings: object) -> None:
        self.master = master
        self.pool = pool
        self.settings = dataclasses.replace(SETTINGS, **settings)  # type: ignore[arg-type]
        self.handlers: list[BarrierRendezvousHandler] = []

    def new(self, count: int = 1) -> list[BarrierRendezvousHandler]:
        made = [
            BarrierRendezvousHandler(tcp_client(self.master), self.settings) for _ in range(count)
        ]
        self.handlers += made
        return made

    def join(self, handlers: list[BarrierRendezvousHandler]) -> list[Future[RendezvousInfo]]:
        return [self.pool.submit(handler.next_rendezvous) for handler in handlers]

    def stop(self) -> None:
        for handler in self.handlers:
            handler._heartbeat.stop()


@pytest.fixture
def launchers(master: TCPStore, pool: ThreadPoolExecutor) -> Iterator[Launchers]:
    made: list[Launchers] = []

    def factory(**settings: object) -> Launchers:
        made.append(Launchers(master, pool, **settings))
        return made[-1]

    yield factory  # type: ignore[misc]
    for group in made:
        # the rendezvous ends, so that no thread stays blocked in a wait
        if group.handlers:
            group.handlers[0].set_closed()
        group.stop()


def results(futures: list[Future[RendezvousInfo]]) -> list[RendezvousInfo]:
    return [future.result(timeout=BOUND) for future in futures]


def ranks(infos: list[RendezvousInfo]) -> list[int]:
    return sorted(info.rank for info in infos)


def test_a_full_world_forms_with_ranks_and_one_bootstrap_store(launchers) -> None:
    group = launchers(min_nodes=4, max_nodes=4)
    infos = results(group.join(group.new(4)))
    assert ranks(infos) == [0, 1, 2, 3]
    assert {info.world_size for info in infos} == {4}
    bootstraps = [info.bootstrap_store_info for info in infos]
    assert len({(b.master_addr, b.master_port) for b in bootstraps if b is not None}) == 1
    assert None not in bootstraps
    assert all(not h.use_agent_store and h.get_backend() == "barrier" for h in group.handlers)


def test_min_max_closes_after_the_last_call_with_who_came(launchers) -> None:
    # a last call long enough for three threads to arrive, even on a loaded machine
    group = launchers(min_nodes=2, max_nodes=4, last_call_timeout=5.0)
    infos = results(group.join(group.new(3)))
    assert ranks(infos) == [0, 1, 2]
    assert {info.world_size for info in infos} == {3}


def test_too_few_launchers_time_out_and_later_ones_form_the_next_round(launchers) -> None:
    group = launchers(join_timeout=1.0)
    (future,) = group.join(group.new(1))
    with pytest.raises(RendezvousTimeoutError):
        future.result(timeout=BOUND)
    # the launchers that come after it are not told that round's timeout
    infos = results(group.join(group.new(2)))
    assert ranks(infos) == [0, 1]


def test_a_launcher_that_comes_later_is_waited_for_and_joins_the_next_round(launchers) -> None:
    group = launchers(min_nodes=1, max_nodes=3)
    first, late = group.new(2)
    (info,) = results(group.join([first]))
    assert (info.rank, info.world_size) == (0, 1)
    assert first.num_nodes_waiting() == 0
    (pending,) = group.join([late])
    wait_until(lambda: first.num_nodes_waiting() == 1, BOUND)
    infos = results([*group.join([first]), pending])
    assert ranks(infos) == [0, 1]
    assert {info.world_size for info in infos} == {2}


def test_a_spare_waits_and_steps_in_when_a_member_dies(launchers) -> None:
    group = launchers()
    members, spare = group.new(2), group.new(1)[0]
    infos = results(group.join(members))
    assert ranks(infos) == [0, 1]
    (spare_joined,) = group.join([spare])
    wait_until(lambda: group.master.add(keys.prefix("job") + "/1/n", 0) == 1, BOUND)
    # a full world: the spare does not restart it
    assert members[0].num_nodes_waiting() == members[1].num_nodes_waiting() == 0
    members[0]._heartbeat.stop()  # this launcher dies
    wait_until(lambda: members[1].num_nodes_waiting() > 0, BOUND)
    infos = results([*group.join([members[1]]), spare_joined])
    assert ranks(infos) == [0, 1]


def test_a_closer_that_dies_is_replaced_and_left_out(launchers) -> None:
    group = launchers(min_nodes=2, max_nodes=3)
    dead, *alive = group.new(3)
    # the dead launcher took slot 1 (the closer's) and died before deciding the round
    dead._heartbeat.beat()
    assert dead._arrive(keys.Round(0)) == 1
    dead._store.compare_set(keys.Round(0).closer, "", dead.node)
    infos = results(group.join(alive))
    assert ranks(infos) == [0, 1]
    assert {info.world_size for info in infos} == {2}


def test_re_rendezvous_after_a_failure_forms_a_new_round(launchers) -> None:
    group = launchers(min_nodes=3, max_nodes=3)
    first = results(group.join(group.new(3)))
    failed, *others = group.handlers
    (again,) = group.join([failed])  # its workers failed
    wait_until(lambda: all(handler.num_nodes_waiting() > 0 for handler in others), BOUND)
    second = results([again, *group.join(others)])
    assert ranks(second) == [0, 1, 2]
    # each round has its own store for the agents
    first[0].store.set("probe", "round 0")
    assert not second[0].store.check(["probe"])


def test_set_closed_ends_every_wait_and_every_later_join(launchers) -> None:
    group = launchers(min_nodes=3, max_nodes=3)
    waiting = group.join(group.new(2))
    wait_until(lambda: group.master.add(keys.prefix("job") + "/0/n", 0) == 2, BOUND)
    (closer,) = group.new(1)
    assert not closer.is_closed()
    closer.set_closed()
    for future in waiting:
        with pytest.raises(RendezvousClosedError):
            future.result(timeout=BOUND)
    assert all(h.is_closed() for h in group.handlers)
    with pytest.raises(RendezvousClosedError):
        closer.next_rendezvous()


def test_shutdown_closes_and_lets_a_waiting_spare_exit_gracefully(launchers) -> None:
    group = launchers()
    members, spare = group.new(2), group.new(1)
    results(group.join(members))
    (spare_joined,) = group.join(spare)
    wait_until(lambda: group.master.add(keys.prefix("job") + "/1/n", 0) == 1, BOUND)
    assert members[0].shutdown()
    # torch's agent ends its run on this error: the job ended without needing the spare
    with pytest.raises(RendezvousGracefulExitError):
        spare_joined.result(timeout=BOUND)
    assert members[1].is_closed()
    assert members[0]._heartbeat._thread is not None
    assert not members[0]._heartbeat._thread.is_alive()


def test_a_closer_taken_for_dead_cannot_change_the_ranks_that_won(launchers) -> None:
    group = launchers()
    first, second, third = group.new(3)
    rnd = keys.Round(0)
    for handler in (first, second, third):
        handler._heartbeat.beat()
    assert [first._arrive(rnd), second._arrive(rnd)] == [1, 2]
    decide = functools.partial(
        close,
        run_id="job",
        min_nodes=2,
        max_nodes=2,
        join_timeout=BOUND,
        last_call_timeout=1.0,
        interval=0.5,
        dead_after=4.0,
    )
    won = decide(first._store, first._waits, rnd, first.node)
    # a third arrives; the second launcher took the first for dead and decides again
    assert third._arrive(rnd) == 3
    first._store.set(keys.heartbeat(first.node), "0")
    assert decide(second._store, second._waits, rnd, second.node) == won
    assert won.closer == first.node
    ranks_read = [int(second._store.get(rnd.rank(won.closer, slot))) for slot in (1, 2)]
    assert ranks_read == [0, 1]


@pytest.mark.parametrize("waits_as", ["closer", "joiner"])
def test_a_sigterm_ends_a_wait_in_the_rendezvous_with_torchs_exception(launchers, waits_as) -> None:
    """A launcher told to stop in a restart's rendezvous leaves at once, as from c10d's:
    the closer waits for ``min_nodes``, a joiner for the decision, each up to 120 s. The
    signal, sent after 0.5 s, must end the wait before half of that."""
    group = launchers(
        min_nodes=3,
        max_nodes=3,
        join_timeout=120.0,
        keep_alive_interval=30.0,
        keep_alive_max_attempt=4,
    )
    if waits_as == "joiner":
        first = group.new()
        futures = group.join(first)
        wait_until(lambda: group.master.check([f"{keys.prefix('job')}/0/slot/1"]), timeout=BOUND)
    (mine,) = group.new()
    started = time.monotonic()
    with sigterm_after(0.5), pytest.raises(SignalException) as raised:
        mine.next_rendezvous()
    assert raised.value.sigval == signal.SIGTERM
    assert time.monotonic() - started < 60.0  # the wait's own end is at 120 s
    # its client waits on in a thread of its own; another launcher closes, which ends it
    (closing,) = group.new()
    closing.set_closed()
    if waits_as == "joiner":
        with pytest.raises(RendezvousClosedError):
            results(futures)
