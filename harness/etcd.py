"""A real etcd server on 127.0.0.1 with its v2 API on (:func:`running_etcd`), torch's
EtcdStore in it (:func:`etcd_store`), and what a client asked of it (:class:`Traffic`).

Used by the etcd tests (``integration/etcd/``, their fixtures in
:mod:`harness.fixtures`) and benchmark row 4. Each server has a private data directory
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
    "EtcdServer",
    "EtcdUnavailable",
    "Request",
    "Traffic",
    "etcd_store",
    "plant_old_keys",
    "running_etcd",
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
    if shutil.which("etcd") is None:
        raise EtcdUnavailable("etcd is not installed (apt-get install etcd-server)")
    state = Path(tempfile.mkdtemp(prefix="nvrx-seghealth-etcd."))
    client_port, peer_port = free_port(), free_port()
    client_url, peer_url = f"http://127.0.0.1:{client_port}", f"http://127.0.0.1:{peer_port}"
    log = state / "etcd.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [
                "etcd",
                "--name",
                name,
                "--data-dir",
                str(state / "data"),
                "--listen-client-urls",
                client_url,
                "--advertise-client-urls",
                client_url,
                "--listen-peer-urls",
                peer_url,
                "--initial-advertise-peer-urls",
                peer_url,
                "--initial-cluster",
                f"{name}={peer_url}",
                "--enable-v2=true",
            ],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    server = EtcdServer("127.0.0.1", client_port, log)
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if process.poll() is not None:
                raise EtcdUnavailable(
                    f"etcd exited {process.returncode}: {log.read_text()[-2000:]}"
                )
            try:
                server.client().write("/nvrx-seghealth-ready", "1")
                break
            except Exception:  # noqa: BLE001  (not up yet: any client error)
                if time.monotonic() > deadline:
                    raise EtcdUnavailable(
                        f"etcd did not answer in {START_TIMEOUT:g} s: {log.read_text()[-2000:]}"
                    ) from None
                time.sleep(0.1)
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        shutil.rmtree(state, ignore_errors=True)


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
