"""Replacement-group markers on real torch stores, with concurrent publishers."""

from __future__ import annotations

import datetime
import multiprocessing
import threading

import pytest
import torch.distributed as dist

from harness.rendezvous import publish_concurrently, tcp_client
from nvrx_seghealth._launcher.markers import ReplacementGroupMarkers


@pytest.fixture(params=["hash", "file", "tcp", "prefix-tcp"])
def store(request, tmp_path):
    """Each store type the markers must work on (torch's EtcdStore: integration/etcd)."""
    if request.param == "hash":
        yield dist.HashStore()
    elif request.param == "file":
        yield dist.FileStore(str(tmp_path / "filestore"), -1)
    else:
        master = dist.TCPStore(
            "127.0.0.1",
            0,
            is_master=True,
            wait_for_workers=False,
            timeout=datetime.timedelta(seconds=30),
        )
        yield master if request.param == "tcp" else dist.PrefixStore("job/", master)


def test_publish_then_lookup(store):
    markers = ReplacementGroupMarkers(store, "run-a", "123")
    assert not markers.is_marked("1")
    assert markers.detail("1") is None
    assert markers.publish("1", "decision file /shc/x (3 bytes)") is True
    assert markers.is_marked("1")
    assert not markers.is_marked("2")
    assert markers.detail("1") == "decision file /shc/x (3 bytes)"
    assert markers.marked_groups() == ["1"]


def test_publishing_twice_writes_once(store):
    markers = ReplacementGroupMarkers(store, "run-a", "123")
    assert markers.publish("4", "first") is True
    assert markers.publish("4", "second") is False
    assert markers.detail("4") == "first"
    assert markers.marked_groups() == ["4"]


def test_namespaced_by_run_and_array_job(store):
    ReplacementGroupMarkers(store, "run-a", "123").publish("1", "x")
    assert not ReplacementGroupMarkers(store, "run-b", "123").is_marked("1")
    assert not ReplacementGroupMarkers(store, "run-a", "124").is_marked("1")
    assert ReplacementGroupMarkers(store, "run-b", "123").marked_groups() == []


def test_groups_list_in_numeric_order(store):
    markers = ReplacementGroupMarkers(store, "run", "5")
    for group in ("10", "2", "33", "1"):
        markers.publish(group, "x")
    assert markers.marked_groups() == ["1", "2", "10", "33"]


def test_lookup_of_a_missing_marker_does_not_block(tmp_path):
    """A ``get`` of a missing key waits for the store timeout; lookups must not."""
    master = dist.TCPStore(
        "127.0.0.1",
        0,
        is_master=True,
        wait_for_workers=False,
        timeout=datetime.timedelta(seconds=20),
    )
    markers = ReplacementGroupMarkers(master, "run", "5")
    result = []
    worker = threading.Thread(target=lambda: result.append(markers.detail("3")), daemon=True)
    worker.start()
    worker.join(timeout=5)
    assert result == [None]


def test_listing_skips_a_slot_taken_but_not_yet_written():
    store = dist.HashStore()
    markers = ReplacementGroupMarkers(store, "run", "5")
    markers.publish("1", "x")
    store.add(markers.prefix + "count", 1)  # a publisher that died between add and set
    markers.publish("2", "y")
    assert markers.marked_groups() == ["1", "2"]


def test_hostile_group_or_job_is_refused():
    with pytest.raises(ValueError):
        ReplacementGroupMarkers(dist.HashStore(), "run", "../1")
    with pytest.raises(ValueError):
        ReplacementGroupMarkers(dist.HashStore(), "run", "1").publish("1/../2", "x")
    with pytest.raises(ValueError, match="run_id"):
        ReplacementGroupMarkers(dist.HashStore(), "", "1")


def test_concurrent_thread_publishers_lose_nothing(tcp_store):
    groups = [str(g) for g in range(32)]
    assert publish_concurrently(lambda: tcp_client(tcp_store), "run", "9", groups) == []
    markers = ReplacementGroupMarkers(tcp_store, "run", "9")
    assert markers.marked_groups() == groups
    assert all(markers.detail(g) == f"detail {g}" for g in groups)
    assert tcp_store.add(markers.prefix + "count", 0) == len(groups)


def _publish_from_process(kind, address, groups, start):
    store: dist.Store
    if kind == "tcp":
        store = dist.TCPStore(
            "127.0.0.1", address, is_master=False, timeout=datetime.timedelta(seconds=60)
        )
    else:
        store = dist.FileStore(address, -1)
    markers = ReplacementGroupMarkers(store, "run", "9")
    start.wait(60)
    for group in groups:
        markers.publish(group, f"from {group}")


@pytest.mark.parametrize("kind", ["tcp", "file"])
def test_concurrent_process_publishers_lose_nothing(kind, tmp_path):
    store: dist.Store
    address: int | str
    if kind == "tcp":
        store = dist.TCPStore(
            "127.0.0.1",
            0,
            is_master=True,
            wait_for_workers=False,
            timeout=datetime.timedelta(seconds=60),
        )
        address = store.port
    else:
        address = str(tmp_path / "filestore")
        store = dist.FileStore(address, -1)
    # Fresh processes, forked from one that imported torch once for every test.
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([__name__])
    start = context.Event()
    shares = [[str(g) for g in range(p, 48, 4)] for p in range(4)]
    processes = [
        context.Process(target=_publish_from_process, args=(kind, address, share, start))
        for share in shares
    ]
    for process in processes:
        process.start()
    start.set()
    for process in processes:
        process.join(timeout=120)
    assert [p.exitcode for p in processes] == [0] * len(processes)
    markers = ReplacementGroupMarkers(store, "run", "9")
    assert markers.marked_groups() == [str(g) for g in range(48)]
