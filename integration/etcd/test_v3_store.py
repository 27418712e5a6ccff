"""The etcd-v3 store against a real etcd with the v2 API off, reached as torch reaches it
(through a ``PrefixStore``): the same calls give what a TCPStore gives; waits are woken by
a watch; ``add`` counts once when its answer is lost; a run's keys go with its lease."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from torch.distributed import DistStoreError, PrefixStore

from harness.services.etcd_v3 import open_v3_launcher, raw_get, raw_v3
from nvrx_seghealth._launcher.etcd_v3.client import EtcdClient, EtcdUnavailable
from nvrx_seghealth._launcher.etcd_v3.keys import RunKeys
from nvrx_seghealth._launcher.etcd_v3.store import MAX_OPS

pytestmark = pytest.mark.etcd


@pytest.fixture
def run() -> str:
    return f"run-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def store(etcd_v3_server, run):
    with open_v3_launcher(etcd_v3_server.endpoint, run) as (_, store):
        yield store


def _calls(store) -> list:
    """One sequence of store calls through a PrefixStore, with what each returned."""
    prefixed: Any = PrefixStore("torch.rendezvous.run.0", store)  # stubs lack the extended API
    many = [f"k{number}" for number in range(MAX_OPS + 5)]  # more than one transaction
    results: list = []
    results.append(prefixed.set("a", b"1"))
    results.append(prefixed.get("a"))
    results.append(prefixed.add("n", 3))
    results.append(prefixed.add("n", -1))
    results.append(prefixed.add("n", 0))
    results.append(prefixed.add("zero", 0))
    results.append(prefixed.get("n"))
    results.append(prefixed.check(["a", "n", "zero"]))
    results.append(prefixed.check(["a", "never"]))
    results.append(prefixed.compare_set("c", b"", b"x"))
    results.append(prefixed.compare_set("c", b"y", b"z"))
    results.append(prefixed.compare_set("c", b"x", b"z"))
    results.append(prefixed.compare_set("absent", b"q", b"w"))
    results.append(prefixed.check(["absent"]))
    results.append(prefixed.append("ap", b"ab"))
    results.append(prefixed.append("ap", b"cd"))
    results.append(prefixed.get("ap"))
    results.append(prefixed.multi_set(many, [k.encode() * 3 for k in many]))
    results.append(prefixed.multi_get(many))
    results.append(prefixed.delete_key("a"))
    results.append(prefixed.delete_key("a"))
    results.append(prefixed.check(["a"]))
    before = prefixed.num_keys()
    prefixed.set("one more", b"")
    results.append(prefixed.num_keys() - before)
    results.append(prefixed.get("one more"))
    return results


def test_calls_through_a_prefix_store_answer_as_a_tcp_store_does(store, tcp_store):
    assert _calls(store) == _calls(tcp_store)


def test_get_waits_for_a_key_and_a_put_wakes_it(store):
    prefixed = PrefixStore("p", store)
    prefixed.set_timeout(timedelta(seconds=120))
    got: list[bytes] = []
    waiter = threading.Thread(target=lambda: got.append(prefixed.get("late")))
    waiter.start()
    time.sleep(0.5)
    assert waiter.is_alive()
    prefixed.set("late", "here")
    waiter.join(timeout=60)
    assert got == [b"here"]


def test_wait_returns_once_every_key_is_set(store):
    prefixed = PrefixStore("p", store)
    prefixed.set("first", "1")
    done = threading.Event()

    def wait() -> None:
        prefixed.wait(["first", "second"], timedelta(seconds=120))
        done.set()

    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(0.5)
    assert not done.is_set()
    prefixed.set("second", "2")
    waiter.join(timeout=60)
    assert done.is_set()


def test_get_and_wait_of_a_key_never_set_time_out_as_tcp_stores_do(store):
    prefixed = PrefixStore("p", store)
    prefixed.set_timeout(timedelta(seconds=1))
    with pytest.raises(DistStoreError):
        prefixed.get("never")
    with pytest.raises(DistStoreError):
        prefixed.wait(["never"], timedelta(seconds=1))


def test_add_zero_of_a_counter_writes_nothing(etcd_v3_server, store, run):
    store.add("counter", 2)
    key = RunKeys(run).store("counter")
    before = raw_v3(etcd_v3_server.endpoint, "kv/range", {"key": _b64(key)})["kvs"][0]
    assert store.add("counter", 0) == 2
    after = raw_v3(etcd_v3_server.endpoint, "kv/range", {"key": _b64(key)})["kvs"][0]
    assert after["mod_revision"] == before["mod_revision"]
    assert store.read_counter("counter") == 2 and store.read_counter("never") == 0


class AnswerLost(EtcdClient):
    """A client whose next write transaction lands in etcd but whose answer is lost on the
    way back, as when a member dies right after applying it. The loss is injected: a real
    one cannot be timed to one request."""

    #: Run while the answer is lost; ``None``: the next answer is not lost.
    meanwhile: Callable[[], object] | None = None

    def txn(self, compare, success, failure=()):
        result = super().txn(compare, success, failure)
        if self.meanwhile is not None and success:
            meanwhile, self.meanwhile = self.meanwhile, None
            meanwhile()
            raise EtcdUnavailable("the answer was lost (injected)", member=self.member)
        return result


def lose_the_next_answer(store, meanwhile: Callable[[], object] = lambda: None) -> AnswerLost:
    """The store's own client, made to lose the answer of its next write transaction."""
    client = store._client
    client.__class__ = AnswerLost
    client.meanwhile = meanwhile
    return client


def test_an_add_whose_answer_was_lost_counts_once(etcd_v3_server, store, run):
    store.add("n", 1)
    client = lose_the_next_answer(store)
    assert store.add("n", 1) == 2
    assert client.meanwhile is None  # the answer was lost
    assert raw_get(etcd_v3_server.endpoint, RunKeys(run).store("n")) == b"2"


def test_an_add_whose_answer_was_lost_while_another_launcher_added_counts_once(
    etcd_v3_server, store, run
):
    with open_v3_launcher(etcd_v3_server.endpoint, run) as (_, other):
        store.add("n", 1)
        client = lose_the_next_answer(store, lambda: other.add("n", 10))
        assert store.add("n", 1) == 2
        assert client.meanwhile is None
    assert raw_get(etcd_v3_server.endpoint, RunKeys(run).store("n")) == b"12"


def test_a_finished_runs_keys_go_with_its_lease(etcd_v3_server, run):
    with open_v3_launcher(etcd_v3_server.endpoint, run, lease_ttl=3) as (backend, store):
        backend.set_state(b"state")
        store.set("key", b"value")
    keys = RunKeys(run)
    assert raw_get(etcd_v3_server.endpoint, keys.state) is not None
    deadline = time.monotonic() + 60
    while raw_get(etcd_v3_server.endpoint, keys.state) is not None:
        assert time.monotonic() < deadline, "the run's keys outlived its lease"
        time.sleep(0.5)
    assert raw_get(etcd_v3_server.endpoint, keys.store("key")) is None
    assert raw_get(etcd_v3_server.endpoint, keys.lease) is None


def test_a_run_keeps_its_lease_alive_while_it_writes(etcd_v3_server, run):
    with open_v3_launcher(etcd_v3_server.endpoint, run, lease_ttl=3) as launcher:
        backend: Any = launcher[0]
        _, token, _ = backend.set_state(b"state")
        for _ in range(12):  # 6 s, twice the TTL: each write refreshes the lease when due
            time.sleep(0.5)
            _, token, _ = backend.set_state(b"state", token)
        assert backend.get_state() == (b"state", token)


def _b64(data: bytes) -> str:
    import base64

    return base64.b64encode(data).decode()
