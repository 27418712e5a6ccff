"""The one reader of torch's private rendezvous state: a real state, and other shapes."""

from __future__ import annotations

import datetime
import os
import pickle
from dataclasses import dataclass
from types import SimpleNamespace

from torch.distributed.elastic.rendezvous import RendezvousError

from harness.rendezvous import RUN, Join, dynamic_handler, tcp_client
from harness.waits import wait_until
from nvrx_seghealth._demo.rendezvous_state import (
    RendezvousSnapshot,
    decode,
    read_barrier,
    read_endpoint,
    read_store,
)
from nvrx_seghealth._rendezvous.barrier import BarrierRendezvousHandler, BarrierSettings

UNKNOWN_FACTS = dict.fromkeys(("round", "complete", "closed", "participants", "waiting", "spares"))


def facts(snapshot: RendezvousSnapshot) -> dict[str, object]:
    return {name: getattr(snapshot, name) for name in UNKNOWN_FACTS}


def test_reads_a_real_c10d_rendezvous_state(tcp_store) -> None:
    me = (os.getpid(),)  # torch names a node by its handler's process
    assert facts(read_store(tcp_client(tcp_store), RUN)) == UNKNOWN_FACTS  # nobody joined

    member = dynamic_handler(tcp_client(tcp_store), 1, 1)
    member.next_rendezvous()
    spare = Join(dynamic_handler(tcp_client(tcp_store), 1, 1))  # beyond --nnodes' maximum
    wait_until(lambda: read_store(tcp_client(tcp_store), RUN).spares == me)

    snapshot = read_store(tcp_client(tcp_store), RUN)
    assert snapshot == RendezvousSnapshot(
        round=0, complete=True, closed=False, participants=me, waiting=(), spares=me
    )
    endpoint = f"127.0.0.1:{tcp_store.port}"
    timeout = datetime.timedelta(seconds=10)
    assert read_endpoint("c10d", endpoint, RUN, timeout) == snapshot

    member.shutdown()  # closes the rendezvous for every node
    assert isinstance(spare.wait().error, RendezvousError)  # the spare leaves
    assert read_store(tcp_client(tcp_store), RUN).closed is True


def test_reads_a_barrier_rendezvous_from_its_keys(tcp_store) -> None:
    me = (os.getpid(),)  # a barrier launcher's name holds its process id
    assert facts(read_barrier(tcp_client(tcp_store), RUN)) == UNKNOWN_FACTS | {"closed": False}
    settings = BarrierSettings(RUN, 1, 1, last_call_timeout=0, local_addr="127.0.0.1")
    member = BarrierRendezvousHandler(tcp_client(tcp_store), settings)
    member.next_rendezvous()
    spare = Join(BarrierRendezvousHandler(tcp_client(tcp_store), settings))
    wait_until(lambda: read_barrier(tcp_client(tcp_store), RUN).spares == me)

    snapshot = read_barrier(tcp_client(tcp_store), RUN)
    assert snapshot == RendezvousSnapshot(
        round=0, complete=True, closed=False, participants=me, waiting=(), spares=me
    )
    endpoint = f"127.0.0.1:{tcp_store.port}"
    assert read_endpoint("barrier", endpoint, RUN, datetime.timedelta(seconds=10)) == snapshot

    member.shutdown()  # closes the rendezvous; the spare leaves gracefully
    assert isinstance(spare.wait().error, RendezvousError)
    assert read_barrier(tcp_client(tcp_store), RUN).closed is True


@dataclass(frozen=True)
class _Node:
    address: str


class _Renamed:
    """A state of another shape: no ``round``, nodes without ``pid``, a list for a set."""

    def __init__(self) -> None:
        self.epoch = 3
        self.complete = True
        self.closed = "no"
        self.participants = {_Node("n1"): 0}
        self.wait_list = [SimpleNamespace(pid=12)]
        self.redundancy_list = None


def test_a_state_of_another_shape_gives_unknown_facts() -> None:
    snapshot = decode(pickle.dumps(_Renamed()))
    assert facts(snapshot) == UNKNOWN_FACTS | {"complete": True, "waiting": (12,)}
    assert snapshot.problem == (
        "_Renamed has no readable round, closed, participants, redundancy_list"
    )


def test_bytes_that_do_not_unpickle_give_unknown_facts() -> None:
    for raw in (b"not a pickle", pickle.dumps(_Renamed())[:-5], b""):
        snapshot = decode(raw)
        assert facts(snapshot) == UNKNOWN_FACTS
        assert snapshot.problem is not None and "does not unpickle" in snapshot.problem


def test_a_class_torch_no_longer_has_gives_unknown_facts() -> None:
    raw = pickle.dumps(_Renamed()).replace(b"_Renamed", b"_Vanishd")
    assert facts(decode(raw)) == UNKNOWN_FACTS


def test_no_stored_state_gives_unknown_facts() -> None:
    snapshot = decode(None)
    assert facts(snapshot) == UNKNOWN_FACTS and snapshot.problem is not None
