"""A real etcd server on 127.0.0.1 with its v2 API on: :func:`running_etcd`.

Used by the etcd tests (``integration/etcd/conftest.py``) and benchmark row 4. Each
server has a private data directory and free ports, and is stopped by its PID.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.support import free_port

__all__ = ["START_TIMEOUT", "EtcdServer", "EtcdUnavailable", "running_etcd"]

#: Seconds a new etcd has to answer its first write.
START_TIMEOUT = 30.0


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

    def raw(self, prefix: str) -> dict[str, str]:
        """Every key under ``prefix`` as etcd itself holds it (leaves only)."""
        import etcd

        try:
            result = self.client().read(prefix, recursive=True)
        except etcd.EtcdKeyNotFound:
            return {}
        return {leaf.key: leaf.value for leaf in result.leaves if not leaf.dir}


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
