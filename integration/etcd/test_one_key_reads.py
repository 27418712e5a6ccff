"""The watch and the hand-off on etcd-v2 read one key per look, whatever the store holds.

torch's store directory (``/torch/elastic/store``) keeps every key of every run that
ever used the etcd. This module's own etcd is filled with :data:`OLD_KEYS` keys of
earlier runs first; launchers are then built as the ``segment-health`` backend builds
them, and every request their etcd client makes is recorded, with the size of etcd's
answer.
"""

from __future__ import annotations

import base64
import threading
import time
import uuid
from typing import cast

import pytest
from torch.distributed.elastic.rendezvous import RendezvousParameters

from harness.rendezvous import coordinator_of, excluded, join_all
from harness.services.etcd import STORE, Traffic, plant_old_keys
from harness.slurmenv import slurm_env
from harness.waits import wait_until
from nvrx_seghealth import SegmentHealthRendezvousHandler, publish_decision
from nvrx_seghealth._launcher import backend, watch
from nvrx_seghealth._launcher.handoff import Answer, Verdict, VerdictHandoff
from nvrx_seghealth._launcher.markers import ReplacementGroupMarkers
from nvrx_seghealth._rendezvous.etcd_reads import OneKeyEtcdStore

pytestmark = pytest.mark.etcd

#: Keys earlier runs left in the store directory (60-byte values, as rounds leave them).
OLD_KEYS = 3000
#: The largest answer to a read of one key: the whole directory is over 100 times more.
ONE_KEY_BYTES = 2000
WATCH = 0.5  # seconds between process 0's looks at its decision file (the least allowed)


@pytest.fixture(scope="module")
def crowded_etcd(module_etcd_server):
    """This module's etcd, its store directory holding :data:`OLD_KEYS` old keys."""
    plant_old_keys(module_etcd_server, range(OLD_KEYS))
    return module_etcd_server


@pytest.fixture
def launcher():
    """Builds launchers (:func:`build`); shuts every one down at the end of the test."""
    built: list[SegmentHealthRendezvousHandler] = []

    def launch(*args):
        handler, traffic = build(*args)
        built.append(handler)
        return handler, traffic

    yield launch
    for handler in built:
        handler.shutdown()


def build(server, run_id, directory, task, nodes):
    """One launcher of array task ``task`` (process 0), built as the backend builds it."""
    params = RendezvousParameters(
        "etcd-v2",
        server.endpoint,
        run_id,
        *nodes,
        last_call_timeout=1,
        join_timeout=60,
        keep_alive_interval=1,
        keep_alive_max_attempt=3,
    )
    inner, store = backend._create_inner(params)
    handler = SegmentHealthRendezvousHandler(
        inner,
        store=store,
        directory=directory,
        environ=slurm_env(task=task, array_job=700),
        watch_interval=WATCH,
    )
    return handler, Traffic(cast(OneKeyEtcdStore, store).client)


class Monitor:
    """An agent's monitor loop: ``num_nodes_waiting()`` every ``interval`` s until positive."""

    def __init__(self, handler, interval) -> None:
        self.answers: list[int] = []
        self.thread = threading.Thread(target=self._run, args=(handler, interval), daemon=True)
        self.thread.start()

    def _run(self, handler, interval) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            time.sleep(interval)
            self.answers.append(handler.num_nodes_waiting())
            if self.answers[-1] > 0:
                return


def test_the_directory_is_crowded(crowded_etcd):
    """The premise: one read of torch's store directory returns every old key."""
    answer = crowded_etcd.client().get(STORE)
    assert len(list(answer.children)) >= OLD_KEYS


def test_a_watch_look_and_a_barrier_poll_read_one_key_each(crowded_etcd, launcher, tmp_path):
    """Task 1 is marked while a world of two trains: both launchers restart together,
    and every look for the exclusion and every poll of the barrier was one key."""
    run = f"run-{uuid.uuid4().hex[:8]}"
    built = [launcher(crowded_etcd, run, str(tmp_path), task, (2, 2)) for task in (0, 1)]
    handlers = [handler for handler, _ in built]
    assert [join.error for join in join_all(handlers, timeout=120)] == [None, None]
    marks = [len(traffic.since()) for _, traffic in built]
    # Task 1's agent looks rarely: task 0 reaches the barrier first and polls it.
    monitors = [Monitor(handlers[0], 0.1), Monitor(handlers[1], 1.5)]
    publish_decision(str(tmp_path), "700", "1", "drained during training")
    for monitor in monitors:
        monitor.thread.join(90)
        assert monitor.answers and monitor.answers[-1] == 1
    assert excluded(handlers[1])
    watched = [traffic.since(mark) for (_, traffic), mark in zip(built, marks)]
    looks = sum(traffic.reads(watch.EXCLUDED_KEY) for _, traffic in built)
    polls = sum(traffic.reads(watch.RESTART_KEY) for _, traffic in built)
    assert looks >= 2 and polls >= 1
    for requests in watched:
        assert [r for r in requests if r.key is None] == []  # never the directory
        assert max(r.size for r in requests) < ONE_KEY_BYTES


def test_the_responder_looks_for_requests_without_writing(crowded_etcd, launcher, tmp_path):
    """Between rounds process 0 looks for its siblings' requests every 0.2 s: reads of
    the counter alone; a sibling's request is still answered."""
    run = f"run-{uuid.uuid4().hex[:8]}"
    handler, traffic = launcher(crowded_etcd, run, str(tmp_path), 3, (1, 1))
    assert join_all([handler], timeout=120)[0].error is None
    role = coordinator_of(handler)
    assert role is not None and role.markers is not None  # an array task's process 0
    counter = VerdictHandoff(role.markers, "3", "0").key
    etcd_key = f"{STORE}/{base64.b64encode(counter.encode()).decode()}"
    client = crowded_etcd.client()
    written = client.get(etcd_key).modifiedIndex
    looked = traffic.reads(counter)
    wait_until(lambda: traffic.reads(counter) >= looked + 10)
    assert client.get(etcd_key).modifiedIndex == written  # ten looks, no write
    sibling = VerdictHandoff(role.markers, "3", "0")
    request, _ = sibling.request()
    assert sibling.wait(request, 30) is Verdict.HEALTHY  # answered by a look


def test_a_counter_read_returns_what_add_returns(crowded_etcd):
    """The hand-off's read on the backend's store: the counter as ``add`` leaves it,
    ``0`` for a counter never added to, and the counter stays unwritten."""
    store = OneKeyEtcdStore(crowded_etcd.client(), STORE)
    markers = ReplacementGroupMarkers(store, f"run-{uuid.uuid4().hex[:8]}", "701")
    handoff = VerdictHandoff(markers, "3", "0")
    assert handoff.read() == (0, Answer(None))
    assert not store.check([handoff.key])  # reading did not create it
    handoff.publish(Answer(Verdict.UNCHECKED, 0, standing=True))
    assert store.add(handoff.key, 1) == store.read_counter(handoff.key)
    assert handoff.read() == (1, Answer(Verdict.UNCHECKED, 0, standing=True))


def test_get_and_check_keep_torchs_meaning(crowded_etcd):
    """``get`` of a key set later waits for it; past the timeout it raises LookupError;
    ``check`` of several keys is true only when all are set."""
    import datetime

    import torch.distributed as dist

    ours = OneKeyEtcdStore(crowded_etcd.client(), STORE, datetime.timedelta(seconds=30))
    store = dist.PrefixStore(f"torch.rendezvous.run-{uuid.uuid4().hex[:8]}.0", ours)
    assert not store.check(["a"])
    setter = threading.Timer(0.3, lambda: store.set("a", "1"))
    setter.start()
    assert store.get("a") == b"1"
    setter.join()
    assert store.check(["a"]) and not store.check(["a", "b"])
    store.set("b", b"\xff\x00")  # type: ignore[arg-type]  # bytes too (torch's stub: str)
    assert store.check(["a", "b"]) and store.get("b") == b"\xff\x00"
    ours.set_timeout(datetime.timedelta(seconds=0.5))
    with pytest.raises(LookupError):
        store.get("never")
