"""The workers' bootstrap store (``_launcher/agentstore.py``), through real in-process
launchers: torch's c10d dynamic handlers on a real TCPStore, wrapped by the package.

What the workers of a round are given must be a store that listens already, on a port
that nothing else can take before they connect (torch's own ``1`` hands them a port it
closed: the port race), and a new one each round, served by whoever holds rank 0 now
(torch's shared store keeps the first round's master, and its keys, for good).
"""

from __future__ import annotations

import datetime
import errno
import logging
import os
import socket

import pytest
from torch.distributed import PrefixStore, TCPStore
from torch.distributed.elastic.rendezvous import RendezvousInfo, RendezvousStoreInfo

from harness.rendezvous import dead_store, dynamic_handler, join_all, launcher, tcp_client
from harness.slurmenv import slurm_env
from nvrx_seghealth import SegmentHealthRendezvousHandler, UnhealthyNodeException, publish_decision
from nvrx_seghealth._launcher import agentstore
from nvrx_seghealth._launcher.agentstore import (
    EXCLUSIONS,
    SHARED_STORE_ENV,
    WorkersStore,
    serve_workers,
)
from nvrx_seghealth._launcher.events import DecisionRecorder
from nvrx_seghealth._launcher.failopen import FailOpen
from nvrx_seghealth._rendezvous.barrier import BarrierRendezvousHandler, BarrierSettings

ARRAY = "1000"


def workers_store(info: RendezvousInfo) -> TCPStore:
    """What a worker of the round does first: connect to its bootstrap store (a short
    timeout: a store that is not there fails the test, it is not waited for)."""
    bootstrap = info.bootstrap_store_info
    assert bootstrap is not None
    return TCPStore(
        bootstrap.master_addr,
        bootstrap.master_port,
        is_master=False,
        timeout=datetime.timedelta(seconds=5),
    )


def assert_held(port: int) -> None:
    """No other socket of the machine can take ``port``: it is bound already."""
    with socket.socket() as other, pytest.raises(OSError) as taken:
        other.bind(("127.0.0.1", port))
    assert taken.value.errno == errno.EADDRINUSE


def assert_one_held_store(
    infos: list[RendezvousInfo], handlers: list[SegmentHealthRendezvousHandler]
) -> None:
    """Every member's workers are given one store, served on a port held already, and
    no worker binds it."""
    bootstraps = [info.bootstrap_store_info for info in infos]
    ports = {bootstrap.master_port for bootstrap in bootstraps if bootstrap is not None}
    assert None not in bootstraps
    assert len(ports) == 1
    assert_held(ports.pop())
    first, second = (workers_store(info) for info in infos)
    first.set("rank 0 worker", "here")
    assert second.get("rank 0 worker") == b"here"
    assert all(handler.use_agent_store for handler in handlers)


def test_the_port_given_to_the_workers_is_held_from_the_round_on(tcp_store, shc):
    """torch's ``1`` closes the port it chose and lets the rank-0 worker bind it seconds
    later (the port race); the launcher holding rank 0 keeps it bound instead, and every
    launcher's workers are given the same store, which is served already."""
    handlers = [launcher(tcp_store, shc, slurm_env(task=t), 2, 2) for t in (0, 2)]
    infos = [join.result for join in join_all(handlers)]
    assert sorted(info.rank for info in infos) == [0, 1]
    assert_one_held_store(infos, handlers)


def test_once_the_unit_holding_rank_0_is_excluded_the_survivors_find_the_new_rank_0(tcp_store, shc):
    """The rank-0 unit is marked before the next round (torch's shared store keeps a
    survivor on the first round's master for good): the two survivors form the next
    round, and their workers reach the store of the one now holding rank 0, a new one
    that holds none of the first round's keys (pytorch#135712's stale addresses)."""
    tasks = (0, 1, 2)
    handlers = dict(
        zip(tasks, (launcher(tcp_store, shc, slurm_env(task=t), 2, 3) for t in tasks), strict=True)
    )
    first = {t: j.result for t, j in zip(tasks, join_all(handlers.values()), strict=True)}
    assert sorted(info.rank for info in first.values()) == [0, 1, 2]
    (holder,) = [t for t, info in first.items() if info.rank == 0]
    workers_store(first[holder]).set("default_pg/0//cpu//rank_1", "old address")

    publish_decision(shc, ARRAY, str(holder), "node1: ECC errors")
    joins = dict(zip(tasks, join_all(handlers.values()), strict=True))
    assert isinstance(joins[holder].error, UnhealthyNodeException)
    survivors = {t: joins[t].result for t in tasks if t != holder}
    assert sorted(info.rank for info in survivors.values()) == [0, 1]
    assert {info.world_size for info in survivors.values()} == {2}
    ports = {info.bootstrap_store_info.master_port for info in survivors.values()}
    assert len(ports) == 1
    new_port = ports.pop()
    assert new_port != first[holder].bootstrap_store_info.master_port
    assert_held(new_port)
    for info in survivors.values():
        assert not workers_store(info).check(["default_pg/0//cpu//rank_1"])


def test_a_launcher_that_cannot_serve_leaves_the_round_to_torch(tcp_store, caplog):
    """Fail open: when the round's store fails, rank 0 hands its workers torch's own port
    (its rank-0 worker binds it, ``use_agent_store`` is ``False``), and the others fall
    back to the same port: one WARNING a failed step (rank 0: its port, then torch's;
    rank 1: the read), never an exception. (A TCPStore's ``set`` does not wait for an
    answer: rank 0 sees its port in the store before it serves.)"""
    caplog.set_level(logging.WARNING, logger="nvrx_seghealth")
    inner = dynamic_handler(tcp_client(tcp_store), 1, 1)
    torchs = RendezvousStoreInfo("127.0.0.1", 29999)
    store = PrefixStore("round", dead_store())
    for rank in (0, 1):
        workers = WorkersStore(FailOpen(DecisionRecorder(inner)))
        info = workers.serve(RendezvousInfo(store, rank, 2, torchs))
        assert (info.rank, info.world_size) == (rank, 2)
        assert info.bootstrap_store_info == torchs
        assert workers.use_agent_store is (rank != 0)
    assert len([r for r in caplog.records if "fail open" in r.getMessage()]) == 3


def test_a_rank_zero_that_cannot_serve_says_so_and_no_member_waits(tcp_store, caplog, monkeypatch):
    """Rank 0's launcher cannot start the workers' store (here its start raises): it
    publishes torch's own port at once, which its worker binds. The other members read
    it without waiting out the store's timeout, and without a WARNING of their own."""
    caplog.set_level(logging.WARNING, logger="nvrx_seghealth")

    def cannot_serve(addr: str) -> TCPStore:
        raise OSError(errno.EADDRNOTAVAIL, "no port for the workers' store")

    monkeypatch.setattr(agentstore, "_new_server", cannot_serve)
    inner = dynamic_handler(tcp_client(tcp_store), 1, 1)
    torchs = RendezvousStoreInfo("127.0.0.1", 29999)
    served = [WorkersStore(FailOpen(DecisionRecorder(inner))) for _ in (0, 1)]
    round_store = PrefixStore("round", tcp_client(tcp_store))
    infos = [served[rank].serve(RendezvousInfo(round_store, rank, 2, torchs)) for rank in (0, 1)]
    assert [info.bootstrap_store_info for info in infos] == [torchs, torchs]
    assert [workers.use_agent_store for workers in served] == [False, True]
    failed = [r.getMessage() for r in caplog.records if "fail open" in r.getMessage()]
    assert len(failed) == 1, failed  # rank 0's start alone


@pytest.mark.parametrize(("given", "served"), [(None, True), ("1", True), ("0", False)])
def test_the_store_is_served_unless_the_user_turned_torchs_sharing_on(
    tcp_store, monkeypatch, caplog, given, served
):
    """Unset: set to ``1`` for torch's handler, and served; ``1`` from the user: served
    too; another value: kept, one WARNING, torch's own bootstrap."""
    if given is None:
        monkeypatch.delenv(SHARED_STORE_ENV, raising=False)
    else:
        monkeypatch.setenv(SHARED_STORE_ENV, given)
    caplog.set_level(logging.INFO, logger="nvrx_seghealth")
    inner = dynamic_handler(tcp_client(tcp_store), 1, 1)
    assert (serve_workers(inner, EXCLUSIONS) is not None) is served
    assert os.environ.get(SHARED_STORE_ENV) == (given or "1")
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == int(not served)


def test_the_barrier_rendezvous_workers_are_served_on_a_held_port(tcp_store, shc, monkeypatch):
    """Over ``inner_backend=barrier``, whose rank 0 hands its workers a port it closed
    (the port race), the launcher holding rank 0 serves them too, whatever the variable
    says (the barrier handler builds each round afresh), and the variable is not set."""
    monkeypatch.delenv(SHARED_STORE_ENV, raising=False)
    settings = BarrierSettings("job", 2, 2, last_call_timeout=0, local_addr="127.0.0.1")
    handlers = []
    for task in (0, 2):
        store = tcp_client(tcp_store)
        inner = BarrierRendezvousHandler(store, settings)
        handlers.append(
            SegmentHealthRendezvousHandler(
                inner, store=store, directory=shc, environ=slurm_env(task=task)
            )
        )
    infos = [join.result for join in join_all(handlers)]
    assert_one_held_store(infos, handlers)
    assert SHARED_STORE_ENV not in os.environ
    for handler in handlers:
        handler.shutdown()


def test_a_handler_other_than_torchs_dynamic_one_is_left_as_it_is(tcp_store, shc, monkeypatch):
    """Only torch's dynamic handler and the barrier handler publish each round in a store
    of that round alone; another inner handler's bootstrap is passed through, and the variable is not set."""
    monkeypatch.delenv(SHARED_STORE_ENV, raising=False)
    inner = dynamic_handler(tcp_client(tcp_store), 1, 1)
    other = SegmentHealthRendezvousHandler(inner, store=None, directory=None)
    assert serve_workers(other, EXCLUSIONS) is None
    assert SHARED_STORE_ENV not in os.environ
