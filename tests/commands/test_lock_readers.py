"""The decision directory's lock against an account that can only read the directory.

Real accounts: the directory is root's, mode 0755 (``docs/cluster.md``: "only the producer
writes"), and user ``nobody`` can read it. ``nobody`` opens the lock read-only and
``flock`` s it (``harness.services.pidfiles.lock_held``), as the review's attack did. A lock this
release creates is 0600: ``nobody`` cannot open it, and ``mark``, ``clear`` and a producer
pass land. A lock an earlier release made 0644, held by ``nobody``, is refused with who can
open it and the fix, the producer's pass fails (``--once`` exits 1, ``status`` says
``failing``), and the next write once it is free replaces it by one ``nobody`` cannot open.
Slurm is the fake of ``harness/services/fakeslurm.py``.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.commands import nvrx_seghealth
from harness.services.accounts import as_nobody, public_copy, require_root
from harness.services.fakeslurm import TASK1_DRAINED, FakeSlurm
from harness.services.pidfiles import lock_held
from nvrx_seghealth._decision.files import LOCK_NAME

#: Lock wait of the commands below: half of it (1 s), so a held lock fails fast.
FS_TIMEOUT = "2"


@pytest.fixture
def fake() -> Iterator[FakeSlurm]:
    require_root("needs root to act as user nobody")
    root = Path(tempfile.mkdtemp(prefix="nvrx-lock-"))  # not under pytest's 0700 tmp dir
    root.chmod(0o755)
    try:
        yield FakeSlurm(root)  # its shc: root's, mode 0755
    finally:
        shutil.rmtree(root)


def unit(fake: FakeSlurm, command: str, *extra: str) -> tuple[int, str]:
    """``command`` (``mark`` or ``clear``) of task 0: its exit code and stderr."""
    done = nvrx_seghealth(
        command,
        "--dir",
        str(fake.shc),
        "--job-id",
        "500",
        "--task-id",
        "0",
        "--fs-timeout",
        FS_TIMEOUT,
        *extra,
    )
    return done.returncode, done.stderr


def producer_state(fake: FakeSlurm) -> str:
    """The ``state`` token ``status --json`` gives the producer (it exits 1 unless ok)."""
    done = nvrx_seghealth("status", "--dir", str(fake.shc), "--json")
    [producer] = json.loads(done.stdout)["producers"]
    state = str(producer["state"])
    assert done.returncode == (0 if state == "ok" else 1), done.stderr
    return state


def test_an_account_that_can_only_read_the_directory_cannot_block_its_writes(fake):
    assert unit(fake, "mark", "--reason", "ops: bad psu") == (0, "")  # creates the lock
    lock = fake.shc / LOCK_NAME
    with lock_held(lock, nobody=True) as outcome:
        assert unit(fake, "clear") == (0, "")
        assert unit(fake, "mark", "--reason", "ops: bad psu again") == (0, "")
        done = fake.run("--once", "--fs-timeout", FS_TIMEOUT)
    assert done.returncode == 0, done.stderr
    assert fake.decision(1).read_text() == TASK1_DRAINED
    assert fake.decision(0).read_text() == "ops: bad psu again\n"
    assert producer_state(fake) == "ok"
    assert outcome == "EACCES" and stat.S_IMODE(lock.stat().st_mode) == 0o600


def test_a_lock_others_can_open_is_refused_while_held_and_replaced_once_free(fake):
    lock = fake.shc / LOCK_NAME
    os.close(os.open(lock, os.O_CREAT | os.O_WRONLY, 0o644))  # as an earlier release made it
    old = lock.stat().st_ino
    with lock_held(lock, nobody=True) as outcome:
        assert outcome == "locked"
        code, stderr = unit(fake, "mark", "--reason", "ops: bad psu")
        assert code == 1
        assert "every user can open it" in stderr and "Remove it" in stderr
        done = fake.run("--once", "--fs-timeout", FS_TIMEOUT)
        assert done.returncode == 1, done.stderr
        assert [e["event"] for e in fake.audit_events()] == ["write-failed"]
        assert producer_state(fake) == "failing"
    assert not fake.decision(0).exists() and not fake.decision(1).exists()

    assert unit(fake, "mark", "--reason", "ops: bad psu") == (0, "")
    assert lock.stat().st_ino != old and stat.S_IMODE(lock.stat().st_mode) == 0o600
    with lock_held(lock, nobody=True) as outcome:
        assert outcome == "EACCES"
        done = fake.run("--once", "--fs-timeout", FS_TIMEOUT)
    assert done.returncode == 0, done.stderr
    assert fake.decision(1).read_text() == TASK1_DRAINED
    assert producer_state(fake) == "ok"


def test_a_lock_a_writer_cannot_open_is_refused_with_whose_it_is_and_the_fix(fake):
    """The directory was 0755 when root's first write made the lock 0600, then opened to
    every account (1777): user nobody's ``mark`` says whose lock it is and what to do."""
    assert unit(fake, "mark", "--reason", "ops: bad psu") == (0, "")
    fake.shc.chmod(0o1777)
    lib = public_copy(str(fake.root))
    args = ["--dir", str(fake.shc), "--job-id", "500", "--task-id", "1", "--reason", "x"]
    done = as_nobody(lib, "mark", *args, env={"PATH": os.environ["PATH"]})
    assert done.returncode == 1
    lock = fake.shc / LOCK_NAME
    assert f"{lock} (owner uid 0, mode 0600) cannot be opened by this account" in done.stderr
    assert "remove it (as its owner or root)" in done.stderr
    assert not fake.decision(1).exists()
