"""The pytest fixtures that tests of more than one folder use; the root ``conftest.py``
registers this module (``pytest_plugins``).

``tcp_store``: a real TCPStore server on 127.0.0.1, for in-process launchers.

A real etcd server (Debian's etcd-server, v2 API enabled) on 127.0.0.1, for the tests
marked ``etcd`` and the etcd cells of the configuration matrix: the session-scoped
``etcd_server`` fixture starts one etcd with a private data directory and free ports
(:func:`harness.etcd.running_etcd`), waits until it answers, and stops it by PID at the
end; ``module_etcd_server`` starts one for a single test module; ``etcd_cluster`` starts
three members for a single test, which may kill the leader. Debian's ``etcd-server``
is installed only when ``CI=true`` or ``NVRX_SEGHEALTH_ETCD_INSTALL=1``; otherwise,
without an ``etcd`` binary, the tests skip and say how to enable them. In CI a missing or
broken etcd fails the tests. The Python client comes with the package's ``etcd`` extra
(``pip install -e '.[etcd]'``).
"""

from __future__ import annotations

import datetime
import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import TYPE_CHECKING

import pytest

from .etcd import EtcdCluster, EtcdServer, EtcdUnavailable, running_etcd, running_etcd_cluster

if TYPE_CHECKING:
    from torch.distributed import TCPStore

__all__ = ["etcd_cluster", "etcd_server", "module_etcd_server", "tcp_store"]

IN_CI = os.environ.get("CI") == "true"
INSTALL = IN_CI or os.environ.get("NVRX_SEGHEALTH_ETCD_INSTALL") == "1"


@pytest.fixture
def tcp_store() -> Iterator[TCPStore]:
    """A real TCPStore server on 127.0.0.1 (any free port); yields the master store."""
    from torch.distributed import TCPStore

    store = TCPStore(
        "127.0.0.1",
        0,
        is_master=True,
        wait_for_workers=False,
        timeout=datetime.timedelta(seconds=30),
    )
    yield store
    del store


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


@pytest.fixture(scope="session")
def etcd_server() -> Iterator[EtcdServer]:
    """The etcd of the whole session."""
    with _etcd("nvrx") as server:
        yield server


@pytest.fixture(scope="module")
def module_etcd_server() -> Iterator[EtcdServer]:
    """An etcd of one test module alone: for tests that fill torch's store directory,
    which every other test would then read."""
    with _etcd("nvrx-module") as server:
        yield server


@pytest.fixture
def etcd_cluster() -> Iterator[EtcdCluster]:
    """A cluster of three etcd members of one test alone, whose leader it may kill."""
    _ensure_etcd()
    with ExitStack() as stack:
        try:
            cluster = stack.enter_context(running_etcd_cluster(3, "nvrx-cluster"))
        except EtcdUnavailable as error:  # while it starts; later, the test's own failure
            _unavailable(str(error))
        yield cluster


def _ensure_etcd() -> None:
    """Install etcd when allowed; skip, or fail in CI, without etcd or python-etcd."""
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


@contextmanager
def _etcd(name: str) -> Iterator[EtcdServer]:
    """A new etcd (installed first when allowed); skips, or fails in CI, without one."""
    _ensure_etcd()
    try:
        with running_etcd(name) as server:
            yield server
    except EtcdUnavailable as error:  # raised only while it starts
        _unavailable(str(error))
