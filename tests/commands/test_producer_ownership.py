"""Whose decision is it: ``publish-drained`` never destroys a decision that is not its own
(a ``mark`` landing between the producer's read of a decision and its write is the
publisher's test, ``tests/producer/test_publisher.py``):

* a decision the producer cannot read, for real: the producer runs as user ``nobody``
  and the decision belongs to root, mode 0600. It is never overwritten nor cleared;
* a state file that another account planted is not trusted: a producer running as
  root ignores its counts and replaces it; one running as ``nobody``, who could not
  replace it in a sticky directory, refuses to start and says why;
* an audit log that user ``nobody`` created, or a second name of another file, is
  refused: the producer does not start.

Slurm is the fake of ``harness/services/fakeslurm.py`` (shell scripts on PATH).
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from harness.services.accounts import NOBODY, SETPRIV_NOBODY, as_nobody, public_copy, require_root
from harness.services.fakeslurm import ALL_FINE, NODES, FakeSlurm, dump, planted


@pytest.fixture
def public():
    require_root("needs root to run the producer as user nobody")
    root = tempfile.mkdtemp(prefix="nvrx-ownership-")  # not under pytest's 0700 tmp dir
    os.chmod(root, 0o755)
    try:
        yield root
    finally:
        shutil.rmtree(root)


def test_a_decision_the_producer_cannot_read_is_never_overwritten_nor_cleared(public):
    lib = public_copy(public)
    root = Path(public) / "slurm"
    root.mkdir()
    fake = FakeSlurm(root)
    os.chmod(root, 0o777)  # for the audit log and the fake Slurm's argument records
    os.chmod(fake.shc, 0o777)  # everyone may write here (no sticky bit): only reading fails
    hidden = fake.decision(1)
    hidden.write_text("ops: bad psu, not yours\n")
    os.chmod(hidden, 0o600)
    args = [
        "publish-drained",
        "--dir",
        str(fake.shc),
        "--job-id",
        "500",
        "--producer-id",
        "robot",
        "--audit-log",
        str(fake.audit),
    ]
    env = {"PATH": fake.env["PATH"], "LANG": "C.UTF-8"}

    done = as_nobody(lib, *args, env=env)  # task 1's node is drained
    assert done.returncode == 0, done.stderr
    assert hidden.read_text() == "ops: bad psu, not yours\n"
    assert (os.stat(hidden).st_uid, os.stat(hidden).st_mode & 0o777) == (0, 0o600)
    warnings = [line for line in done.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 1 and f"{hidden} cannot be read (EACCES" in warnings[0]
    assert "someone else's decision and is left alone" in warnings[0]
    events = [json.loads(line) for line in fake.audit.read_text().splitlines()]
    assert [(e["event"], e["task_id"]) for e in events] == [("unreadable", "1")]
    assert "EACCES" in events[0]["error"]

    fake.answer("sinfo", NODES.replace("drng", "alloc"))  # all healthy again
    for _ in range(2):
        done = as_nobody(lib, *args, env=env)
        assert done.returncode == 0, done.stderr
        assert "warning" not in done.stderr  # warned once, at the first meeting
    assert hidden.read_text() == "ops: bad psu, not yours\n"
    assert len(fake.audit.read_text().splitlines()) == 1


def test_in_a_sticky_directory_another_accounts_decision_cannot_be_replaced(public):
    lib = public_copy(public)
    shc = os.path.join(public, "shc")
    os.mkdir(shc)
    os.chmod(shc, 0o1777)
    path = os.path.join(shc, "segment_health_check.12.3")
    with open(path, "w") as handle:
        handle.write("root's decision\n")
    done = as_nobody(
        lib,
        "clear",
        "--dir",
        shc,
        "--job-id",
        "12",
        "--task-id",
        "3",
        env={"PATH": os.environ["PATH"]},
    )
    assert done.returncode == 1
    assert (
        f"{path} belongs to another account (owner root, mode 0644) and {shc} has the "
        "sticky bit: only that account (or root) can replace or remove it" in done.stderr
    )
    assert Path(path).read_text() == "root's decision\n"
    done = as_nobody(lib, "status", "--dir", shc, env={"PATH": os.environ["PATH"]})
    assert done.returncode == 0 and "warning" not in done.stderr  # 1777 is a sound setup


# --- a state file planted by another account ------------------------------------------------


def _planted_state(path, producer_id, uid):
    """Plant, as account ``uid``, a valid state file saying node n2 (task 0's) is
    unavailable for 9999 more clean passes."""
    path.write_bytes(dump(planted(producer_id, "500")))
    os.chown(path, uid, -1)
    path.chmod(0o644)


def test_a_state_file_planted_by_another_account_is_not_trusted_by_root(public):
    fake = FakeSlurm(Path(public))
    fake.answer("sinfo", ALL_FINE)
    state = fake.shc / ".publish-drained.t1.500.json"
    _planted_state(state, "t1", NOBODY)
    done = fake.run("--once")
    assert done.returncode == 0, done.stderr
    [warning] = [line for line in done.stderr.splitlines() if " warning: " in line]
    assert str(state) in warning and f"uid {NOBODY}" in warning
    assert fake.files() == {}  # nothing published from the planted counts
    assert os.stat(state).st_uid == 0  # replaced by root's own state


@pytest.mark.parametrize("planted", ["root's counts", "daemon's {}", "a FIFO"])
def test_a_producer_running_as_nobody_refuses_a_state_file_name_another_account_took(
    public, planted
):
    """The default producer id is predictable: another account takes the name of the
    state file in a sticky directory before the first pass of a producer running as
    nobody. Its counts could never be kept (each --once pass would count anew, and a
    ``down`` node, 2 passes, would never count): it refuses to start and says why."""
    lib = public_copy(public)
    root = Path(public) / "slurm"
    root.mkdir()
    fake = FakeSlurm(root)
    fake.answer("sinfo", NODES.replace("n3|drng|", "n3|down|"))  # task 1's node is down
    os.chmod(root, 0o777)  # the fake Slurm's argument records
    os.chmod(fake.shc, 0o1777)
    producer_id = "nobody-drain+down+fail+no_respond"
    state = fake.shc / f".publish-drained.{producer_id}.500.json"
    if planted == "root's counts":
        _planted_state(state, producer_id, 0)
    elif planted == "daemon's {}":
        state.write_text("{}")
        os.chown(state, pwd.getpwnam("daemon").pw_uid, -1)
    else:
        os.mkfifo(state)
    before = state.lstat()
    args = ["publish-drained", "--dir", str(fake.shc), "--job-id", "500"]
    env = {"PATH": fake.env["PATH"], "LANG": "C.UTF-8"}
    for extra in (["--once"], ["--interval", "600"]):
        done = as_nobody(lib, *args, *extra, env=env)
        assert done.returncode == 2, done.stderr
        assert done.stderr.startswith(
            f"nvrx-seghealth publish-drained: error: the state file {state} is not this account's ("
        )
        assert "decision directory writable only by the producer's account" in done.stderr
        assert fake.calls("squeue") == 0  # no pass ran
        assert fake.files() == {}
    assert (state.lstat().st_ino, state.lstat().st_uid) == (before.st_ino, before.st_uid)


# --- an audit log that is not the producer's own ----------------------------------------------


@pytest.mark.parametrize("planted", ["nobody's file", "a second name of root's file"])
def test_an_audit_log_that_is_not_the_producers_own_is_refused(public, planted):
    """The audit log's folder is 1777: user nobody creates the log first (mode 0666,
    content of its choosing), or the name is a hard link to a file of root's. Root's
    producer refuses to start (exit 2): it would append its trail where another account
    rewrites it, or to a file it never named."""
    fake = FakeSlurm(Path(public))
    folder = Path(public) / "aud"
    folder.mkdir()
    folder.chmod(0o1777)
    fake.audit = folder / "shc-audit.jsonl"
    if planted == "nobody's file":
        plant = 'umask 0; echo \'{"forged": true}\' > "$1"'
        subprocess.run([*SETPRIV_NOBODY, "sh", "-c", plant, "-", str(fake.audit)], check=True)
        why = f"it belongs to uid {NOBODY}"
    else:
        mine = Path(public) / "root-only.jsonl"
        mine.write_text('{"forged": true}\n')
        os.link(mine, fake.audit)
        why = "it has 2 names (hard links)"
    done = fake.run("--once")
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(
        f"nvrx-seghealth publish-drained: error: --audit-log {fake.audit} is not this "
        f"account's own file ({why})"
    )
    assert fake.audit.read_text() == '{"forged": true}\n'
    assert fake.calls("squeue") == 0 and fake.files() == {}  # no pass ran
