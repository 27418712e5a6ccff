"""Real processes around a pid file: a holder of its lock, an unrelated process that
nothing may signal, and the lock test a sender makes (util-linux ``flock(1)``)."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

__all__ = ["is_locked", "lock_held", "victim"]

_HOLD = (
    "import fcntl, os, sys, time\n"
    "fd = os.open(sys.argv[1], os.O_RDONLY)\n"
    "fcntl.flock(fd, fcntl.LOCK_EX)\n"
    "print('locked', flush=True)\n"
    "time.sleep(600)\n"
)


@contextlib.contextmanager
def lock_held(path: Path) -> Iterator[subprocess.Popen[str]]:
    """A process that holds an exclusive ``flock`` on ``path`` until the block ends."""
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        yield holder
    finally:
        holder.kill()
        holder.wait()


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
