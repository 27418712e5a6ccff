"""``publish-drained --pid-file``: claimed complete, locked and 0600, held by its lock for
the claimer's life, refused while a live producer holds it, taken over when stale (whatever
process its pid names now, and whoever locks an earlier release's 0644 file), never
trusted when it is not a regular file of this account in a folder only this account can
write, reached only through root's or this account's symlinks, and released only while it
is the file claimed.

Every other process here is real: a producer is ``publish-drained`` on the fake Slurm, a
lock holder a Python child that ``flock``s the file (as this account or user nobody), a
victim a ``sleep``, the lock test util-linux ``flock(1)`` (as a sender makes it).
"""

from __future__ import annotations

import logging
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.services.accounts import NOBODY, SETPRIV_NOBODY, public_copy, require_root
from harness.services.fakeslurm import FakeSlurm
from harness.services.pidfiles import is_locked, lock_held, producer_holding, victim
from nvrx_seghealth import ConfigurationError
from nvrx_seghealth._producer.pidfile import PidFile


def _dead_pid() -> int:
    """The pid of a process that has ended and been reaped."""
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A folder only this account can write (pytest's own is 0700 already)."""
    path = tmp_path / "run"
    path.mkdir(mode=0o755)
    return path


@pytest.fixture
def slurm(tmp_path: Path) -> FakeSlurm:
    """The fake Slurm a real producer runs on."""
    (tmp_path / "slurm").mkdir()
    return FakeSlurm(tmp_path / "slurm")


def test_claim_writes_this_pid_locked_and_release_removes_it(folder):
    path = folder / "p.pid"
    pid_file = PidFile(str(path))
    pid_file.claim()
    assert path.read_text() == f"{os.getpid()}\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # no other account can open it, nor lock it
    assert is_locked(path)
    assert sorted(p.name for p in folder.iterdir()) == ["p.pid"]  # no temporary left
    assert pid_file.problem() is None
    pid_file.release()
    assert list(folder.iterdir()) == []


@pytest.mark.parametrize("mode", [0o600, 0o644], ids=["claimed", "an-earlier-release"])
def test_a_running_producers_file_is_refused_and_kept(folder, slurm, mode):
    path = folder / "p.pid"
    with producer_holding(path, slurm) as producer:
        path.chmod(mode)
        with pytest.raises(
            ConfigurationError, match=f"held by a running producer \\(pid {producer.pid}\\)"
        ) as refused:
            PidFile(str(path)).claim()
        assert refused.value.setting == "--pid-file"
        assert path.read_text() == f"{producer.pid}\n" and producer.poll() is None
    assert sorted(p.name for p in path.parent.iterdir()) == ["p.pid"]


def test_a_locked_file_whose_pid_runs_no_producer_is_refused_and_kept(folder):
    """Only root or this account can open a 0600 file: its holder is one of theirs (a
    producer in another pid namespace?), so it stays, and the message says so."""
    path = folder / "p.pid"
    with victim() as other:
        path.write_text(f"{other.pid}\n")
        path.chmod(0o600)
        refused = pytest.raises(ConfigurationError, match=f"its pid {other.pid} is no publish")
        with lock_held(path), refused:
            PidFile(str(path)).claim()
        assert path.read_text() == f"{other.pid}\n"


def test_a_stale_file_is_taken_over_whatever_process_its_pid_names_now(folder):
    """A producer killed by SIGKILL leaves its file; its pid now belongs to an unrelated
    process. The lock is free, so the file is stale: taken over, and the process left be."""
    path = folder / "p.pid"
    with victim() as other:
        path.write_text(f"{other.pid}\n")
        pid_file = PidFile(str(path))
        pid_file.claim()
        assert path.read_text() == f"{os.getpid()}\n" and is_locked(path)
        assert other.poll() is None
        pid_file.release()


def test_a_dead_holder_is_taken_over(folder):
    path = folder / "p.pid"
    path.write_text(f"{_dead_pid()}\n")
    PidFile(str(path)).claim()
    assert path.read_text() == f"{os.getpid()}\n"


@pytest.mark.parametrize("content", ["", "not a pid\n", "0\n", "-5\n", "007\n"])
def test_a_file_without_a_pid_is_not_a_pid_file_and_is_left_alone(folder, content):
    path = folder / "notes.txt"
    path.write_text(content)
    with pytest.raises(ConfigurationError, match="holds no pid"):
        PidFile(str(path)).claim()
    assert path.read_text() == content


@pytest.mark.parametrize("kind", ["symbolic link", "FIFO", "character device", "directory"])
def test_what_is_not_a_regular_file_is_refused_at_once_and_left(folder, tmp_path, kind):
    """Nothing is followed, opened or waited on: a FIFO would block an open for ever."""
    path = folder / "p.pid"
    target = tmp_path / "target"
    target.write_text(f"{_dead_pid()}\n")
    if kind == "symbolic link":
        path.symlink_to(target)
    elif kind == "FIFO":
        os.mkfifo(path)
    elif kind == "character device":
        require_root("mknod of a device node needs root")
        os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 3))  # as /dev/null
    else:
        path.mkdir()
    with pytest.raises(ConfigurationError, match=f"is a {kind}, not a pid file: remove it"):
        PidFile(str(path)).claim()
    assert os.path.lexists(path) and target.read_text().endswith("\n")
    assert sorted(p.name for p in folder.iterdir()) == ["p.pid"]


def test_another_accounts_file_is_refused_even_when_stale(folder):
    require_root("chown to user nobody needs root")
    path = folder / "p.pid"
    path.write_text(f"{_dead_pid()}\n")
    os.chown(path, NOBODY, -1)
    with pytest.raises(ConfigurationError, match=f"belongs to another account \\(uid {NOBODY}\\)"):
        PidFile(str(path)).claim()
    assert path.stat().st_uid == NOBODY


@pytest.mark.parametrize("mode", [0o1777, 0o777, 0o775])
def test_a_folder_others_can_write_is_refused(tmp_path, mode):
    """Whoever can write in the folder can plant the file a root-run trigger trusts."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(mode)
    with pytest.raises(ConfigurationError, match="use a folder that only this account can write"):
        PidFile(str(shared / "p.pid")).claim()
    assert list(shared.iterdir()) == []


def test_a_folder_of_another_account_is_refused(tmp_path):
    require_root("chown to user nobody needs root")
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, NOBODY, -1)
    with pytest.raises(ConfigurationError, match=f"its owner \\(uid {NOBODY}\\)"):
        PidFile(str(theirs / "p.pid")).claim()


def test_release_leaves_a_file_that_is_not_the_one_claimed(folder):
    """The file is compared by inode, never read: one rewritten in its place, even with
    this very pid, is someone else's now and stays."""
    path = folder / "p.pid"
    pid_file = PidFile(str(path))
    pid_file.claim()
    path.unlink()
    path.write_text(f"{os.getpid()}\n")  # a new file, as an operator would write it
    assert "now holds another file" in (pid_file.problem() or "")
    pid_file.release()
    assert path.read_text() == f"{os.getpid()}\n"
    assert not is_locked(path)  # the claimed file's lock went with the release
    path.unlink()
    pid_file.release()  # released: nothing to do, no error


def test_a_removed_file_is_a_problem_and_release_is_quiet(folder):
    path = folder / "p.pid"
    pid_file = PidFile(str(path))
    pid_file.claim()
    path.unlink()
    assert "was removed" in (pid_file.problem() or "")
    pid_file.release()
    assert list(folder.iterdir()) == []


def test_a_path_that_cannot_be_written_says_so(tmp_path):
    with pytest.raises(ConfigurationError, match="cannot be written: its folder .* create it"):
        PidFile(str(tmp_path / "no" / "p.pid")).claim()


@pytest.fixture
def public() -> Iterator[Path]:
    """A 0755 folder of root's outside pytest's 0700 tree, so that user nobody reaches it."""
    require_root("needs root to act as user nobody")
    root = Path(tempfile.mkdtemp(prefix="nvrx-pidfile-"))
    root.chmod(0o755)
    try:
        yield root
    finally:
        shutil.rmtree(root)


def test_a_symlink_another_account_planted_as_the_folder_is_refused(public):
    """The review's case: ``alice`` is user nobody's folder, and nobody makes ``alice/run``
    a symlink to a folder only root writes. Root's producer must not create (and at exit
    remove) its file in the folder nobody chose."""
    alice, root_only = public / "alice", public / "root-only"
    alice.mkdir()
    os.chown(alice, NOBODY, -1)
    root_only.mkdir(mode=0o755)
    link = ["ln", "-s", str(root_only), str(alice / "run")]
    subprocess.run([*SETPRIV_NOBODY, *link], check=True)
    with pytest.raises(ConfigurationError, match=f"is below {alice} .* its owner \\(nobody\\)"):
        PidFile(str(alice / "run" / "123.pid")).claim()
    assert list(root_only.iterdir()) == []


@pytest.mark.parametrize("above", ["nobody's", "0777", "0775"])
def test_a_folder_below_one_another_account_can_change_is_refused(public, above):
    """Root's own 0755 folder, in a folder that user nobody owns or that others can write
    without the sticky bit: it could be renamed away and another put in its place."""
    parent = public / "parent"
    parent.mkdir()
    if above == "nobody's":
        os.chown(parent, NOBODY, -1)
    else:
        parent.chmod(int(above, 8))
    (parent / "run").mkdir(mode=0o755)
    with pytest.raises(ConfigurationError, match=f"is below {parent} .* can change"):
        PidFile(str(parent / "run" / "123.pid")).claim()
    assert list((parent / "run").iterdir()) == []
    parent.chmod(0o1777)  # sticky: no other account can rename root's folder
    os.chown(parent, 0, -1)
    pid_file = PidFile(str(parent / "run" / "123.pid"))
    pid_file.claim()
    pid_file.release()


def test_release_removes_the_file_in_the_folder_claimed_not_by_name(folder):
    """The folder is renamed and another put in its place, with a file of the same name:
    release removes the claimed file, where it now is, and leaves the other."""
    path = folder / "p.pid"
    pid_file = PidFile(str(path))
    pid_file.claim()
    moved = folder.with_name("run.old")
    folder.rename(moved)
    folder.mkdir(mode=0o755)
    path.write_text(f"{os.getpid()}\n")
    pid_file.release()
    assert list(moved.iterdir()) == [] and path.read_text() == f"{os.getpid()}\n"


def test_another_account_cannot_hold_the_file_so_a_killed_producer_restarts(public, slurm):
    """The producer dies by SIGKILL, and user nobody, who can reach its folder, tries to
    lock the file it left: it cannot open it, so the restart takes the file over."""
    path = public / "run" / "500.pid"
    path.parent.mkdir(mode=0o755)
    with producer_holding(path, slurm) as killed:
        pass  # SIGKILLed at the end of the block
    assert path.read_text() == f"{killed.pid}\n" and not is_locked(path)
    with lock_held(path, nobody=True) as outcome:
        pid_file = PidFile(str(path))
        pid_file.claim()
        assert outcome == "EACCES"
    assert path.read_text() == f"{os.getpid()}\n" and is_locked(path)
    pid_file.release()


@pytest.mark.parametrize(
    "named,lock", [("ended", "flock"), ("unrelated", "flock"), ("ended", "record")]
)
def test_an_earlier_releases_file_that_another_account_holds_is_taken_over(
    public, named, lock, caplog
):
    """An earlier release made the file 0644: after a SIGKILL, user nobody holds its
    ``flock``, or a POSIX record lock that claimers take. Neither is a producer's, so the
    file is replaced by a 0600 one, with a WARNING."""
    path = public / "run" / "500.pid"
    path.parent.mkdir(mode=0o755)
    with victim() as other:
        path.write_text(f"{_dead_pid() if named == 'ended' else other.pid}\n")
        path.chmod(0o644)
        held = lock_held(path, nobody=True, record=lock == "record")
        with held as outcome, caplog.at_level(logging.WARNING):
            assert outcome == "locked"
            pid_file = PidFile(str(path))
            pid_file.claim()
        assert other.poll() is None
    assert path.read_text() == f"{os.getpid()}\n" and is_locked(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [r.levelno for r in caplog.records if r.name == "nvrx_seghealth._producer.pidfile"] == [
        logging.WARNING
    ]
    pid_file.release()


def test_a_record_lock_on_a_0600_file_is_another_claimers_and_is_refused(folder):
    """Only root or this account can lock a 0600 file: a record lock on it is another
    producer's taking it over, never skipped."""
    path = folder / "p.pid"
    path.write_text(f"{_dead_pid()}\n")
    path.chmod(0o600)
    with lock_held(path, record=True), pytest.raises(ConfigurationError, match="being taken"):
        PidFile(str(path)).claim()
    assert path.read_text().endswith("\n") and not is_locked(path)


def test_a_symlink_of_another_account_higher_up_in_a_sticky_folder_is_refused(public):
    """User nobody's symlink in a sticky folder (as in /tmp), pointing to a folder only
    root writes, one level above the file's folder: root's producer never creates its
    file where nobody chose."""
    sticky, root_only = public / "sticky", public / "root-only"
    sticky.mkdir()
    sticky.chmod(0o1777)
    (root_only / "run").mkdir(mode=0o755, parents=True)
    root_only.chmod(0o755)
    link = ["ln", "-s", str(root_only), str(sticky / "link")]
    subprocess.run([*SETPRIV_NOBODY, *link], check=True)
    with pytest.raises(
        ConfigurationError, match=f"reached through {sticky / 'link'}, a symbolic link of uid"
    ):
        PidFile(str(sticky / "link" / "run" / "123.pid")).claim()
    assert list((root_only / "run").iterdir()) == []


@pytest.mark.parametrize("where", ["folder", "above", "relative"])
def test_a_symlink_of_this_account_is_followed(folder, tmp_path, where):
    """As /var/run is root's link to /run: the file is made in the folder it names."""
    if where == "folder":
        (tmp_path / "alias").symlink_to(folder)
        path = tmp_path / "alias" / "p.pid"
    elif where == "above":
        (tmp_path / "up").mkdir()
        (tmp_path / "up" / "alias").symlink_to(tmp_path)
        path = tmp_path / "up" / "alias" / "run" / "p.pid"
    else:
        (tmp_path / "alias").symlink_to(os.path.join("..", tmp_path.name, "run"))
        path = tmp_path / "alias" / "p.pid"
    pid_file = PidFile(str(path))
    pid_file.claim()
    assert (folder / "p.pid").read_text() == f"{os.getpid()}\n"
    pid_file.release()
    assert list(folder.iterdir()) == []


def test_a_symlink_loop_on_the_way_says_the_folder_cannot_be_used(tmp_path):
    (tmp_path / "loop").symlink_to("loop")
    with pytest.raises(ConfigurationError, match="its folder .* cannot be used"):
        PidFile(str(tmp_path / "loop" / "p.pid")).claim()


def test_a_folder_on_the_way_needs_no_right_to_read_it(public):
    """A 0711 folder (as some home folders are) lets user nobody search it, not read it:
    the walk opens each folder as a path only, so nobody's producer gets its file."""
    lib = public_copy(str(public))
    closed = public / "closed"
    closed.mkdir()
    closed.chmod(0o711)
    run = closed / "run"
    run.mkdir(mode=0o755)
    os.chown(run, NOBODY, -1)
    claim = (
        "import sys; from nvrx_seghealth._producer.pidfile import PidFile; "
        "pid_file = PidFile(sys.argv[1]); pid_file.claim(); pid_file.release(); print('claimed')"
    )
    python = os.path.realpath(sys.executable)
    done = subprocess.run(
        [*SETPRIV_NOBODY, python, "-s", "-c", claim, str(run / "p.pid")],
        env={"PYTHONPATH": lib},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stdout) == (0, "claimed\n"), done.stderr
