"""Real processes around a pid file: a real producer that holds it, a holder of its lock,
an unrelated process that nothing may signal, and the lock test a sender makes (util-linux
``flock(1)``)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from harness.commands import COMMAND

from .accounts import SETPRIV_NOBODY
from .fakeslurm import FakeSlurm

__all__ = ["is_locked", "lock_held", "producer_holding", "victim"]

_HOLD = (
    "import errno, fcntl, os, sys, time\n"
    "try:\n"
    "    fd = os.open(sys.argv[1], os.O_RDONLY)\n"
    "except OSError as error:\n"
    "    sys.exit(print(errno.errorcode[error.errno], flush=True))\n"
    "if sys.argv[2] == 'record':\n"
    "    fcntl.lockf(fd, fcntl.LOCK_SH)  # a POSIX read lock: a read-only descriptor may\n"
    "else:\n"
    "    fcntl.flock(fd, fcntl.LOCK_EX)\n"
    "print('locked', flush=True)\n"
    "time.sleep(600)\n"
)


@contextlib.contextmanager
def lock_held(path: Path, *, nobody: bool = False, record: bool = False) -> Iterator[str]:
    """A process that opens ``path`` read-only and holds an exclusive ``flock`` on it
    until the block ends: this account's, or with ``nobody`` user nobody's (root needed).
    With ``record`` it holds a POSIX read lock (``lockf``) instead.

    Yields ``locked``, or for user nobody the errno name that refused the open (e.g.
    ``EACCES``: then nothing holds it).
    """
    kind = "record" if record else "flock"
    command = [os.path.realpath(sys.executable), "-I", "-c", _HOLD, str(path), kind]
    if nobody:
        command = [*SETPRIV_NOBODY, *command]
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as holder:
        try:
            assert holder.stdout is not None
            outcome = holder.stdout.readline().strip()
            assert outcome == "locked" or (nobody and outcome.startswith("E")), outcome
            yield outcome
        finally:
            holder.kill()  # the with closes its stdout and waits for it


@contextlib.contextmanager
def producer_holding(pid_file: Path, slurm: FakeSlurm) -> Iterator[subprocess.Popen[str]]:
    """A real ``publish-drained --interval 600 --pid-file pid_file`` on the fake Slurm
    ``slurm``, after its first pass (so it has claimed the file); SIGKILLed when the block
    ends, as the OOM killer would, unless it ended before."""
    argv = [*COMMAND, *slurm.args("--interval", "600", "--pid-file", str(pid_file))]
    with subprocess.Popen(
        argv,
        env={**os.environ, **slurm.env},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as producer:
        try:
            assert producer.stdout is not None
            if not any("pass done" in line for line in producer.stdout):
                raise AssertionError(f"the producer ended: {producer.communicate()[1]}")
            yield producer
        finally:
            producer.kill()  # the with closes its pipes and waits for it


@contextlib.contextmanager
def victim() -> Iterator[subprocess.Popen[bytes]]:
    """An unrelated running process (a ``sleep``) that nothing may signal."""
    process = subprocess.Popen(["sleep", "600"])
    try:
        yield process
    finally:
        process.kill()
        process.wait()


def is_locked(path: Path) -> bool:
    """Whether a process holds an exclusive lock on ``path``: ``flock -n -s`` fails."""
    done = subprocess.run(
        ["flock", "--nonblock", "--shared", str(path), "true"], timeout=30, check=False
    )
    return done.returncode != 0
