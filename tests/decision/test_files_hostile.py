"""Decision files where other accounts write, and on a full filesystem.

Everything here is real: root and user ``nobody`` (``setpriv``), directories of mode
0777 and 1777, planted symlinks, FIFOs, directories and device nodes, and a 16 KiB tmpfs.
Writers run ``_decisionfs.py`` as the helper process does (``python -I -S``, a copy of the
file where ``nobody`` can read it), each in a subprocess with a generous timeout, so a
write that hangs fails its test instead of the suite.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from harness.services.accounts import NOBODY, SETPRIV_NOBODY, require_root
from nvrx_seghealth._decision import files as decisionfs
from nvrx_seghealth._decision.files import LOCK_NAME, Current

#: Seconds a write may take before its test fails: 6 x the writer's lock wait (5 s).
HANG = 30

_WRITE = """
import json, sys
sys.path.insert(0, sys.argv[1])
import _decisionfs as decisionfs
op, path = sys.argv[2:]
try:
    if op == "replace":
        warnings = decisionfs.replace(path, b"x\\n", lock_wait=5).warnings
    else:
        warnings = decisionfs.append_text(path, "line\\n") or []
    print(json.dumps({"written": True, **({"warnings": warnings} if warnings else {})}))
except OSError as error:
    print(json.dumps({"step": getattr(error, "step", None), "errno": error.errno}))
"""


@pytest.fixture
def public():
    """A 0755 directory outside pytest's 0700 tree, with a copy of the module in it."""
    require_root("needs root: to act as user nobody, to plant device nodes, to mount")
    root = Path(tempfile.mkdtemp(prefix="nvrx-hostile-"))
    root.chmod(0o755)
    (root / "lib").mkdir(mode=0o755)
    shutil.copy(decisionfs.__file__, root / "lib" / "_decisionfs.py")
    try:
        yield root
    finally:
        shutil.rmtree(root)


def as_user(uid, *command):
    """``command`` as root (uid 0) or as user nobody."""
    if uid == NOBODY:
        command = (*SETPRIV_NOBODY, *command)
    return subprocess.run(
        command, capture_output=True, text=True, timeout=HANG, stdin=subprocess.DEVNULL, check=True
    )


def write_as(uid, public, op, path):
    """Run ``op`` (``replace`` or ``append``) of ``path`` as ``uid``; its outcome."""
    python = os.path.realpath(sys.executable)
    done = as_user(uid, python, "-I", "-S", "-c", _WRITE, str(public / "lib"), op, str(path))
    return json.loads(done.stdout)


def shared(public, mode):
    """The decision directory: writable by every account, sticky (1777) or not (0777)."""
    directory = public / f"shared{mode:o}"
    directory.mkdir()
    directory.chmod(mode)
    return directory


def plant(kind, where, owner, public):
    """Put a ``kind`` object at ``where``, owned by ``owner`` (the other account)."""
    if kind == "symlink":  # to a file that does not exist, where only root can write
        closed = public / "root-only"
        closed.mkdir(mode=0o700, exist_ok=True)
        os.symlink(closed / "nologin", where)
    elif kind == "fifo":
        os.mkfifo(where, 0o644)
    elif kind == "directory":
        os.mkdir(where, 0o755)
    else:
        os.mknod(where, 0o644 | stat.S_IFCHR, os.makedev(1, 3))  # as /dev/null
    os.lchown(where, owner, owner)


WRITERS = pytest.mark.parametrize("writer", [0, NOBODY], ids=["root", "nobody"])
MODES = pytest.mark.parametrize("mode", [0o777, 0o1777], ids=["0777", "1777"])


@WRITERS
@MODES
@pytest.mark.parametrize("kind", ["symlink", "fifo", "directory", "device"])
def test_a_planted_lock_is_refused_at_once_and_nothing_is_written(public, writer, mode, kind):
    directory = shared(public, mode)
    plant(kind, directory / LOCK_NAME, NOBODY if writer == 0 else 0, public)
    decision = directory / "segment_health_check.9.1"
    outcome = write_as(writer, public, "replace", decision)
    code = errno.ELOOP if kind == "symlink" else errno.EINVAL
    assert outcome == {"step": "lock", "errno": code}
    assert sorted(os.listdir(directory)) == [LOCK_NAME]  # no decision, no temporary file
    assert not (public / "root-only" / "nologin").exists()


NOGROUP = 65534  # user nobody's group under setpriv --regid=nogroup


@pytest.mark.parametrize(
    "mode,lock_mode",
    [(0o755, 0o600), (0o2770, 0o660), (0o770, 0o660), (0o1777, 0o644)],
    ids=["0755", "2770", "0770", "1777"],
)
def test_a_new_lock_can_be_opened_only_by_the_directorys_writers(public, mode, lock_mode):
    """Whatever the umask: only the owner writes (0755), the group writes (the lock takes
    the directory's group, also without the set-group-ID bit), or every account does."""
    for umask in (0o002, 0o077):
        directory = public / f"shared{mode:o}-{umask:o}"
        directory.mkdir()
        os.chown(directory, -1, NOGROUP)
        directory.chmod(mode)
        before = os.umask(umask)
        try:
            decisionfs.replace(str(directory / "segment_health_check.9.1"), b"x\n")
        finally:
            os.umask(before)
        st = (directory / LOCK_NAME).stat()
        group = NOGROUP if lock_mode == 0o660 else 0
        assert (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid) == (lock_mode, 0, group)
    if mode != 0o755:  # user nobody writes too (in 2770 and 0770 as a member of nogroup)
        assert write_as(NOBODY, public, "replace", directory / "segment_health_check.9.2") == {
            "written": True
        }


def test_a_lock_others_can_open_is_replaced_and_its_old_file_blocks_no_one(public):
    """A lock made 0644 by an earlier release, opened by another process before this
    release's first write replaced it: that process can lock the old file, and writers
    no longer take it."""
    directory = shared(public, 0o755)
    lock = directory / LOCK_NAME
    os.close(os.open(lock, os.O_CREAT | os.O_WRONLY, 0o644))
    kept = os.open(lock, os.O_RDONLY)  # opened before the replacement, as an attacker can
    try:
        decisionfs.replace(str(directory / "segment_health_check.9.1"), b"x\n")
        st = lock.stat()
        assert stat.S_IMODE(st.st_mode) == 0o600 and st.st_ino != os.fstat(kept).st_ino
        fcntl.flock(kept, fcntl.LOCK_EX | fcntl.LOCK_NB)
        result = decisionfs.replace(
            str(directory / "segment_health_check.9.1"), b"y\n", lock_wait=1
        )
        assert (result.status, result.warnings) == ("done", [])
    finally:
        os.close(kept)
    assert sorted(os.listdir(directory)) == [LOCK_NAME, "segment_health_check.9.1"]


def test_a_lock_others_can_open_that_cannot_be_replaced_is_used_with_a_warning(public):
    """A group's sticky directory (3775, group nogroup) that others can search, and a lock
    of root's, mode 0644: every user can open it. User nobody, a member of the group,
    cannot replace root's file there: its write lands, with a warning that says so."""
    directory = public / "group"
    directory.mkdir()
    os.chown(directory, -1, NOGROUP)
    directory.chmod(0o3775)
    lock = directory / LOCK_NAME
    os.close(os.open(lock, os.O_CREAT | os.O_WRONLY, 0o644))
    before = lock.stat().st_ino
    outcome = write_as(NOBODY, public, "replace", directory / "segment_health_check.9.1")
    [warning] = outcome.pop("warnings")
    assert outcome == {"written": True} and lock.stat().st_ino == before
    assert f"{lock} stays: every user can open it" in warning
    assert "cannot be replaced (EPERM" in warning and "remove it as its owner or root" in warning


def test_a_lock_a_writer_cannot_open_is_refused_with_what_to_do(public):
    """A 1777 directory whose lock root made 0600 (e.g. while the directory was 0755):
    user nobody may write there but cannot lock: refused (the message: test_lock_readers)."""
    directory = shared(public, 0o1777)
    lock = directory / LOCK_NAME
    os.close(os.open(lock, os.O_CREAT | os.O_WRONLY, 0o600))
    decision = directory / "segment_health_check.9.1"
    assert write_as(NOBODY, public, "replace", decision) == {"step": "lock", "errno": errno.EPERM}
    assert not decision.exists()


def _producers_directory(public):
    """A 0755 decision directory of the producer's account (here user nobody's)."""
    directory = public / "producer"
    directory.mkdir(mode=0o755)
    os.chown(directory, NOBODY, NOGROUP)
    return directory


@pytest.mark.parametrize("lock", ["new", "roots"])
def test_roots_lock_in_the_producers_directory_is_the_producers(public, lock):
    """Root writes first in the producer's directory (a plain ``sudo mark``): the lock it
    makes, or one it made 0600 before, becomes the directory owner's, whose writes go on."""
    directory = _producers_directory(public)
    if lock == "roots":
        os.close(os.open(directory / LOCK_NAME, os.O_CREAT | os.O_WRONLY, 0o600))
    assert write_as(0, public, "replace", directory / "segment_health_check.9.1") == {
        "written": True
    }
    st = (directory / LOCK_NAME).stat()
    assert (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid) == (0o600, NOBODY, NOGROUP)
    assert write_as(NOBODY, public, "replace", directory / "segment_health_check.9.2") == {
        "written": True
    }


def test_root_gives_away_no_lock_with_a_second_name(public):
    """A hard link as the lock (where ``fs.protected_hardlinks`` is 0, its owner could plant
    one to any file of root's): root locks it but leaves its owner alone."""
    directory = _producers_directory(public)
    secret = public / "roots-secret"
    secret.write_text("root's\n")
    secret.chmod(0o600)
    os.link(secret, directory / LOCK_NAME)
    assert write_as(0, public, "replace", directory / "segment_health_check.9.1") == {
        "written": True
    }
    assert (secret.stat().st_uid, secret.read_text()) == (0, "root's\n")


def test_a_planted_lock_is_refused_with_what_to_do(public):
    directory = shared(public, 0o1777)
    plant("fifo", directory / LOCK_NAME, NOBODY, public)
    with pytest.raises(decisionfs.StepError) as refused:
        decisionfs.replace(str(directory / "segment_health_check.9.1"), b"x\n")
    assert refused.value.step == "lock"
    assert refused.value.filename == str(directory / LOCK_NAME)
    assert refused.value.strerror is not None
    assert "is a FIFO, not a regular file: remove it" in refused.value.strerror


@WRITERS
@pytest.mark.parametrize("kind", ["symlink", "fifo"])
def test_a_planted_audit_log_is_refused_at_once(public, writer, kind):
    directory = shared(public, 0o1777)
    log = directory / "audit.jsonl"
    plant(kind, log, NOBODY if writer == 0 else 0, public)
    code = errno.ELOOP if kind == "symlink" else errno.EINVAL
    assert write_as(writer, public, "append", log) == {"step": None, "errno": code}
    assert not (public / "root-only" / "nologin").exists()


@pytest.mark.parametrize("kind", ["nobody's", "two names"])
def test_an_audit_log_that_is_not_this_accounts_own_is_refused(public, kind):
    """Root appends (the producer); the log was swapped, after the producer started, for
    a file user nobody made (mode 0666), or for a second name of a file of root's."""
    directory = shared(public, 0o1777)
    log = directory / "audit.jsonl"
    if kind == "nobody's":
        as_user(NOBODY, "sh", "-c", 'umask 0; echo forged > "$1"', "-", str(log))
    else:
        (public / "mine").write_text("forged\n")
        os.link(public / "mine", log)
    assert write_as(0, public, "append", log) == {"step": None, "errno": errno.EPERM}
    assert log.read_text() == "forged\n"


def test_a_temporary_file_swapped_for_a_symlink_never_changes_the_target(public, monkeypatch):
    """Root writes in a 0777 directory; user nobody renames a symlink to a root-only file
    over root's temporary file while root syncs it (made to happen exactly then: from
    inside the file's fsync). The target keeps its mode and content."""
    directory = shared(public, 0o777)
    victim = public / "victim"
    victim.write_text("root:SECRET\n")
    victim.chmod(0o600)
    real_fsync = os.fsync
    swapped: list[str] = []

    def fsync_while_swapped(fd):
        if not swapped and stat.S_ISREG(os.fstat(fd).st_mode):
            (temporary,) = (name for name in os.listdir(directory) if name.endswith(".tmp"))
            swap = 'ln -s "$1" "$2/planted" && mv -fT "$2/planted" "$2/$3"'
            as_user(NOBODY, "sh", "-c", swap, "-", str(victim), str(directory), temporary)
            swapped.append(temporary)
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync_while_swapped)
    decisionfs.replace(str(directory / "segment_health_check.9.1"), b"bad\n")
    assert swapped
    st = os.stat(victim)
    assert (stat.S_IMODE(st.st_mode), st.st_uid) == (0o600, 0)
    assert victim.read_text() == "root:SECRET\n"


def test_read_current_refuses_a_device_node(public):
    device = public / "segment_health_check.9.1"
    plant("device", device, 0, public)
    assert decisionfs.read_current(str(device)) == Current(
        "unreadable", error="not a regular file: character device"
    )


def test_the_next_writer_removes_only_its_own_old_regular_temporary_files(public):
    directory = shared(public, 0o1777)
    hour_ago = time.time() - 3600
    names = {
        "old-own": ".segment_health_check.9.1.abc_12xy.tmp",
        "old-other": ".segment_health_check.9.2.k9lm0pq1.tmp",
        "old-symlink": ".segment_health_check.9.3.zzzzzzzz.tmp",
        "fresh-own": ".segment_health_check.9.4.a1b2c3d4.tmp",
        "old-not-a-temporary": ".segment_health_check.9.5.abcdefgh.bak",
        "old-state-temporary": "..publish-drained.p.9.json.abcdefgh.tmp",
    }
    for what, name in names.items():
        path = directory / name
        if what == "old-symlink":
            path.symlink_to(public / "victim")
        else:
            path.write_text("a dead writer's\n")
        if what == "old-other":
            os.chown(path, NOBODY, NOBODY)
        if what != "fresh-own":
            os.utime(path, (hour_ago, hour_ago), follow_symlinks=False)
    result = decisionfs.replace(str(directory / "segment_health_check.9.9"), b"x\n")
    assert result.warnings == []
    left = set(os.listdir(directory)) - {LOCK_NAME, "segment_health_check.9.9"}
    assert left == set(names.values()) - {names["old-own"]}


@pytest.fixture
def tiny(public):
    """A real 16 KiB tmpfs."""
    mount = public / "tiny"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def test_an_append_on_a_full_disk_raises_and_the_next_one_starts_a_new_line(tiny):
    log = tiny / "audit.jsonl"
    first = json.dumps({"event": "published", "task_id": "1"}) + "\n"
    decisionfs.append_text(str(log), first)
    filler = tiny / "filler"
    filler.write_bytes(b"f" * 12288)  # every page but the log's first one
    cut = json.dumps({"event": "published", "detail": "d" * 5000}) + "\n"
    with pytest.raises(OSError) as full:
        decisionfs.append_text(str(log), cut)
    assert full.value.errno == errno.ENOSPC
    assert full.value.filename == str(log)
    written = log.read_text()
    assert written.startswith(first) and not written.endswith("\n")  # cut, and told so
    filler.unlink()
    last = json.dumps({"event": "cleared", "task_id": "2"}) + "\n"
    decisionfs.append_text(str(log), last)
    lines = log.read_text().splitlines()
    assert len(lines) == 3
    assert cut.startswith(lines[1]) and len(lines[1]) < len(cut) - 1
    assert [json.loads(line) for line in (lines[0], lines[2])] == [
        json.loads(first),
        json.loads(last),
    ]
