"""A real hung filesystem (FUSE) for the tests marked ``hungmount``.

The ``hung_mount`` fixture mounts :mod:`hungfs` (``getattr`` answers for the root and
never for anything below it) in a child process, so that ``os.stat(mount)`` returns and
``os.stat(mount / name)`` blocks in the kernel, as on a hung Lustre or NFS client: no
signal makes it return. Teardown always aborts the mount's own FUSE connection, which fails every
pending request with ENOTCONN and so releases whatever a test left stuck; then it kills
the server and lazily unmounts.

Needs ``/dev/fuse``, Debian's ``fuse3`` (libfuse3 and ``fusermount3``), the ``mfusepy``
binding (the package's ``test`` extra) and root (to abort a connection). Without them the
tests skip and say why; with ``CI=true`` they fail instead.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

IN_CI = os.environ.get("CI") == "true"
HUNGFS = Path(__file__).with_name("hungfs.py")
CONNECTIONS = Path("/sys/fs/fuse/connections")
#: Seconds the FUSE server may take to mount (python start-up and libfuse's mount).
MOUNT_TIMEOUT = 15.0


def _unavailable(reason: str) -> None:
    if IN_CI:
        pytest.fail(f"CI=true requires a real hung FUSE mount: {reason}", pytrace=False)
    pytest.skip(reason)


def _missing_requirement() -> str | None:
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse: the kernel offers no FUSE here"
    if shutil.which("fusermount3") is None:
        return "no fusermount3: apt-get install fuse3"
    if os.geteuid() != 0:
        return "aborting a FUSE connection through /sys/fs/fuse/connections needs root"
    try:
        import mfusepy  # noqa: F401  (loads libfuse3 too)
    except (ImportError, OSError) as error:
        return f"the mfusepy binding is unusable ({error}): pip install -e '.[test]'"
    return None


def _mounted(mountpoint: Path, fstype: str) -> bool:
    """Whether ``/proc/self/mounts`` lists ``mountpoint`` with ``fstype``. (Unlike
    ``os.path.ismount``, this does not stat the mount, which fails once it is aborted.)"""
    with open("/proc/self/mounts") as mounts:
        return any(line.split()[1:3] == [str(mountpoint), fstype] for line in mounts)


def _ensure_fusectl() -> None:
    """Mount the FUSE control filesystem at :data:`CONNECTIONS` unless it is there."""
    if _mounted(CONNECTIONS, "fusectl"):
        return
    done = subprocess.run(
        ["mount", "-t", "fusectl", "none", str(CONNECTIONS)],
        capture_output=True, text=True, timeout=10, stdin=subprocess.DEVNULL, check=False)  # fmt: skip
    if done.returncode != 0:
        _unavailable(f"cannot mount fusectl at {CONNECTIONS}: {done.stderr.strip()}")


class HungMount:
    """A mounted :mod:`hungfs`: its mount point and its FUSE connection.

    Attributes:
        path: the mount point; it answers ``stat``, every name below it hangs.
        connection: ``/sys/fs/fuse/connections/<id>`` of this mount alone.
        aborted: whether :meth:`abort` has been called.
    """

    def __init__(self, path: Path, connection: Path) -> None:
        self.path = path
        self.connection = connection
        self.aborted = False

    def abort(self) -> None:
        """Abort this mount's connection: every pending and later request fails with
        ENOTCONN, so stuck stats return and the processes holding them can exit."""
        self.aborted = True
        if self.connection.exists():
            (self.connection / "abort").write_text("1")


def _stop(server: subprocess.Popen[bytes], mount: HungMount | None, mountpoint: Path) -> None:
    if mount is not None:
        mount.abort()
    # SIGKILL: libfuse answers SIGTERM by joining its workers, and a worker sleeping in
    # getattr would hold it for the hour.
    if server.poll() is None:
        os.kill(server.pid, signal.SIGKILL)
    server.wait(timeout=30)
    if _mounted(mountpoint, "fuse"):
        subprocess.run(
            ["umount", "-l", str(mountpoint)],
            check=True,
            capture_output=True,
            timeout=30,
            stdin=subprocess.DEVNULL,
        )


@pytest.fixture
def hung_mount(tmp_path: Path) -> Iterator[HungMount]:
    """A fresh hung FUSE mount for one test; its connection is aborted at teardown."""
    yield from _hung_mount(tmp_path)


#: Decision files the ``hung_listing`` mount lists (segment_health_check.42.1 ... .6).
LISTED = 6


@pytest.fixture
def hung_listing(tmp_path: Path) -> Iterator[HungMount]:
    """Like ``hung_mount``, but the root lists :data:`LISTED` decision files of job 42,
    whose stats hang: a directory that lists but whose files do not answer."""
    yield from _hung_mount(tmp_path, "--listing", str(LISTED))


def _hung_mount(tmp_path: Path, *options: str) -> Iterator[HungMount]:
    missing = _missing_requirement()
    if missing:
        _unavailable(missing)
    _ensure_fusectl()
    mountpoint = tmp_path / "hung"
    mountpoint.mkdir()
    log_path = tmp_path / "hungfs.log"
    with open(log_path, "wb") as log:
        server = subprocess.Popen(
            [sys.executable, str(HUNGFS), str(mountpoint), *options],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    mount: HungMount | None = None
    try:
        deadline = time.monotonic() + MOUNT_TIMEOUT
        while not os.path.ismount(mountpoint):
            if server.poll() is not None or time.monotonic() > deadline:
                _unavailable(f"hungfs did not mount {mountpoint}: {log_path.read_text()!r}")
            time.sleep(0.05)
        connection = CONNECTIONS / str(os.minor(os.stat(mountpoint).st_dev))
        mount = HungMount(mountpoint, connection)
        if not (connection / "abort").exists():
            _unavailable(f"no FUSE connection {connection} for {mountpoint}")
        yield mount
        if server.poll() is not None and not mount.aborted:
            pytest.fail(
                f"the hung FUSE server died during the test (code {server.returncode}), so "
                f"its stats may have failed instead of hanging: {log_path.read_text()!r}"
            )
    finally:
        _stop(server, mount, mountpoint)
