"""A real hung, or slow, filesystem (FUSE) and bounded runs beside it, for the tests marked
``hungmount`` (their fixtures: ``integration/hungmount/conftest.py``).

:func:`hung_mount` mounts :mod:`harness.programs.hungfs` (``getattr`` answers for the root and
never for anything below it) in a child process, so that ``os.stat(mount)`` returns and
``os.stat(mount / name)`` blocks in the kernel, as on a hung Lustre or NFS client: no
signal makes it return. :func:`slow_mount` mounts it over a backing folder instead: each
request below the root answers a fixed delay after it arrived, until the test makes the
mount hang (:meth:`HungMount.hang`). Its end always aborts the mount's own FUSE connection, which
fails every pending request with ENOTCONN and so releases whatever a test left stuck;
then it kills the server and lazily unmounts. :func:`run_bounded` runs a command beside
the mount and fails the test when it does not end in time.

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
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.programs import HUNGFS

__all__ = [
    "LISTED",
    "RELEASE_TIMEOUT",
    "Finished",
    "HungMount",
    "hung_mount",
    "kill_session",
    "pipe_holders",
    "run_bounded",
    "slow_mount",
]

IN_CI = os.environ.get("CI") == "true"
#: The file beside a slow mount's backing folder that makes its requests hang.
HANG_SWITCH = "hang"
CONNECTIONS = Path("/sys/fs/fuse/connections")
#: Seconds the FUSE server may take to mount (python start-up and libfuse's mount).
MOUNT_TIMEOUT = 15.0
#: Decision files a mount made with ``--listing`` lists (segment_health_check.42.1 ... .6).
LISTED = 6
#: Seconds a process may take to exit once the mount is aborted (a guard's clean-up).
RELEASE_TIMEOUT = 30.0


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
    """A mounted :mod:`harness.programs.hungfs`: its mount point and its FUSE connection.

    Attributes:
        path: the mount point; it answers ``stat``, every name below it hangs (a slow
            mount: answers late).
        connection: ``/sys/fs/fuse/connections/<id>`` of this mount alone.
        aborted: whether :meth:`abort` has been called.
        backing: a slow mount's backing folder, whose files the mount shows; else ``None``.
    """

    def __init__(self, path: Path, connection: Path, backing: Path | None = None) -> None:
        self.path = path
        self.connection = connection
        self.aborted = False
        self.backing = backing

    def hang(self) -> None:
        """A slow mount: every request that arrives from now on hangs."""
        assert self.backing is not None, "only a slow mount can start hanging"
        (self.backing.parent / HANG_SWITCH).touch()

    def waiting(self) -> int:
        """How many requests to this mount await an answer (the kernel's count): a
        call stuck in it is one."""
        return int((self.connection / "waiting").read_text())

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


def slow_mount(tmp_path: Path, delay: float) -> Iterator[HungMount]:
    """:func:`hung_mount` over the backing folder ``tmp_path / "backing"``: each request
    below the root answers ``delay`` seconds after it arrived, with the backing folder's
    state then (:mod:`harness.programs.hungfs`, ``--delay``)."""
    backing = tmp_path / "backing"
    backing.mkdir()
    switch = tmp_path / HANG_SWITCH
    yield from hung_mount(
        tmp_path, "--delay", str(delay), str(backing), str(switch), backing=backing
    )


def hung_mount(tmp_path: Path, *options: str, backing: Path | None = None) -> Iterator[HungMount]:
    """Mount :mod:`harness.programs.hungfs` (with ``options``) in ``tmp_path`` for one test,
    and yield it; at the end abort its connection, kill its server and unmount it.
    ``backing``: the folder the options name, for :func:`slow_mount`."""
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
        mount = HungMount(mountpoint, connection, backing)
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


@dataclass(frozen=True)
class Finished:
    """A bounded run that ended: exit code, captured output, seconds it took."""

    returncode: int
    stdout: str
    stderr: str
    seconds: float


def kill_session(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def run_bounded(
    command: list[str],
    mount: HungMount,
    bound: float,
    *,
    env: dict[str, str] | None = None,
    stdin: int = subprocess.DEVNULL,
) -> Finished:
    """Run ``command`` in a session of its own, stdout and stderr through pipes.

    Returns once the process has exited *and* every writer of those pipes has closed
    them: a process it left behind that still holds one keeps the run going. A run not
    done within ``bound`` seconds fails the test; the mount is aborted first, which
    releases whatever is stuck in it, then the session is killed.
    """
    started = time.monotonic()
    process = subprocess.Popen(
        command, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=env, start_new_session=True,
    )  # fmt: skip
    try:
        stdout, stderr = process.communicate(timeout=bound)
    except subprocess.TimeoutExpired:
        mount.abort()
        kill_session(process)
        stdout, stderr = process.communicate(timeout=RELEASE_TIMEOUT)
        pytest.fail(
            f"not done within {bound:g} s (exited or closed its output only once the mount "
            f"was aborted; exit code {process.returncode}): {command}\n"
            f"--- stdout\n{stdout}\n--- stderr\n{stderr}"
        )
    return Finished(process.returncode, stdout, stderr, time.monotonic() - started)


def pipe_holders(inode: int) -> list[int]:
    """Every process that holds an end of the pipe ``inode``."""
    target = f"pipe:[{inode}]"
    holders = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if any(os.readlink(fd) == target for fd in (proc / "fd").iterdir()):
                holders.append(int(proc.name))
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue  # exited meanwhile
    return holders
