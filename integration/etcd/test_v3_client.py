"""The etcd-v3 client against real etcd members: reads, writes and transactions, leases,
watches, a dead or killed member, NOSPACE, auth and TLS.

The session's ``etcd_server`` serves the calls that leave the cluster as it was (each
test under its own key prefix). Compaction, a full quota, a restart, auth and TLS need
an etcd of their own (:func:`own_etcd`: free ports, a private data directory, stopped
by its PID); the auth tests share one, and so do the TLS tests.
"""

from __future__ import annotations

import base64
import json
import logging
import subprocess
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import pytest

from harness.ports import free_port
from harness.services.etcd import (
    ETCD_RELEASES,
    START_TIMEOUT,
    EtcdCluster,
    EtcdServer,
    etcd_binary,
)
from harness.services.etcd_v3 import open_v3_launcher
from harness.waits import AT_ONCE_BOUND
from nvrx_seghealth._rendezvous.etcd_v3.client import EtcdClient
from nvrx_seghealth._rendezvous.etcd_v3.endpoints import Credentials, Endpoint, Tls
from nvrx_seghealth._rendezvous.etcd_v3.errors import EtcdError, EtcdRefused, EtcdUnavailable
from nvrx_seghealth._rendezvous.etcd_v3.wire import (
    create_revision_is,
    delete,
    get,
    mod_revision_is,
    prefix_end,
    put,
    value_is,
)

#: Seconds each request may take.
ATTEMPT = 10.0


# --- an etcd of a test's own, with flags the harness does not give, and raw gateway calls ---


@dataclass
class OwnEtcd:
    """One etcd member of one test, with flags of its own; started and stopped by PID."""

    directory: Path
    flags: tuple[str, ...]
    scheme: str = "http"
    endpoint: Endpoint = field(default_factory=lambda: Endpoint("127.0.0.1", free_port()))
    peer_port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    binary: str = "etcd"  # the one on PATH, Debian's 3.4

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.endpoint}"

    def start(self) -> None:
        peer = f"http://127.0.0.1:{self.peer_port}"
        with open(self.directory / "etcd.log", "ab") as log:
            self.process = subprocess.Popen(
                [
                    self.binary,
                    "--name=own",
                    f"--data-dir={self.directory / 'data'}",
                    f"--listen-client-urls={self.url}",
                    f"--advertise-client-urls={self.url}",
                    f"--listen-peer-urls={peer}",
                    f"--initial-advertise-peer-urls={peer}",
                    f"--initial-cluster=own={peer}",
                    *self.flags,
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)

    def wait_until_it_answers(self, client: EtcdClient) -> None:
        """Return once ``client`` reads the status of this member."""
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            assert self.process is not None and self.process.poll() is None, self.log()
            try:
                client.status()
                return
            except EtcdUnavailable:
                assert time.monotonic() < deadline, self.log()
                time.sleep(0.1)

    def log(self) -> str:
        return (self.directory / "etcd.log").read_text()[-2000:]


@contextmanager
def own_etcd(
    directory: Path,
    *flags: str,
    scheme: str = "http",
    tls: Tls | None = None,
    binary: str = "etcd",
) -> Iterator[OwnEtcd]:
    """A running :class:`OwnEtcd` in ``directory``, stopped at the end."""
    etcd = OwnEtcd(directory, flags, scheme, binary=binary)
    etcd.start()
    try:
        with closing(EtcdClient([etcd.endpoint], attempt_timeout=2, protocol=scheme, tls=tls)) as c:
            etcd.wait_until_it_answers(c)
        yield etcd
    finally:
        etcd.stop()


@contextmanager
def closing(client: EtcdClient) -> Iterator[EtcdClient]:
    try:
        yield client
    finally:
        client.close()


def gateway(
    endpoint: Endpoint, path: str, request: dict[str, object], token: str | None = None
) -> dict:
    """One raw call of etcd's v3 gateway (what etcdctl would do; not installed here)."""
    headers = {"Authorization": token} if token else {}
    call = urllib.request.Request(f"http://{endpoint}{path}", json.dumps(request).encode(), headers)
    with urllib.request.urlopen(call, timeout=ATTEMPT) as answer:
        return json.loads(answer.read())


# --- fixtures ---------------------------------------------------------------------------


def endpoint_of(server: EtcdServer) -> Endpoint:
    return Endpoint(server.host, server.port)


@pytest.fixture
def client(etcd_server: EtcdServer) -> Iterator[EtcdClient]:
    with closing(EtcdClient([endpoint_of(etcd_server)], attempt_timeout=ATTEMPT)) as client:
        yield client


@pytest.fixture
def prefix() -> bytes:
    """A key prefix of this test alone in the session's etcd."""
    return f"/nvrx-v3-client/{uuid.uuid4().hex}/".encode()


@pytest.fixture
def private_etcd(etcd_server: EtcdServer, tmp_path: Path) -> Iterator[OwnEtcd]:
    """An etcd of this test alone (``etcd_server`` first: it installs etcd or skips)."""
    with own_etcd(tmp_path) as etcd:
        yield etcd


# --- reads, writes, transactions --------------------------------------------------------


def test_put_then_range_returns_values_revisions_and_count(client, prefix):
    first = client.put(prefix + b"a", b"1")
    second = client.put(prefix + b"b", b"2")
    assert second > first > 0
    found = client.range(prefix, prefix_end(prefix))
    assert [(kv.key, kv.value) for kv in found.kvs] == [
        (prefix + b"a", b"1"),
        (prefix + b"b", b"2"),
    ]
    assert found.count == 2
    assert found.revision >= second
    a = found.kvs[0]
    assert (a.create_revision, a.mod_revision, a.version, a.lease) == (first, first, 1, 0)
    assert client.range(prefix, prefix_end(prefix), count_only=True).count == 2
    assert client.range(prefix + b"a", keys_only=True).kvs[0].value == b""
    limited = client.range(prefix, prefix_end(prefix), limit=1)
    assert (len(limited.kvs), limited.count) == (1, 2)
    assert client.range(prefix + b"a", revision=first).kvs[0].value == b"1"
    missing = client.range(prefix + b"none")
    assert (missing.kvs, missing.count) == ((), 0)
    assert missing.revision >= second


def test_a_txn_on_mod_revision_runs_the_branch_its_compare_picks(client, prefix):
    key = prefix + b"state"
    revision = client.put(key, b"v1")
    done = client.txn([mod_revision_is(key, revision)], [put(key, b"v2"), get(key)], [get(key)])
    assert done.succeeded
    assert done.ranges[0] is None
    assert done.ranges[1] is not None and done.ranges[1].kvs[0].value == b"v2"
    assert done.ranges[1].kvs[0].mod_revision == done.revision > revision
    stale = client.txn([mod_revision_is(key, revision)], [put(key, b"v3")], [get(key)])
    assert not stale.succeeded
    assert stale.revision == done.revision  # nothing written
    assert stale.ranges[0] is not None
    assert stale.ranges[0].kvs[0].value == b"v2"
    assert stale.ranges[0].kvs[0].mod_revision == done.revision


def test_a_txn_on_create_revision_zero_writes_only_an_absent_key(client, prefix):
    key = prefix + b"once"
    first = client.txn([create_revision_is(key, 0)], [put(key, b"mine")], [get(key)])
    assert first.succeeded and first.ranges == (None,)
    second = client.txn([create_revision_is(key, 0)], [put(key, b"theirs")], [get(key)])
    assert not second.succeeded
    assert second.ranges[0] is not None
    kv = second.ranges[0].kvs[0]
    assert (kv.value, kv.create_revision) == (b"mine", first.revision)
    assert client.txn([create_revision_is(key, first.revision)], [], []).succeeded
    assert client.txn([value_is(key, b"mine")], [delete(key)], []).succeeded
    assert client.range(key).count == 0


def test_delete_removes_a_key_or_a_range_and_counts_them(client, prefix):
    for name in (b"a", b"b", b"c"):
        client.put(prefix + name, b"x")
    assert client.delete(prefix + b"a") == 1
    assert client.delete(prefix + b"a") == 0
    assert client.delete(prefix, prefix_end(prefix)) == 2
    assert client.range(prefix, prefix_end(prefix)).count == 0


# --- leases -----------------------------------------------------------------------------


def test_a_lease_holds_its_keys_until_revoked_then_is_gone(client, prefix):
    lease = client.grant(60)
    client.put(prefix + b"held", b"x", lease=lease)
    assert client.range(prefix + b"held").kvs[0].lease == lease
    assert 0 < client.keep_alive(lease) <= 60
    client.revoke(lease)
    assert client.range(prefix + b"held").count == 0
    assert client.keep_alive(lease) == 0
    client.revoke(lease)  # already gone: no error


def test_a_put_on_a_gone_lease_is_refused_lease_not_found(client, prefix):
    lease = client.grant(60)
    client.revoke(lease)
    with pytest.raises(EtcdRefused) as refused:
        client.put(prefix + b"k", b"x", lease=lease)
    assert refused.value.cause == "lease-not-found"


# --- watches ----------------------------------------------------------------------------


def test_a_watch_returns_events_already_in_history_at_once(client, prefix):
    key = prefix + b"w"
    written = client.put(key, b"1")
    assert client.delete(key) == 1
    removed = client.range(key).revision
    started = time.monotonic()
    events = client.watch(key, written, timeout=AT_ONCE_BOUND)
    assert time.monotonic() - started < AT_ONCE_BOUND / 2
    assert [(e.kind, e.kv.value, e.kv.mod_revision) for e in events] == [
        ("put", b"1", written),
        ("delete", b"", removed),
    ]


def test_a_later_put_wakes_a_blocked_watch(client, prefix):
    key = prefix + b"w"
    start = client.range(key).revision + 1  # the put below, even before the watch is made
    found: list = []
    watcher = threading.Thread(
        target=lambda: found.extend(client.watch(key, start, timeout=AT_ONCE_BOUND))
    )
    started = time.monotonic()
    watcher.start()
    time.sleep(0.3)  # most often the watch is waiting by now; either order must pass
    client.put(key, b"woke")
    watcher.join(AT_ONCE_BOUND)
    assert time.monotonic() - started < AT_ONCE_BOUND / 2
    assert [(e.kind, e.kv.value) for e in found] == [("put", b"woke")]


def test_a_watch_returns_nothing_once_its_timeout_passes(etcd_server, prefix):
    # Requests may take longer than the test's bound: the watch's own timeout ends it.
    endpoint = endpoint_of(etcd_server)
    with closing(EtcdClient([endpoint], attempt_timeout=2 * AT_ONCE_BOUND)) as client:
        start = client.range(prefix).revision + 1
        started = time.monotonic()
        assert client.watch(prefix, start, timeout=0.5, range_end=prefix_end(prefix)) == ()
        assert 0.5 <= time.monotonic() - started < AT_ONCE_BOUND / 2


def test_a_watch_from_a_compacted_revision_is_refused_compacted(private_etcd):
    with closing(EtcdClient([private_etcd.endpoint], attempt_timeout=ATTEMPT)) as client:
        first = client.put(b"k", b"1")
        last = client.put(b"k", b"2")
        gateway(private_etcd.endpoint, "/v3/kv/compaction", {"revision": str(last)})
        with pytest.raises(EtcdRefused) as refused:
            client.watch(b"k", first, timeout=AT_ONCE_BOUND)
        assert refused.value.cause == "compacted"
        assert [e.kv.value for e in client.watch(b"k", last, timeout=AT_ONCE_BOUND)] == [b"2"]


def test_a_blocked_watch_does_not_block_other_calls(client, prefix):
    watched = prefix + b"quiet"
    start = client.range(watched).revision + 1
    watcher = threading.Thread(target=client.watch, args=(watched, start, 2 * AT_ONCE_BOUND))
    watcher.start()
    try:
        time.sleep(0.3)  # let it block
        for number in range(20):
            client.put(prefix + b"busy", str(number).encode())
            assert client.range(prefix + b"busy").kvs[0].value == str(number).encode()
        assert watcher.is_alive()  # the calls above did not wait for it
    finally:
        client.put(watched, b"end")
        watcher.join(AT_ONCE_BOUND)
    assert not watcher.is_alive()


def test_close_ends_a_blocked_watch_at_once_and_refuses_later_calls(etcd_server, prefix):
    client = EtcdClient([endpoint_of(etcd_server)], attempt_timeout=ATTEMPT)
    start = client.range(prefix).revision + 1
    raised: list[BaseException] = []

    def watch() -> None:
        try:
            client.watch(prefix, start, 2 * AT_ONCE_BOUND)
        except EtcdError as error:
            raised.append(error)

    watcher = threading.Thread(target=watch)
    watcher.start()
    time.sleep(0.3)  # most often blocked by now; a watch that starts after close() raises too
    client.close()
    watcher.join(AT_ONCE_BOUND)
    assert not watcher.is_alive()
    assert [type(error) for error in raised] == [EtcdError]  # not transient: no retry
    with pytest.raises(EtcdError) as later:
        client.range(prefix)
    assert type(later.value) is EtcdError


# --- members that do not answer ---------------------------------------------------------


def test_a_dead_first_member_is_named_and_the_next_call_goes_to_the_next(etcd_server):
    dead, live = Endpoint("127.0.0.1", free_port()), endpoint_of(etcd_server)
    with closing(EtcdClient([dead, live], attempt_timeout=ATTEMPT)) as client:
        assert client.member == str(dead)
        with pytest.raises(EtcdUnavailable) as unavailable:
            client.range(b"any")
        assert unavailable.value.member == str(dead)
        assert str(dead) in str(unavailable.value)
        assert client.member == str(live)
        assert client.status()["version"]


def test_a_member_killed_mid_use_fails_one_call_then_the_others_answer(etcd_cluster: EtcdCluster):
    # A follower: after a leader's loss, a follower answers a write only after etcd's
    # request timeout (7 s measured here), too long for this module.
    killed = etcd_cluster.follower()
    others = [m for m in etcd_cluster.members if m is not killed]
    endpoints = [endpoint_of(m.server) for m in (killed, *others)]
    with (
        closing(EtcdClient(endpoints, attempt_timeout=ATTEMPT)) as client,
        closing(EtcdClient(endpoints, attempt_timeout=ATTEMPT)) as watching,
    ):
        written = client.put(b"k", b"before")
        assert client.range(b"k").kvs[0].mod_revision == written
        ended: list[EtcdUnavailable] = []

        def watch() -> None:
            try:
                watching.watch(b"w", written + 1, 2 * AT_ONCE_BOUND)
            except EtcdUnavailable as error:
                ended.append(error)

        watcher = threading.Thread(target=watch)
        watcher.start()
        time.sleep(0.3)  # most often blocked by now; a watch not sent yet is refused alike
        killed.process.kill()
        killed.process.wait(timeout=10)
        with pytest.raises(EtcdUnavailable) as unavailable:
            client.range(b"k")
        assert unavailable.value.member == str(endpoints[0])
        assert client.member == str(endpoints[1])
        assert client.range(b"k").kvs[0].value == b"before"
        assert client.put(b"k", b"after") > written
        watcher.join(AT_ONCE_BOUND)
        assert not watcher.is_alive()
        assert [error.member for error in ended] == [str(endpoints[0])]
        assert watching.member == str(endpoints[1])
        put_w = client.put(b"w", b"1")
        assert [e.kv.value for e in watching.watch(b"w", put_w, AT_ONCE_BOUND)] == [b"1"]


def test_a_restarted_member_answers_the_next_call_on_a_new_connection(private_etcd):
    # The member closed the client's idle connections: none of them is used again.
    with closing(EtcdClient([private_etcd.endpoint], attempt_timeout=ATTEMPT)) as client:
        client.put(b"k", b"before")
        private_etcd.stop()
        private_etcd.start()
        with closing(EtcdClient([private_etcd.endpoint], attempt_timeout=2)) as anyone:
            private_etcd.wait_until_it_answers(anyone)
        assert client.range(b"k").kvs[0].value == b"before"


# --- a full database --------------------------------------------------------------------


def test_a_write_over_the_quota_is_refused_nospace_naming_alarm_disarm(etcd_server, tmp_path):
    with (
        own_etcd(tmp_path, f"--quota-backend-bytes={1 << 20}") as etcd,
        closing(EtcdClient([etcd.endpoint], attempt_timeout=ATTEMPT)) as client,
    ):
        with pytest.raises(EtcdRefused) as refused:
            for number in range(200):  # about 12 fill 1 MiB
                client.put(f"fill/{number}".encode(), b"x" * 100_000)
        assert refused.value.cause == "nospace"
        assert refused.value.code == 8
        assert "etcdctl alarm disarm" in str(refused.value)
        assert client.range(b"fill/0").count == 1  # reads still answer


@pytest.mark.parametrize("release", ETCD_RELEASES)
def test_a_stores_reads_answer_under_nospace(etcd_server, tmp_path, release):
    """``check``, ``wait`` and ``multi_get`` read; only the writes stop (etcd 3.5 refuses
    a transaction that only reads, too)."""
    quota = f"--quota-backend-bytes={1 << 20}"
    with (
        own_etcd(tmp_path, quota, binary=etcd_binary(release)) as etcd,
        closing(EtcdClient([etcd.endpoint], attempt_timeout=ATTEMPT)) as client,
        open_v3_launcher(str(etcd.endpoint), "nospace") as (_, store),
    ):
        store.set("a", b"1")
        with pytest.raises(EtcdRefused):
            for number in range(200):
                client.put(f"fill/{number}".encode(), b"x" * 100_000)
        assert store.check(["a"]) and not store.check(["a", "never"])
        store.wait(["a"], timedelta(seconds=5))
        assert store.multi_get(["a"]) == [b"1"]
        with pytest.raises(EtcdRefused) as refused:
            store.set("b", b"2")
        assert refused.value.cause == "nospace"


# --- auth -------------------------------------------------------------------------------


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


ROOT: dict[str, object] = {"name": "root", "password": "root-pw"}
#: Turns auth on: root, and alice who may read and write ``a/`` only.
AUTH_ON: list[tuple[str, dict[str, object]]] = [
    ("/v3/auth/user/add", ROOT),
    ("/v3/auth/role/add", {"name": "root"}),
    ("/v3/auth/user/grant", {"user": "root", "role": "root"}),
    ("/v3/auth/user/add", {"name": "alice", "password": "alice-pw"}),
    ("/v3/auth/role/add", {"name": "run"}),
    (
        "/v3/auth/role/grant",
        {
            "name": "run",
            "perm": {"permType": "READWRITE", "key": b64(b"a/"), "range_end": b64(b"a0")},
        },
    ),
    ("/v3/auth/user/grant", {"user": "alice", "role": "run"}),
    ("/v3/auth/enable", {}),
]
ALICE = Credentials("alice", "alice-pw")
#: The client's logger: one DEBUG record when it authenticates again.
CLIENT_LOG = "nvrx_seghealth._rendezvous.etcd_v3.client"


@pytest.fixture(scope="module")
def auth_etcd(
    etcd_server: EtcdServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OwnEtcd]:
    """An etcd of this module's auth tests, with auth on (:data:`AUTH_ON`); they leave
    its users and roles as they are."""
    with own_etcd(tmp_path_factory.mktemp("auth")) as etcd:
        for path, request in AUTH_ON:
            gateway(etcd.endpoint, path, request)
        yield etcd


def test_a_user_reads_writes_and_watches_its_keys_and_is_refused_others(auth_etcd):
    with closing(
        EtcdClient([auth_etcd.endpoint], attempt_timeout=ATTEMPT, credentials=ALICE)
    ) as alice:
        written = alice.put(b"a/k", b"1")
        assert alice.range(b"a/k").kvs[0].value == b"1"
        assert [e.kv.value for e in alice.watch(b"a/k", written, AT_ONCE_BOUND)] == [b"1"]
        with pytest.raises(EtcdRefused) as refused:
            alice.range(b"b/k")
        assert refused.value.cause == "permission"
        with pytest.raises(EtcdRefused) as refused:
            alice.watch(b"b/k", written, AT_ONCE_BOUND)
        assert refused.value.cause == "permission"


@pytest.mark.parametrize("credentials", [Credentials("alice", "wrong"), None])
def test_a_wrong_password_or_none_is_refused_auth(auth_etcd, credentials):
    endpoints = [auth_etcd.endpoint]
    with closing(EtcdClient(endpoints, attempt_timeout=ATTEMPT, credentials=credentials)) as client:
        with pytest.raises(EtcdRefused) as refused:
            client.range(b"a/k")
        assert refused.value.cause == "auth"
        assert client.member == str(auth_etcd.endpoint)  # not a member's fault: no move
        assert "NVRX_SEGHEALTH_ETCD_PASSWORD" in str(refused.value)  # the variable read


def test_an_expired_token_is_fetched_again_once_transparently(etcd_server, tmp_path, caplog):
    # A simple token lives --auth-token-ttl seconds after its last use (checked each second).
    with own_etcd(tmp_path, "--auth-token-ttl=1") as etcd:
        for path, request in AUTH_ON:
            gateway(etcd.endpoint, path, request)
        endpoints = [etcd.endpoint]
        with (
            closing(EtcdClient(endpoints, attempt_timeout=ATTEMPT, credentials=ALICE)) as reader,
            closing(EtcdClient(endpoints, attempt_timeout=ATTEMPT, credentials=ALICE)) as watcher,
        ):
            written = reader.put(b"a/k", b"1")
            assert watcher.range(b"a/k").count == 1  # both hold a token now
            time.sleep(3.5)  # both tokens expire
            with caplog.at_level(logging.DEBUG, logger=CLIENT_LOG):
                assert reader.range(b"a/k").kvs[0].value == b"1"
                assert watcher.watch(b"a/k", written, AT_ONCE_BOUND)[0].kv.value == b"1"
    assert len([r for r in caplog.records if r.name == CLIENT_LOG]) == 2  # one each


# --- TLS --------------------------------------------------------------------------------


#: What the member's and the client's certificates may do, and whom they name.
EXTENSIONS = "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A self-signed CA (``ca.pem``), and certificates it signed for the member
    (``member.pem``, ``member.key``: 127.0.0.1) and for the client (``client.*``)."""
    directory = tmp_path_factory.mktemp("pki")
    (directory / "extensions").write_text(EXTENSIONS)
    key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True)

    openssl(
        "req",
        "-x509",
        *key,
        "-days",
        "2",
        "-subj",
        "/CN=nvrx-ca",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
    )
    for name in ("member", "client"):
        openssl(
            "req", *key, "-subj", f"/CN={name}", "-keyout", f"{name}.key", "-out", f"{name}.csr"
        )
        openssl(
            "x509",
            "-req",
            "-in",
            f"{name}.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "extensions",
            "-out",
            f"{name}.pem",
        )
    return directory


def tls_of(pki: Path, *, client: bool = True) -> Tls:
    if not client:
        return Tls(str(pki / "ca.pem"), None, None)
    return Tls(str(pki / "ca.pem"), str(pki / "client.pem"), str(pki / "client.key"))


@pytest.fixture(scope="module")
def tls_etcd(
    etcd_server: EtcdServer, tmp_path_factory: pytest.TempPathFactory, pki: Path
) -> Iterator[OwnEtcd]:
    """An etcd of this module's TLS tests: it serves https and wants a client certificate."""
    flags = [
        f"--cert-file={pki / 'member.pem'}",
        f"--key-file={pki / 'member.key'}",
        f"--trusted-ca-file={pki / 'ca.pem'}",
        "--client-cert-auth",
    ]
    with own_etcd(tmp_path_factory.mktemp("tls"), *flags, scheme="https", tls=tls_of(pki)) as etcd:
        yield etcd


def test_https_with_a_client_certificate_reads_writes_and_watches(tls_etcd, pki):
    endpoints = [tls_etcd.endpoint]
    with closing(
        EtcdClient(endpoints, attempt_timeout=ATTEMPT, protocol="https", tls=tls_of(pki))
    ) as client:
        written = client.put(b"k", b"1")
        assert client.range(b"k").kvs[0].value == b"1"
        assert [e.kv.value for e in client.watch(b"k", written, AT_ONCE_BOUND)] == [b"1"]


def test_https_without_the_client_certificate_is_refused_at_once_naming_ssl_cert(tls_etcd, pki):
    # The member's alert says so: asking again cannot change it.
    tls = tls_of(pki, client=False)
    client = EtcdClient([tls_etcd.endpoint], attempt_timeout=ATTEMPT, protocol="https", tls=tls)
    with closing(client), pytest.raises(EtcdRefused, match="ssl_cert"):
        client.range(b"k")


def test_https_to_a_member_named_otherwise_than_its_certificate_names_the_endpoint(tls_etcd, pki):
    port = int(str(tls_etcd.endpoint).rpartition(":")[2])
    client = EtcdClient(
        [Endpoint("localhost", port)], attempt_timeout=ATTEMPT, protocol="https", tls=tls_of(pki)
    )
    with closing(client), pytest.raises(EtcdRefused) as refused:
        client.range(b"k")
    assert "--rdzv-endpoint" in str(refused.value) and "ca_cert" not in str(refused.value)


def test_https_to_a_member_this_ca_did_not_sign_is_refused_naming_ca_cert(tls_etcd):
    # The system's CAs: none of them signed the member's certificate.
    client = EtcdClient([tls_etcd.endpoint], attempt_timeout=ATTEMPT, protocol="https")
    with closing(client), pytest.raises(EtcdRefused, match="ca_cert"):
        client.range(b"k")
