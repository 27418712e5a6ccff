"""A real etcd server (Debian's etcd-server, v2 API enabled) on 127.0.0.1 for the tests
marked ``etcd``.

The session-scoped ``etcd_server`` fixture starts one etcd with a private data directory
and free ports, waits until it answers, and stops it by PID at the end. Debian's
``etcd-server`` is installed only when ``CI=true`` or ``NVRX_SEGHEALTH_ETCD_INSTALL=1``;
otherwise, without an ``etcd`` binary, the tests skip and say how to enable them. In CI
a missing or broken etcd fails the tests. The Python client comes with the package's
``etcd`` extra (``pip install -e '.[etcd]'``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support import free_port

IN_CI = os.environ.get("CI") == "true"
INSTALL = IN_CI or os.environ.get("NVRX_SEGHEALTH_ETCD_INSTALL") == "1"


def _unavailable(reason: str) -> None:
    if IN_CI:
        pytest.fail(f"CI=true requires a real etcd: {reason}", pytrace=False)
    pytest.skip(reason)


def _install() -> None:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (
        ["apt-get", "update", "-q"],
        ["apt-get", "install", "-y", "-q", "--no-install-recommends", "etcd-server"],
    ):
        done = subprocess.run(
            command,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            stdin=subprocess.DEVNULL,
            check=False,
        )
        if done.returncode != 0:
            _unavailable(f"{' '.join(command)} failed: {done.stderr[-2000:]}")


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


@pytest.fixture(scope="session")
def etcd_server() -> Iterator[EtcdServer]:
    if shutil.which("etcd") is None:
        if not INSTALL:
            _unavailable(
                "etcd is not installed. Enable these tests with "
                "NVRX_SEGHEALTH_ETCD_INSTALL=1 (installs Debian's etcd-server) "
                "or run: apt-get install etcd-server"
            )
        _install()
    try:
        import etcd  # noqa: F401
    except ImportError:
        _unavailable("python-etcd is missing: pip install -e '.[etcd]'")
    state = Path(tempfile.mkdtemp(prefix="nvrx-seghealth-etcd."))
    client_port, peer_port = free_port(), free_port()
    client_url, peer_url = f"http://127.0.0.1:{client_port}", f"http://127.0.0.1:{peer_port}"
    log = state / "etcd.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [
                "etcd",
                "--name",
                "nvrx",
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
                f"nvrx={peer_url}",
                "--enable-v2=true",
            ],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    server = EtcdServer("127.0.0.1", client_port, log)
    try:
        deadline = time.monotonic() + 30
        while True:
            if process.poll() is not None:
                _unavailable(f"etcd exited {process.returncode}: {log.read_text()[-2000:]}")
            try:
                server.client().write("/nvrx-seghealth-ready", "1")
                break
            except Exception:  # noqa: BLE001  (not up yet: any client error)
                if time.monotonic() > deadline:
                    _unavailable(f"etcd did not answer in 30 s: {log.read_text()[-2000:]}")
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
