"""The etcd-v3 store against a real etcd with the v2 API off, reached as torch reaches it
(through a ``PrefixStore``): the same calls give what a TCPStore gives; waits are woken by
a watch; ``add`` counts once and ``delete_key`` tells the truth through lost answers and
late commits (:mod:`harness.services.nemesis`); a run's keys go with its lease."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from torch.distributed import DistStoreError, PrefixStore

from harness.services.etcd_v3 import open_v3_launcher, raw_get, raw_put, raw_v3
from harness.services.nemesis import Action, HttpNemesis, Once, Request, not_etcd
from harness.session.fixtures import started_etcd
from harness.waits import wait_until
from nvrx_seghealth._logfmt import parse_fields
from nvrx_seghealth._rendezvous.etcd_v3.keys import RunKeys
from nvrx_seghealth._rendezvous.etcd_v3.store import MAX_OPS
from nvrx_seghealth._rendezvous.retry import Unreachable

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


def _write(request: Request) -> bool:
    """Whether ``request`` is a write transaction (a guarded ``add`` or ``append``)."""
    return request.path == "/v3/kv/txn" and b"request_put" in request.body


def _deletes(request: Request) -> bool:
    return b"request_delete_range" in request.body or request.path == "/v3/kv/deleterange"


@contextmanager
def _two_relays(
    endpoint: str, run: str, first_policy
) -> Iterator[tuple[Any, HttpNemesis, HttpNemesis]]:
    """A launcher whose endpoints are two relays in front of one etcd: its store, the
    second relay (the first one's policy is ``first_policy``)."""
    with (
        HttpNemesis(endpoint, first_policy) as first,
        HttpNemesis(endpoint) as second,
        open_v3_launcher(f"{first.endpoint},{second.endpoint}", run) as (_, store),
    ):
        yield store, first, second


@pytest.mark.parametrize("late", [1, 2, 3, None], ids=["before-1st", "2nd", "3rd", "after"])
def test_an_add_lost_then_landing_late_counts_once(etcd_v3_server, run, late):
    """The add's write is held and the client hears nothing; the held write reaches etcd
    before the n-th request of the next attempts, or after the call returned."""
    hold = Once(_write)
    with _two_relays(etcd_v3_server.endpoint, run, hold) as (store, first, second):
        store.add("n", 5)
        after: list[Request] = []

        def deliver_late(request: Request) -> Action:
            after.append(request)
            if len(after) == late:
                assert first.deliver() == [200]
            return "forward"

        second.policy = deliver_late
        hold.armed = True
        returned = store.add("n", 1)
        if late is None:
            assert first.deliver() == [200]  # etcd answers it; its guard fails
        assert hold.hit
        assert (returned, store.read_counter("n")) == (6, 6)
        writes = [r.body for r, _ in [*first.seen, *second.seen] if _write(r)]
        assert len(writes) == len(set(writes))  # each attempt sent once, never again


def test_an_add_whose_answer_was_lost_while_another_launcher_added_counts_once(etcd_v3_server, run):
    drop = Once(_write, "drop-after")
    with (
        _two_relays(etcd_v3_server.endpoint, run, drop) as (store, _, second),
        open_v3_launcher(etcd_v3_server.endpoint, run) as (_, other),
    ):
        store.add("n", 1)
        meanwhile = second.policy = Once(lambda request: bool(other.add("n", 10)), "forward")
        meanwhile.armed = True
        drop.armed = True
        assert store.add("n", 1) == 2
        assert drop.hit
    assert raw_get(etcd_v3_server.endpoint, RunKeys(run).store("n")) == b"12"


def test_a_lost_add_that_never_landed_counts_after_a_compaction(etcd_v3_server, run):
    """The add's write is held and never sent; another launcher adds and etcd compacts its
    history before the add asks again: the add counts, after the other's."""
    hold = Once(_write)
    with (
        _two_relays(etcd_v3_server.endpoint, run, hold) as (store, first, second),
        open_v3_launcher(etcd_v3_server.endpoint, run) as (_, other),
    ):
        store.add("n", 5)

        def compact(request: Request) -> bool:
            assert other.add("n", 1) == 6
            for _ in range(3):  # the compaction then covers the other's add as well
                raw_put(etcd_v3_server.endpoint, b"/nemesis/filler", b"x")
            revision = raw_v3(etcd_v3_server.endpoint, "kv/range", {"key": _b64(b"x")})
            through = {"revision": revision["header"]["revision"], "physical": True}
            raw_v3(etcd_v3_server.endpoint, "kv/compaction", through)
            return True

        meanwhile = second.policy = Once(compact, "forward")
        meanwhile.armed = True
        hold.armed = True
        assert store.add("n", 1) == 7
        assert (store.read_counter("n"), len(first.held)) == (7, 1)


def test_a_delete_whose_answer_was_lost_says_the_key_was_there(etcd_v3_server, run):
    drop = Once(_deletes, "drop-after")
    with (
        HttpNemesis(etcd_v3_server.endpoint, drop) as relay,
        open_v3_launcher(relay.endpoint, run) as (_, store),
    ):
        store.set("d", b"1")
        drop.armed = True
        assert store.delete_key("d") is True
        assert drop.hit
        assert not store.check(["d"])
        assert store.delete_key("d") is False


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


def _watching(request: Request) -> bool:
    return request.path == "/v3/watch"


def test_a_get_watching_a_member_cut_from_its_peers_sees_the_key_set_elsewhere(
    etcd_v3_partition, run
):
    """A launcher whose first endpoint is a member cut from its peers while ``get`` waits
    in a watch there: the key set through the other two is seen, within the store's
    timeout (a member that lost its leader ends the watch, and the client moves on)."""
    cluster, peers = etcd_v3_partition
    cut, *others = cluster.members
    watched = Once(_watching, "forward")
    endpoints = ",".join(member.server.endpoint for member in others)
    with (
        HttpNemesis(cut.server.endpoint, watched) as relay,
        open_v3_launcher(f"{relay.endpoint},{endpoints}", run) as (_, store),
        open_v3_launcher(endpoints, run) as (_, other),
    ):
        store.set("warm", b"1")  # the run's lease, through the member to be cut
        store.set_timeout(timedelta(seconds=60))
        found: list[bytes | BaseException] = []

        def get() -> None:
            try:
                found.append(store.get("MASTER_ADDR"))
            except BaseException as error:  # noqa: BLE001  (the test's finding)
                found.append(error)

        watched.armed = True
        getter = threading.Thread(target=get, daemon=True)
        getter.start()
        wait_until(lambda: watched.hit)
        peers.cut(cut)
        other.set("MASTER_ADDR", b"node-7")
        getter.join(120)
        assert found == [b"node-7"]


def test_a_member_of_another_cluster_is_left_with_one_warning(etcd_v3_server, run, caplog):
    """A launcher names a member of its cluster, then one of another: while the first
    does not answer, nothing goes to the other; the write waits for its own cluster."""
    caplog.set_level(logging.WARNING)
    with (
        started_etcd("nvrx-own", v2=False) as own,
        HttpNemesis(own.endpoint) as relay,
        open_v3_launcher(f"{relay.endpoint},{etcd_v3_server.endpoint}", run) as (_, store),
    ):
        store.set("hello", b"1")
        stopped = relay.policy = Once(lambda request: True)
        stopped.armed = True  # the next request is lost: the client moves on
        store.set("MASTER_ADDR", b"node-7")
        assert stopped.hit
        assert store.check(["hello", "MASTER_ADDR"])
        assert raw_get(own.endpoint, RunKeys(run).store("MASTER_ADDR")) == b"node-7"
    assert raw_get(etcd_v3_server.endpoint, RunKeys(run).store("MASTER_ADDR")) is None
    fields = [parse_fields(record.getMessage()) for record in caplog.records]
    left = [field["member"] for field in fields if field.get("etcd") == "other-cluster"]
    assert left == [etcd_v3_server.endpoint]


def _stall(request: Request) -> Action:
    return "stall"


def _lose(request: Request) -> Action:
    return "hold"


def test_a_wait_on_a_member_that_never_answers_ends_at_its_own_timeout(etcd_v3_server, run):
    """The only member stops answering (its sockets open): a 2 s wait raises torch's
    error for a wait that ran out, long before read_timeout."""
    with (
        HttpNemesis(etcd_v3_server.endpoint) as relay,
        open_v3_launcher(relay.endpoint, run, read_timeout=20) as (_, store),
    ):
        store.set("warm", b"1")
        relay.policy = _stall
        start = time.monotonic()
        with pytest.raises(DistStoreError):
            store.wait(["absent"], timedelta(seconds=2))
        assert time.monotonic() - start < 20  # read_timeout; it takes about 2 s


def test_a_get_from_a_member_that_drops_every_call_ends_at_the_store_timeout(etcd_v3_server, run):
    with (
        HttpNemesis(etcd_v3_server.endpoint) as relay,
        open_v3_launcher(relay.endpoint, run, read_timeout=20) as (_, store),
    ):
        store.set("warm", b"1")
        store.set_timeout(timedelta(seconds=2))
        relay.policy = _lose
        with pytest.raises(DistStoreError):
            store.get("absent")


def test_read_timeout_bounds_a_whole_call_attempts_included(etcd_v3_server, run):
    """A write to a member that stops answering gives up after read_timeout (12 s), not
    after an attempt's 10 s plus read_timeout."""
    with (
        HttpNemesis(etcd_v3_server.endpoint) as relay,
        open_v3_launcher(relay.endpoint, run, read_timeout=12) as (_, store),
    ):
        store.set("warm", b"1")
        relay.policy = _stall
        start = time.monotonic()
        with pytest.raises(Unreachable):
            store.set("key", b"value")
        assert time.monotonic() - start < 20  # 22 s when the first attempt did not count


@pytest.mark.parametrize(
    ("status", "body"),
    [(404, b"404 page not found\n"), (403, b"<html>no</html>"), (200, b"{}")],
    ids=["gateway-off", "a-proxy-page", "an-empty-200"],
)
def test_a_named_endpoint_that_is_not_etcd_is_left_for_the_next(etcd_v3_server, run, status, body):
    with (
        not_etcd(status, body) as stranger,
        open_v3_launcher(f"{stranger},{etcd_v3_server.endpoint}", run) as (_, store),
    ):
        store.set("key", b"value")
        assert store.get("key") == b"value"
