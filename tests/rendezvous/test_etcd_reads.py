"""What the one-key etcd reads leave unchanged elsewhere, without an etcd server.

Their reads against a real etcd, with thousands of old keys in torch's store directory:
``integration/etcd/test_one_key_reads.py``.
"""

from __future__ import annotations

import datetime
from collections import Counter

import pytest
import torch.distributed as dist

from harness.ports import free_port
from harness.rendezvous import CountingStore
from nvrx_seghealth._launcher.handoff import Answer, CounterReads, Verdict, VerdictHandoff
from nvrx_seghealth._launcher.markers import ReplacementGroupMarkers
from nvrx_seghealth._rendezvous.etcd_reads import OneKeyEtcdStore


@pytest.fixture(params=["hash", "file", "tcp", "prefix"])
def store(request, tcp_store, tmp_path):
    return {
        "hash": lambda: dist.HashStore(),
        "file": lambda: dist.FileStore(str(tmp_path / "store"), 1),
        "tcp": lambda: tcp_store,
        "prefix": lambda: dist.PrefixStore("torch.rendezvous.run", tcp_store),
    }[request.param]()


def test_the_handoff_reads_with_one_add_on_every_other_store(store):
    """c10d and the other torch stores: a read is one ``add(key, 0)``, as it always was."""
    counting = CountingStore(store)
    handoff = VerdictHandoff(ReplacementGroupMarkers(counting, "run", "50"), "3", "0")
    handoff.publish(Answer(Verdict.HEALTHY, 0))
    counting.calls.clear()
    assert not isinstance(counting, CounterReads)
    assert handoff.read() == (0, Answer(Verdict.HEALTHY, 0))
    assert counting.calls == Counter(add=1)


def test_the_etcd_store_keeps_client_directory_and_timeout():
    import etcd
    from torch.distributed.elastic.rendezvous.etcd_store import EtcdStore

    client = etcd.Client(host="127.0.0.1", port=free_port(), protocol="http")  # never called
    torch_store = EtcdStore(client, "/torch/elastic/store", datetime.timedelta(seconds=42))
    ours = OneKeyEtcdStore.of(torch_store)
    assert (ours.client, ours.prefix) == (client, "/torch/elastic/store/")
    # A store's timeout is not in torch's stub.
    assert ours.timeout == datetime.timedelta(seconds=42)  # type: ignore[attr-defined]
    assert isinstance(ours, CounterReads) and not isinstance(torch_store, CounterReads)


def test_only_torchs_etcd_store_gets_one_key_reads():
    with pytest.raises(TypeError, match="EtcdStore"):
        OneKeyEtcdStore.of(dist.HashStore())
