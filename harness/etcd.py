"""A real etcd server on 127.0.0.1 with its v2 API on (:func:`running_etcd`), a cluster of
several whose leader can be killed (:func:`running_etcd_cluster`), torch's EtcdStore in
it (:func:`etcd_store`), and what a client asked of it (:class:`Traffic`).

Used by the etcd tests (``integration/etcd/``, their fixtures in
:mod:`harness.fixtures`) and benchmark row 4. Each member has a private data directory
and free ports, and is stopped by its PID.
"""

from __future__ import annotations

import base64
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .common import free_port

if TYPE_CHECKING:
    from torch.distributed.elastic.rendezvous.etcd_store import EtcdStore

__all__ = [
    "START_TIMEOUT",
    "STORE",
    "EtcdCluster",
    "EtcdMember",
    "EtcdServer",
    "EtcdUnavailable",
    "Request",
    "Traffic",
    "etcd_store",
    "plant_old_keys",
    "running_etcd",
    "running_etcd_cluster",
]

#: Seconds a new etcd has to answer its first write.
START_TIMEOUT = 30.0
#: torch's etcd-v2 store directory.
STORE = "/torch/elastic/store"


class EtcdUnavailable(Exception):
    """No etcd could be started; the message says why."""


@dataclass(frozen=True)
class EtcdServer:
    """A running etcd: its client endpoint, a python-etcd client and its log file."""

    host: str
    port: int
    log: Path

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.port}"

    def client(self):
        import etcd

        return etcd.Client(host=self.host, port=self.port, protocol="http")

    def proposals(self) -> int:
        """Raft proposals etcd has committed so far (every write, and every failed
        compare-and-swap), from its ``/metrics``."""
        import urllib.request

        with urllib.request.urlopen(f"http://{self.endpoint}/metrics", timeout=30) as answer:
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


@contextmanager
def running_etcd(name: str = "nvrx") -> Iterator[EtcdServer]:
    """Start an ``etcd`` (from ``PATH``), yield it once it answers, stop it at the end.

    Raises:
        EtcdUnavailable: no ``etcd`` binary, or it exited or did not answer in
            :data:`START_TIMEOUT` seconds (with the end of its log).
    """
    with running_etcd_cluster(1, name) as cluster:
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
        """Whether this member is the raft leader now (its ``/v2/stats/self``)."""
        import json
        import urllib.request

        url = f"http://{self.server.endpoint}/v2/stats/self"
        with urllib.request.urlopen(url, timeout=5) as answer:
            return bool(json.loads(answer.read())["state"] == "StateLeader")


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


@contextmanager
def running_etcd_cluster(size: int = 3, name: str = "nvrx") -> Iterator[EtcdCluster]:
    """Start ``size`` etcd members (from ``PATH``) as one cluster, yield it once it answers,
    stop every member still running at the end (a single one by SIGTERM, a cluster's by
    SIGKILL: their data goes with them).

    Raises:
        EtcdUnavailable: no ``etcd`` binary, or a member exited or the cluster did not
            answer in :data:`START_TIMEOUT` seconds (with the end of a log).
    """
    if shutil.which("etcd") is None:
        raise EtcdUnavailable("etcd is not installed (apt-get install etcd-server)")
    state = Path(tempfile.mkdtemp(prefix="nvrx-seghealth-etcd."))
    names = [name] if size == 1 else [f"{name}{number}" for number in range(size)]
    ports = {member: (free_port(), free_port()) for member in names}
    peers = ",".join(f"{m}=http://127.0.0.1:{peer}" for m, (_, peer) in ports.items())
    cluster = EtcdCluster([])
    try:
        for label, (client_port, peer_port) in ports.items():
            client_url = f"http://127.0.0.1:{client_port}"
            peer_url = f"http://127.0.0.1:{peer_port}"
            log = state / f"{label}.log"
            with open(log, "wb") as out:
                process = subprocess.Popen(
                    [
                        "etcd",
                        "--name",
                        label,
                        "--data-dir",
                        str(state / label),
                        "--listen-client-urls",
                        client_url,
                        "--advertise-client-urls",
                        client_url,
                        "--listen-peer-urls",
                        peer_url,
                        "--initial-advertise-peer-urls",
                        peer_url,
                        "--initial-cluster",
                        peers,
                        "--enable-v2=true",
                    ],
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
            server = EtcdServer("127.0.0.1", client_port, log)
            cluster.members.append(EtcdMember(label, server, process))
        deadline = time.monotonic() + START_TIMEOUT
        for member in cluster.members:
            _wait_until_it_answers(member, deadline)
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


def _wait_until_it_answers(member: EtcdMember, deadline: float) -> None:
    """Wait until ``member`` answers a write (the cluster has a leader)."""
    log = member.server.log
    while True:
        if not member.alive:
            raise EtcdUnavailable(
                f"etcd exited {member.process.returncode}: {log.read_text()[-2000:]}"
            )
        try:
            member.server.client().write("/nvrx-seghealth-ready", "1")
            return
        except Exception:  # noqa: BLE001  (not up yet: any client error)
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
