"""The etcd-v2 backend and its store, as the ``segment-health`` backend builds them, while
a real three-member etcd loses its leader (the ``etcd_cluster`` fixture).

Threads call the backend or the store in loops; the leader is killed once every thread
has answered a few times. Every call must answer (none raises), an ``add`` must count
once, and the launcher's log must hold one ``retry=start`` WARNING per episode (the
member and the error as fields) and its ``retry=end``. The launchers name the first
member, which is the leader in some runs and not in others: both are a leader's loss.

An ``add`` whose swap is held by a relay (:mod:`harness.services.nemesis`) and reaches
etcd late, or never, counts once or says it cannot tell.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from torch.distributed.elastic.rendezvous import RendezvousParameters

from harness.services.etcd import STORE
from harness.services.nemesis import Action, HttpNemesis, Once, Request
from harness.session.fixtures import started_etcd
from harness.waits import AT_ONCE_BOUND, wait_until
from nvrx_seghealth._logfmt import parse_fields
from nvrx_seghealth._rendezvous import registry
from nvrx_seghealth._rendezvous.etcd_v2 import AddUnsettled

pytestmark = pytest.mark.etcd

THREADS = 3
#: Calls each thread makes after the leader is gone.
AFTER = 20


def _built(cluster):
    """The etcd-v2 backend and store of one launcher, as the registered backend builds them."""
    params = RendezvousParameters(
        "etcd-v2", cluster.endpoint, f"run-{uuid.uuid4().hex[:8]}", 1, 3, read_timeout=30
    )
    return registry.create(params)


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
    records = [r for r in caplog.records if r.name == "nvrx_seghealth._rendezvous.retry"]
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


def _v2_write(request: Request) -> bool:
    """Whether ``request`` writes a key of torch's etcd-v2 store (an ``add``'s swap)."""
    return request.method == "PUT" and STORE in request.path


def _v2_store(endpoint: str, run: str) -> Any:
    """The etcd-v2 store of one launcher of ``run``, as the registered backend builds it."""
    params = RendezvousParameters("etcd-v2", endpoint, run, 1, 1, read_timeout=30)
    return registry.create(params)[1]


@contextmanager
def _v2_behind_two_relays(first_policy: Once) -> Iterator[tuple[Any, HttpNemesis, HttpNemesis]]:
    """An etcd-v2 launcher's store whose named endpoint is a relay (``first_policy``) in
    front of one etcd, which tells its clients of a second relay, where the client fails
    over to: the store and both relays."""
    with HttpNemesis() as second, started_etcd("nvrx-relayed", advertise=second.url) as server:
        second.upstream = server.endpoint
        with HttpNemesis(server.endpoint, first_policy) as first:
            yield _v2_store(first.endpoint, f"run-{uuid.uuid4().hex[:8]}"), first, second


@pytest.mark.parametrize("late", [1, 2, 3, None], ids=["before-1st", "2nd", "3rd", "after"])
def test_a_v2_add_lost_then_landing_late_counts_once(late, caplog) -> None:
    """The add's swap is held and the client hears nothing; the held swap reaches etcd
    before the n-th request of the next attempts, or after the call returned. The
    WARNING names the member that failed."""
    caplog.set_level(logging.INFO)
    hold = Once(_v2_write)
    with _v2_behind_two_relays(hold) as (store, first, second):
        store.add("n", 5)
        after: list[Request] = []

        def deliver_late(request: Request) -> Action:
            after.append(request)
            if len(after) == late:
                first.deliver()
            return "forward"

        second.policy = deliver_late
        hold.armed = True
        returned = store.add("n", 1)
        if late is None:
            first.deliver()  # its guard fails
        assert hold.hit
        assert (returned, store.read_counter("n")) == (6, 6)
        starts, _ = _episodes(caplog)
        assert [start["member"] for start in starts] == [first.url]


def test_a_v2_add_lost_past_etcds_history_raises_rather_than_guess() -> None:
    """The add's swap is held and never sent; another launcher adds, then 1,001 other
    writes push that add out of etcd's v2 history: the add cannot tell, and says so."""
    hold = Once(_v2_write)
    with _v2_behind_two_relays(hold) as (store, first, second):
        store.add("n", 5)
        other = _v2_store(second.upstream, "another-run")  # one store directory for all

        def meanwhile(request: Request) -> bool:
            assert other.add("n", 1) == 6
            for number in range(1001):
                other.client.write(f"{STORE}/filler", str(number))
            return True

        writes = second.policy = Once(meanwhile, "forward")
        writes.armed = True
        hold.armed = True
        with pytest.raises(AddUnsettled):
            store.add("n", 1)
        assert (store.read_counter("n"), len(first.held)) == (6, 1)
