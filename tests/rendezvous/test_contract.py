"""torch's ``RendezvousHandler`` contract, run over every backend a launcher may name.

The contract is what torch's ``api.py`` documents and what its ``c10d`` handler does,
as torchrun's agent relies on it. Each test states one item and runs once per backend:
torch's ``c10d``, ``barrier``, and ``segment-health`` over each (an empty decision
directory, one array task per launcher). A launcher is a handler built as torchrun
builds it, from ``RendezvousParameters``, with its own client of a real TCPStore on
127.0.0.1 that no launcher hosts (``is_host=false``), joining from a thread.

Rules: real stores, no mocks. A death is a keep-alive stopped (:meth:`Backend.die`).
Waits are for a state, bounded by :data:`BOUND`; a duration is asserted only from
below. Keep-alives every second (both take whole seconds), a death counted late, so a
loaded machine's pauses never pass for one. torch's c10d runs with its store sharing
off: shared, it breaks one item (:func:`test_c10d_sharing_its_store_leaves_a_newcomer_without_an_address`).
A backend's own way within the contract is said in the test's docstring.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest
from torch.distributed import DistStoreError, TCPStore
from torch.distributed.elastic.rendezvous import (
    RendezvousClosedError,
    RendezvousHandler,
    RendezvousInfo,
    RendezvousParameters,
    RendezvousTimeoutError,
)
from torch.distributed.elastic.rendezvous.dynamic_rendezvous import DynamicRendezvousHandler
from torch.distributed.elastic.rendezvous.registry import handler_registry

from harness.rendezvous import Join
from harness.slurmenv import slurm_env
from harness.waits import wait_until
from nvrx_seghealth import SegmentHealthRendezvousHandler
from nvrx_seghealth._launcher.agentstore import SHARED_STORE_ENV
from nvrx_seghealth._launcher.backend import create_segment_health_handler
from nvrx_seghealth._rendezvous.barrier import BarrierRendezvousHandler
from nvrx_seghealth._rendezvous.barrier.creator import create_handler as create_barrier

RUN = "contract"
#: Seconds a test waits for a state it expects: far beyond any round's own timeouts.
BOUND = 60.0
#: Seconds without a keep-alive after which a launcher counts as dead: long, so that a
#: loaded machine's pauses never pass for a death; :data:`DIES_AFTER` where one is awaited
#: (3 s, torch's ratio, let a c10d survivor pass for dead at a load of 150: dropped, it
#: is never told, and the spare waits for it).
DEAD_AFTER = 10
DIES_AFTER = 5
#: The rdzv-conf every launcher gets (a test adds its own keys).
CONF: dict[str, str] = {
    "is_host": "false",
    "join_timeout": f"{BOUND:g}",
    "last_call_timeout": "1",
    "keep_alive_interval": "1",
    "keep_alive_max_attempt": str(DEAD_AFTER),
    "close_timeout": f"{BOUND:g}",  # c10d's: a loaded machine's keep-alives delay a close
}


@dataclass(frozen=True)
class Backend:
    """A backend under the contract: its name and how torchrun builds its handler."""

    name: str
    create: Callable[[RendezvousParameters], RendezvousHandler]
    #: Its own rdzv-conf keys (``segment-health``'s decision directory: ``{dir}``).
    conf: Mapping[str, str]

    def die(self, handler: RendezvousHandler) -> None:
        """Stop ``handler``'s keep-alive: to the others, its launcher died."""
        if isinstance(handler, SegmentHealthRendezvousHandler):
            handler = handler.inner
        if isinstance(handler, DynamicRendezvousHandler):
            handler._stop_heartbeats()
        else:
            assert isinstance(handler, BarrierRendezvousHandler)
            handler._heartbeat.stop()


def _wrapped(inner: str) -> Backend:
    conf = {"inner_backend": inner, "segment_health_check_dir": "{dir}"}
    return Backend("segment-health", create_segment_health_handler, conf)


BACKENDS = {
    "c10d": Backend("c10d", handler_registry.create_handler, {}),
    "barrier": Backend("barrier", create_barrier, {}),
    "segment-health/c10d": _wrapped("c10d"),
    "segment-health/barrier": _wrapped("barrier"),
}


class Launchers:
    """The launchers of one test's rendezvous; every one is shut down when it ends."""

    def __init__(
        self, backend: Backend, master: TCPStore, directory: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        self.backend = backend
        self._endpoint = f"127.0.0.1:{master.port}"
        self._directory = directory
        self._monkeypatch = monkeypatch
        self.handlers: list[RendezvousHandler] = []
        self.joins: list[Join[RendezvousHandler]] = []

    def new(self, count: int, nodes: tuple[int, int], **conf: str) -> list[RendezvousHandler]:
        """``count`` launchers of ``--nnodes MIN:MAX`` ``nodes``; ``conf`` adds keys."""
        own = {key: value.format(dir=self._directory) for key, value in self.backend.conf.items()}
        config: dict[str, str] = {**CONF, **own, **conf}
        low, high = nodes
        params = RendezvousParameters(
            self.backend.name, self._endpoint, RUN, low, high, "127.0.0.1", **config
        )
        made = []
        for _ in range(count):
            # each launcher is process 0 of its own array task (read when it is built)
            env = slurm_env(task=len(self.handlers)) | {"SLURM_RESTART_COUNT": "0"}
            for key, value in env.items():
                self._monkeypatch.setenv(key, value)
            made.append(self.backend.create(params))
            self.handlers.append(made[-1])
        return made

    def join(self, *handlers: RendezvousHandler) -> list[Join[RendezvousHandler]]:
        """Start ``next_rendezvous()`` on each of ``handlers``, each in its thread."""
        started = [Join(handler) for handler in handlers]
        self.joins += started
        return started

    def close(self) -> None:
        """Shut every launcher down, its keep-alive first (c10d's contend with a close);
        each join still waiting ends."""
        for handler in self.handlers:
            self.backend.die(handler)
        for handler in self.handlers:
            handler.shutdown()
        for join in self.joins:
            join.thread.join(BOUND)


def _environment(monkeypatch: pytest.MonkeyPatch, *, sharing: bool) -> None:
    """torch's handler sharing its store with the workers (:data:`SHARED_STORE_ENV`
    unset, torch's default) or not (``1``); ``tests/conftest.py`` undoes what a creator
    sets."""
    if sharing:
        monkeypatch.delenv(SHARED_STORE_ENV, raising=False)
    else:
        monkeypatch.setenv(SHARED_STORE_ENV, "1")


def _launchers(
    backend: Backend, master: TCPStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Launchers]:
    directory = tmp_path / "shc"
    directory.mkdir()
    group = Launchers(backend, master, directory, monkeypatch)
    yield group
    group.close()


@pytest.fixture(params=list(BACKENDS))
def launchers(
    request: pytest.FixtureRequest,
    tcp_store: TCPStore,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Launchers]:
    """The launchers of one backend; torch's handler does not share its store (see
    :func:`test_c10d_sharing_its_store_leaves_a_newcomer_without_an_address`)."""
    _environment(monkeypatch, sharing=False)
    yield from _launchers(BACKENDS[request.param], tcp_store, tmp_path, monkeypatch)


@pytest.fixture
def sharing_c10d(
    tcp_store: TCPStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Launchers]:
    """Launchers of torch's c10d as torchrun runs it by default: sharing its store."""
    _environment(monkeypatch, sharing=True)
    yield from _launchers(BACKENDS["c10d"], tcp_store, tmp_path, monkeypatch)


def results(joins: list[Join[RendezvousHandler]]) -> list[RendezvousInfo]:
    """What each of ``joins`` returned, in order; what one raised is raised here."""
    infos = []
    for join in joins:
        join.wait(BOUND)
        if join.error is not None:
            raise join.error
        infos.append(join.result)
    return infos


def ranks(infos: list[RendezvousInfo]) -> list[int]:
    return sorted(info.rank for info in infos)


def everyone_waits(handlers: list[RendezvousHandler]) -> Callable[[], bool]:
    return lambda: all(handler.num_nodes_waiting() > 0 for handler in handlers)


def test_launchers_get_distinct_ranks_one_world_and_one_round_store(
    launchers: Launchers,
) -> None:
    infos = results(launchers.join(*launchers.new(3, (3, 3))))
    assert ranks(infos) == [0, 1, 2]
    assert {info.world_size for info in infos} == {3}
    infos[0].store.set("probe", "from the first")
    assert all(info.store.get("probe") == b"from the first" for info in infos[1:])


def test_the_handler_names_its_run_and_its_backend(launchers: Launchers) -> None:
    (handler,) = launchers.new(1, (1, 1))
    assert handler.get_run_id() == RUN
    assert handler.get_backend() == launchers.backend.name


def test_with_min_present_the_round_closes_after_the_last_call_with_who_came(
    launchers: Launchers,
) -> None:
    started = time.monotonic()
    infos = results(launchers.join(*launchers.new(2, (2, 3), last_call_timeout="2")))
    assert time.monotonic() - started >= 2  # it waited the last call for a third
    assert ranks(infos) == [0, 1]
    assert {info.world_size for info in infos} == {2}


def test_with_max_present_the_round_closes_at_once(launchers: Launchers) -> None:
    """The last call is far beyond :data:`BOUND`: only the MAX-th arrival ends it."""
    handlers = launchers.new(3, (2, 3), last_call_timeout=f"{10 * BOUND:g}")
    infos = results(launchers.join(*handlers))
    assert ranks(infos) == [0, 1, 2]
    assert {info.world_size for info in infos} == {3}


def test_too_few_launchers_time_out_after_the_join_timeout(launchers: Launchers) -> None:
    (handler,) = launchers.new(1, (2, 2), join_timeout="1")
    started = time.monotonic()
    (join,) = launchers.join(handler)
    join.wait(BOUND)
    assert isinstance(join.error, RendezvousTimeoutError), repr(join.error)
    assert time.monotonic() - started >= 1


def test_set_closed_is_seen_by_every_handler_and_refuses_every_later_join(
    launchers: Launchers,
) -> None:
    """``is_closed()`` propagates eventually (api.py): it is awaited, not read once."""
    handlers = launchers.new(2, (2, 2))
    results(launchers.join(*handlers))
    handlers[0].set_closed()
    (late,) = launchers.new(1, (2, 2))
    wait_until(lambda: all(handler.is_closed() for handler in [*handlers, late]), BOUND)
    for handler in [*handlers, late]:
        with pytest.raises(RendezvousClosedError):
            handler.next_rendezvous()


def test_set_closed_ends_a_join_that_waits_for_more_launchers(launchers: Launchers) -> None:
    waiting = launchers.join(*launchers.new(2, (3, 3)))
    (closer,) = launchers.new(1, (3, 3))
    closer.set_closed()
    for join in waiting:
        join.wait(BOUND)
        assert isinstance(join.error, RendezvousClosedError), repr(join.error)


def test_a_full_world_has_no_one_waiting(launchers: Launchers) -> None:
    handlers = launchers.new(2, (2, 2))
    results(launchers.join(*handlers))
    assert [handler.num_nodes_waiting() for handler in handlers] == [0, 0]


def admit_a_newcomer(launchers: Launchers, **conf: str) -> None:
    """A world of one with room for two; a newcomer waits until the member joins again.

    A launcher waiting in c10d reads the state once a second or so: when the member
    joins again, the newcomer must see the new round open within its last call, or
    that round closes without it and it waits for the next restart (c10d's own way;
    the agent restarts again). A last call of 3 s leaves it that time.
    """
    first, newcomer = launchers.new(2, (1, 2), last_call_timeout="3", **conf)
    (info,) = results(launchers.join(first))
    assert (info.rank, info.world_size) == (0, 1)
    assert first.num_nodes_waiting() == 0
    (pending,) = launchers.join(newcomer)
    wait_until(everyone_waits([first]), BOUND)
    infos = results([*launchers.join(first), pending])
    assert ranks(infos) == [0, 1]
    assert {info.world_size for info in infos} == {2}


def test_a_newcomer_to_a_world_with_room_waits_and_is_admitted(launchers: Launchers) -> None:
    admit_a_newcomer(launchers)


@pytest.mark.xfail(raises=DistStoreError, strict=True, reason="torch's c10d, store shared")
def test_c10d_sharing_its_store_leaves_a_newcomer_without_an_address(
    sharing_c10d: Launchers,
) -> None:
    """The contract broken by torch's c10d in its default mode, which shares the
    launcher's store with the workers (``TORCH_DISABLE_SHARE_RDZV_TCP_STORE`` unset).

    A launcher that held rank 0 before and holds it again keeps its store and writes
    the workers' address only once, in its first round's store. A newcomer, in its first
    round, waits for that address in the new round's store and fails after the read
    timeout with a ``DistStoreError``, not a rendezvous error (seen with torch 2.13).
    Hence the other tests run c10d with sharing off, torch's opt-out, which the
    ``segment-health`` backend sets for torch's handler; ``barrier`` never shares.
    """
    admit_a_newcomer(sharing_c10d, read_timeout="3")


def test_a_member_that_joins_again_makes_a_new_round_of_the_same_members(
    launchers: Launchers,
) -> None:
    handlers = launchers.new(3, (3, 3))
    before = results(launchers.join(*handlers))
    again = launchers.join(handlers[0])  # its workers failed
    wait_until(everyone_waits(handlers[1:]), BOUND)
    after = results([*again, *launchers.join(*handlers[1:])])
    assert ranks(after) == [0, 1, 2]
    assert {info.world_size for info in after} == {3}
    before[0].store.set("probe", "round before")
    assert not after[0].store.check(["probe"])  # each round has a store of its own


def test_a_spare_waits_and_steps_in_when_a_member_dies(launchers: Launchers) -> None:
    conf = {"keep_alive_max_attempt": str(DIES_AFTER)}
    members = launchers.new(2, (2, 2), **conf)
    results(launchers.join(*members))
    (spare,) = launchers.join(*launchers.new(1, (2, 2), **conf))
    # a spare of a full world does not make it restart (whenever the spare arrives)
    assert [member.num_nodes_waiting() for member in members] == [0, 0]
    launchers.backend.die(members[0])
    wait_until(everyone_waits(members[1:]), BOUND)
    infos = results([*launchers.join(members[1]), spare])
    assert ranks(infos) == [0, 1]
    assert {info.world_size for info in infos} == {2}


def test_a_member_that_joins_again_beside_a_spare_makes_a_full_world_and_one_waits(
    launchers: Launchers,
) -> None:
    """Which two of the three form the world is the backend's choice."""
    members = launchers.new(2, (2, 2))
    results(launchers.join(*members))
    spare_and_first = launchers.join(*launchers.new(1, (2, 2)), members[0])
    wait_until(everyone_waits(members[1:]), BOUND)
    joins = [*spare_and_first, *launchers.join(members[1])]
    wait_until(lambda: sum(not join.thread.is_alive() for join in joins) == 2, BOUND)
    infos = results([join for join in joins if not join.thread.is_alive()])
    assert ranks(infos) == [0, 1]
    assert {info.world_size for info in infos} == {2}


def test_shutdown_returns_true_and_closes(launchers: Launchers) -> None:
    handlers = launchers.new(2, (2, 2))
    results(launchers.join(*handlers))
    assert handlers[0].shutdown() is True
    wait_until(handlers[1].is_closed, BOUND)


def test_the_bootstrap_store_info_builds_the_workers_store(launchers: Launchers) -> None:
    """torch's convention (its agent's): with ``use_agent_store`` the store at that
    address is served already and every worker connects; without it, rank 0's worker
    serves it there."""
    handlers = launchers.new(2, (2, 2))
    infos = sorted(results(launchers.join(*handlers)), key=lambda info: info.rank)
    bootstraps = [info.bootstrap_store_info for info in infos]
    addresses = {(b.master_addr, b.master_port) for b in bootstraps if b is not None}
    assert len(addresses) == 1 and None not in bootstraps
    ((addr, port),) = addresses
    assert addr == "127.0.0.1"
    (served,) = {handler.use_agent_store for handler in handlers}
    timeout = timedelta(seconds=BOUND)
    rank_0 = TCPStore(addr, port, is_master=not served, wait_for_workers=False, timeout=timeout)
    rank_1 = TCPStore(addr, port, is_master=False, timeout=timeout)
    rank_0.set("worker", "rank 0")
    assert rank_1.get("worker") == b"rank 0"
