"""``examples/publish-drained-now.sh``: the program a permanent Slurm trigger runs as root
or SlurmUser. It wakes a live producer, and signals nothing else: not the process that
took a killed producer's pid, not its own process group for a pid of 0, not a process of
another account, not a process a pid of another pid namespace names, nor anything
through a symlink or a FIFO; and it says why, with the exit status its header documents.

The producer is the real ``nvrx-seghealth publish-drained --interval 600 --pid-file``
against the fake Slurm of ``harness/services/fakeslurm.py``; victims are real
``sleep`` processes.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.commands import COMMAND
from harness.services.accounts import NOBODY
from harness.services.fakeslurm import FakeSlurm
from harness.services.pidfiles import is_locked, lock_held, producer_holding, victim

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "publish-drained-now.sh"
#: The script's exit statuses (its header).
SENT, NO_PRODUCER, USAGE, REFUSED = 0, 1, 2, 3


def send(pid_file: Path | str) -> subprocess.CompletedProcess[str]:
    """Run the script as a trigger does: in a session of its own, nothing on stdin.
    A script that signalled its own process group would die of it (return code -10)."""
    return subprocess.run(
        [str(SCRIPT), str(pid_file), "n1,n2"],  # the trigger's last argument: the nodes
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        check=False,
    )


@dataclass(frozen=True)
class Producer:
    """A running ``publish-drained --interval 600 --pid-file`` on ``slurm``, after its
    first pass (:func:`~harness.services.pidfiles.producer_holding`)."""

    slurm: FakeSlurm
    pid_file: Path
    process: subprocess.Popen[str]

    def next_pass(self) -> str:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if "pass done" in line:
                return line
        raise AssertionError(f"the producer ended: {self.process.communicate()[1]}")

    def stop(self) -> None:
        """SIGKILL it, as the OOM killer does, and reap it."""
        self.process.kill()
        self.process.wait()


@contextlib.contextmanager
def running(root: Path) -> Iterator[Producer]:
    """A :class:`Producer` on a fake Slurm under ``root``; SIGKILLed when the block ends."""
    slurm = FakeSlurm(root)
    pid_file = root / "run" / "producer.pid"
    pid_file.parent.mkdir(mode=0o755)
    with producer_holding(pid_file, slurm) as process:
        yield Producer(slurm, pid_file, process)


@pytest.fixture
def producer(tmp_path):
    with running(tmp_path) as started:
        yield started


def test_a_live_producer_is_woken_and_runs_a_pass_at_once(producer):
    assert is_locked(producer.pid_file)
    done = send(producer.pid_file)
    assert (done.returncode, done.stderr) == (SENT, "")
    producer.next_pass()  # the sleep of 600 s ended at once
    assert producer.slurm.calls("squeue") == 2


def test_after_sigkill_the_process_that_got_its_pid_is_not_signalled(producer):
    """The producer is SIGKILLed (its file stays, the kernel drops its lock), and its pid
    is reused by an unrelated process: the file names that process now."""
    producer.stop()
    assert producer.pid_file.read_text() == f"{producer.process.pid}\n"
    with victim() as other:
        producer.pid_file.write_text(f"{other.pid}\n")  # the reuse, as the file sees it
        done = send(producer.pid_file)
        assert done.returncode == NO_PRODUCER, done.stderr
        assert "is stale: no process holds its lock" in done.stderr
        assert other.poll() is None


@pytest.mark.parametrize("locked", [False, True])
def test_a_pid_of_0_signals_nothing_not_even_the_scripts_own_group(tmp_path, locked):
    path = tmp_path / "p.pid"
    path.write_text("0\n")
    if not locked:
        done = send(path)
        assert done.returncode == NO_PRODUCER, done.stderr
        return
    with lock_held(path):
        done = send(path)
    assert done.returncode == REFUSED, done.stderr
    assert "is locked but holds no pid" in done.stderr


@pytest.mark.parametrize("content", ["-1\n", "12x\n", "007\n", "", "99999999999\n"])
def test_a_locked_file_without_a_pid_is_refused(tmp_path, content):
    path = tmp_path / "p.pid"
    path.write_text(content)
    with lock_held(path):
        done = send(path)
    assert done.returncode == REFUSED, done.stderr
    assert "holds no pid" in done.stderr


def test_a_locked_file_naming_a_process_that_is_not_a_producer_is_refused(tmp_path):
    """A live lock vouches for the pid only if the file is a producer's: another program
    locking a file that names a victim does not get the victim signalled."""
    path = tmp_path / "p.pid"
    with victim() as other:
        path.write_text(f"{other.pid}\n")
        with lock_held(path):
            done = send(path)
        assert done.returncode == REFUSED, done.stderr
        assert f"names process {other.pid}, which is not nvrx-seghealth publish-drained" in (
            done.stderr
        )
        assert other.poll() is None


def test_a_file_of_another_account_naming_a_producer_is_refused(producer, tmp_path):
    """A file that is not the producer's account's, locked by its owner, names the
    producer: signalled would be a process of an account the file's owner is not."""
    path = tmp_path / "theirs.pid"
    path.write_text(f"{producer.process.pid}\n")
    os.chown(path, NOBODY, -1)
    with lock_held(path):
        done = send(path)
    assert done.returncode == REFUSED, done.stderr
    assert f"not of the file owner (uid {NOBODY})" in done.stderr
    assert producer.slurm.calls("squeue") == 1


@pytest.mark.parametrize("kind", ["symbolic link", "FIFO", "directory"])
def test_what_is_not_a_regular_file_is_refused_without_following_or_waiting(producer, kind):
    """A symlink to the live producer's pid file is not followed; a FIFO is not opened."""
    path = producer.slurm.root / "planted.pid"
    if kind == "symbolic link":
        path.symlink_to(producer.pid_file)
    elif kind == "FIFO":
        os.mkfifo(path)
    else:
        path.mkdir()
    done = send(path)
    assert done.returncode == REFUSED, done.stderr
    assert f"is a {kind}, not a pid file" in done.stderr
    assert producer.slurm.calls("squeue") == 1


def test_a_missing_file_means_no_producer_and_no_argument_is_a_usage_error(tmp_path):
    done = send(tmp_path / "none.pid")
    assert done.returncode == NO_PRODUCER and "does not exist" in done.stderr
    usage = subprocess.run([str(SCRIPT)], capture_output=True, text=True, timeout=60, check=False)
    assert usage.returncode == USAGE and "usage:" in usage.stderr


# --- pid namespaces ------------------------------------------------------------------------


def _namespaces_or_skip() -> None:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("a pid namespace of its own needs root and util-linux unshare")


def test_a_producer_in_a_container_whose_pid_names_another_producer_here_is_refused(tmp_path):
    """A producer in its own pid namespace (a container) writes the pid it has there. Made
    here to be the host pid of another producer of the same account: the file's lock is
    held, and the pid names a live publish-drained of the file's owner, but not the
    lock's holder. That other producer is not signalled."""
    _namespaces_or_skip()
    (tmp_path / "host").mkdir()
    (tmp_path / "container").mkdir()
    with running(tmp_path / "host") as other:
        slurm = FakeSlurm(tmp_path / "container")
        pid_file = slurm.root / "container.pid"
        argv = [*COMMAND, *slurm.args("--interval", "600", "--pid-file", str(pid_file))]
        # The namespace's next pid is the other producer's; `&` forks the producer.
        inside = (
            f"echo {other.process.pid - 1} > /proc/sys/kernel/ns_last_pid || exit 1; "
            f"{shlex.join(argv)} & wait"
        )
        contained = subprocess.Popen(
            ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child", "sh", "-c", inside],
            env={**os.environ, **slurm.env},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert contained.stdout is not None
            assert any("pass done" in line for line in contained.stdout)  # its first pass
            assert pid_file.read_text() == f"{other.process.pid}\n"
            done = send(pid_file)
            assert done.returncode == REFUSED, done.stderr
            assert "holds its lock" in done.stderr
            assert other.slurm.calls("squeue") == 1
        finally:
            contained.kill()
            contained.communicate()


def test_a_trigger_in_another_pid_namespace_refuses_a_pid_it_cannot_see(producer):
    """Run in a pid namespace of its own, the script cannot see the producer whose lock
    is held: refused (exit 3), not taken for a producer that has ended (exit 1)."""
    _namespaces_or_skip()
    done = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", str(SCRIPT), str(producer.pid_file)],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert done.returncode == REFUSED, done.stderr
    assert producer.slurm.calls("squeue") == 1
