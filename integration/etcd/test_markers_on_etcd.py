"""Replacement-group markers in torch's EtcdStore, against a real etcd (no compare_set)."""

from __future__ import annotations

import base64
import multiprocessing
import uuid

import pytest

from harness.rendezvous import publish_concurrently
from harness.services.etcd import STORE, etcd_store
from nvrx_seghealth._launcher.markers import ReplacementGroupMarkers

pytestmark = pytest.mark.etcd


def test_etcd_store_really_has_no_compare_set(etcd_server):
    """The premise of the marker design: torch's EtcdStore does not implement it."""
    with pytest.raises(RuntimeError, match="Not implemented"):
        etcd_store(etcd_server).compare_set("k", "", "v")


def test_markers_round_trip_and_live_in_etcd_under_the_run(etcd_server):
    run = f"run-{uuid.uuid4().hex[:8]}"
    markers = ReplacementGroupMarkers(etcd_store(etcd_server), run, "4242")
    assert not markers.is_marked("3")
    assert markers.publish("3", "decision file /shc/x (5 bytes)")
    assert markers.is_marked("3") and not markers.is_marked("4")
    assert markers.detail("3") == "decision file /shc/x (5 bytes)"
    assert markers.marked_groups() == ["3"]
    raw = {
        base64.b64decode(key.rsplit("/", 1)[1]).decode(): base64.b64decode(value).decode()
        for key, value in etcd_server.raw(STORE).items()
    }
    ours = {k: v for k, v in raw.items() if k.startswith(f"nvrx_seghealth/{run}/")}
    assert ours == {
        f"nvrx_seghealth/{run}/4242/group/3": "decision file /shc/x (5 bytes)",
        f"nvrx_seghealth/{run}/4242/count": "1",
        f"nvrx_seghealth/{run}/4242/slot/1": "3",
    }


def test_concurrent_thread_publishers_lose_nothing(etcd_server):
    run = f"run-{uuid.uuid4().hex[:8]}"
    groups = [str(g) for g in range(24)]
    assert publish_concurrently(lambda: etcd_store(etcd_server), run, "7", groups) == []
    markers = ReplacementGroupMarkers(etcd_store(etcd_server), run, "7")
    assert markers.marked_groups() == groups
    assert all(markers.detail(g) == f"detail {g}" for g in groups)


def _publish_from_process(host, port, run, groups, start):
    import etcd
    from torch.distributed.elastic.rendezvous.etcd_store import EtcdStore

    store = EtcdStore(etcd.Client(host=host, port=port, protocol="http"), STORE)
    markers = ReplacementGroupMarkers(store, run, "7")
    start.wait(60)
    for group in groups:
        markers.publish(group, f"from {group}")


def test_concurrent_process_publishers_lose_nothing(etcd_server):
    run = f"run-{uuid.uuid4().hex[:8]}"
    context = multiprocessing.get_context("spawn")
    start = context.Event()
    processes = [
        context.Process(
            target=_publish_from_process,
            args=(
                etcd_server.host,
                etcd_server.port,
                run,
                [str(g) for g in range(p, 32, 4)],
                start,
            ),
        )
        for p in range(4)
    ]
    for process in processes:
        process.start()
    start.set()
    for process in processes:
        process.join(timeout=120)
    assert [p.exitcode for p in processes] == [0] * 4
    assert ReplacementGroupMarkers(etcd_store(etcd_server), run, "7").marked_groups() == [
        str(g) for g in range(32)
    ]
    # etcd itself: every marker, one slot per group (no slot number taken twice), count 32.
    raw = {
        base64.b64decode(key.rsplit("/", 1)[1]).decode(): base64.b64decode(value).decode()
        for key, value in etcd_server.raw(STORE).items()
    }
    prefix = f"nvrx_seghealth/{run}/7/"
    ours = {k.removeprefix(prefix): v for k, v in raw.items() if k.startswith(prefix)}
    assert {k: v for k, v in ours.items() if k.startswith("group/")} == {
        f"group/{g}": f"from {g}" for g in range(32)
    }
    slots = {k: v for k, v in ours.items() if k.startswith("slot/")}
    assert sorted(slots) == sorted(f"slot/{i}" for i in range(1, 33))
    assert sorted(slots.values(), key=int) == [str(g) for g in range(32)]
    assert ours["count"] == "32" and len(ours) == 32 + 32 + 1
