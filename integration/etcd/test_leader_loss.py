"""The etcd-v2 backend and its store, as the ``segment-health`` backend builds them, while
a real three-member etcd loses its leader (the ``etcd_cluster`` fixture).

Threads call the backend or the store in loops; the leader is killed once every thread
has answered a few times. Every call must answer (none raises), an ``add`` must count
once, and the launcher's log must hold one ``retry=start`` WARNING per episode (the
member and the error as fields) and its ``retry=end``. The launchers name the first
member, which is the leader in some runs and not in others: both are a leader's loss.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable

import pytest
from torch.distributed.elastic.rendezvous import RendezvousParameters

from harness.waits import AT_ONCE_BOUND, wait_until
from nvrx_seghealth._launcher import backend
from nvrx_seghealth._logfmt import parse_fields

pytestmark = pytest.mark.etcd

THREADS = 3
#: Calls each thread makes after the leader is gone.
AFTER = 20


def _built(cluster):
    """The etcd-v2 backend and store of one launcher, as the registered backend builds them."""
    params = RendezvousParameters(
        "etcd-v2", cluster.endpoint, f"run-{uuid.uuid4().hex[:8]}", 1, 3, read_timeout=30
    )
    return backend.INNER_BACKEND_CREATORS["etcd-v2"](params)


def _through_a_leader_loss(cluster, call: Callable[[int], object]) -> list[BaseException]:
    """``call(thread)`` in :data:`THREADS` threads, the leader killed once each has
    answered 5 times; each then makes :data:`AFTER` more calls. The errors raised."""
    answered = [0] * THREADS
    killed = threading.Event()
    errors: list[BaseException] = []

    def loop(thread: int) -> None:
        try:
            while not killed.is_set() or answered[thread] < after[thread]:
                call(thread)
                answered[thread] += 1
                time.sleep(0.01)
        except Exception as error:  # noqa: BLE001  (the test's finding)
            errors.append(error)

    after = [1 << 30] * THREADS
    threads = [threading.Thread(target=loop, args=(n,), daemon=True) for n in range(THREADS)]
    for thread in threads:
        thread.start()
    wait_until(lambda: min(answered) >= 5 or errors)
    cluster.kill_leader()
    after[:] = [count + AFTER for count in answered]
    killed.set()
    for thread in threads:
        thread.join(60 + AT_ONCE_BOUND)
        assert not thread.is_alive()
    return errors


def _episodes(caplog) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """The ``retry=start`` WARNINGs and ``retry=end`` INFOs of the policy, as fields."""
    records = [r for r in caplog.records if r.name == "nvrx_seghealth._launcher.retry"]
    fields = [(r.levelno, parse_fields(r.getMessage())) for r in records]
    starts = [f for level, f in fields if f.get("retry") == "start" and level == logging.WARNING]
    ends = [f for level, f in fields if f.get("retry") == "end" and level == logging.INFO]
    return starts, ends


def _assert_episodes(caplog, cluster) -> None:
    starts, ends = _episodes(caplog)
    print(f"episodes: {starts} / {ends}")
    assert 1 <= len(starts) <= THREADS and len(ends) == len(starts)
    members = {f"http://{m.server.endpoint}" for m in cluster.members}
    for start in starts:
        assert start["service"] == "etcd" and start["member"] in members
        assert start["error"] in {
            "EtcdException",
            "EtcdConnectionFailed",
            "RendezvousConnectionError",
        }


def test_the_rendezvous_state_rides_out_the_leaders_loss(etcd_cluster, caplog) -> None:
    """get_state and guarded set_state from three threads: every call answers, and
    every write either lands or returns the state that another write left."""
    caplog.set_level(logging.INFO)
    rendezvous, _ = _built(etcd_cluster)
    writes: list[bool] = []

    def call(thread: int) -> None:
        current = rendezvous.get_state()
        token = None if current is None else current[1]
        answer = rendezvous.set_state(f"{thread}".encode(), token)
        assert answer is not None
        writes.append(answer[2])

    assert _through_a_leader_loss(etcd_cluster, call) == []
    assert any(writes)
    _assert_episodes(caplog, etcd_cluster)


def test_an_add_counts_once_through_the_leaders_loss(etcd_cluster, caplog) -> None:
    """Three threads add 1 to one counter, as torchrun's exit barrier does: the counter
    ends at the number of adds that answered, and each add returned its own value."""
    caplog.set_level(logging.INFO)
    _, store = _built(etcd_cluster)
    key = f"counter-{uuid.uuid4().hex[:8]}"
    returned: list[int] = []

    def call(thread: int) -> None:
        returned.append(store.add(key, 1))

    assert _through_a_leader_loss(etcd_cluster, call) == []
    assert sorted(returned) == list(range(1, len(returned) + 1))
    assert store.add(key, 0) == len(returned) == store.read_counter(key)
    _assert_episodes(caplog, etcd_cluster)


def test_set_get_check_and_wait_ride_out_the_leaders_loss(etcd_cluster, caplog) -> None:
    """The store's other calls: each thread sets a key per call and reads it back."""
    caplog.set_level(logging.INFO)
    _, store = _built(etcd_cluster)
    run = uuid.uuid4().hex[:8]

    def call(thread: int) -> None:
        key = f"{run}/{thread}/{time.monotonic_ns()}"
        store.set(key, key)
        store.wait([key])
        assert store.check([key]) and store.get(key) == key.encode()

    assert _through_a_leader_loss(etcd_cluster, call) == []
    _assert_episodes(caplog, etcd_cluster)
