"""The request/verdict hand-off between process 0 and its siblings, on real stores.

The protocol's tests are :class:`harness.handoff.HandoffTests`, run here on torch's own
stores; ``integration/etcd/test_handoff_on_etcd.py`` runs them on torch's EtcdStore against
a real etcd (through its own ``markers`` fixture).
"""

from __future__ import annotations

import threading
import time

import pytest
import torch.distributed as dist

from harness.handoff import HandoffTests, handoff
from harness.rendezvous import tcp_client
from nvrx_seghealth._decision.unit import AllocationUnit, InvalidIdentityError
from nvrx_seghealth._launcher.handoff import Answer, Verdict, VerdictHandoff
from nvrx_seghealth._launcher.markers import ReplacementGroupMarkers


@pytest.fixture(params=["hash", "file", "tcp", "prefix"])
def markers(request, tcp_store, tmp_path):
    store = {
        "hash": lambda: dist.HashStore(),
        "file": lambda: dist.FileStore(str(tmp_path / "store"), 1),
        "tcp": lambda: tcp_store,
        "prefix": lambda: dist.PrefixStore("torch.rendezvous.run", tcp_store),
    }[request.param]()
    return ReplacementGroupMarkers(store, "run", "50")


class TestHandoffOnTorchStores(HandoffTests):
    """The protocol on a HashStore, a FileStore, a TCPStore and a PrefixStore."""


def test_ids_are_validated_where_they_enter_the_unit():
    """The hand-off takes the unit's ids as they are; a hostile one never reaches it."""
    for task_id, restart_count in (("3/..", "0"), ("3", "x"), ("", "0")):
        with pytest.raises(InvalidIdentityError):
            AllocationUnit("50", task_id, is_array=True, restart_count=restart_count)


def test_many_siblings_wait_on_one_tcp_store(tcp_store):
    results = []

    def sibling():
        markers = ReplacementGroupMarkers(tcp_client(tcp_store), "run", "50")
        view = VerdictHandoff(markers, "3", "0")
        results.append(view.wait(view.request()[0], 30))

    siblings = [threading.Thread(target=sibling) for _ in range(16)]
    for thread in siblings:
        thread.start()
    process_zero = handoff(ReplacementGroupMarkers(tcp_store, "run", "50"))
    deadline = time.monotonic() + 30
    while process_zero.read()[0] < 16 and time.monotonic() < deadline:
        time.sleep(0.05)
    process_zero.publish(Answer(Verdict.HEALTHY, process_zero.read()[0]))
    for thread in siblings:
        thread.join(timeout=60)
    assert results == [Verdict.HEALTHY] * 16
