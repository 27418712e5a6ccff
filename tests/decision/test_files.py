"""Writing decision files: conditional, locked, atomic, and honest about a failed sync."""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import signal
import stat
import threading
import time
from pathlib import Path

import pytest

from nvrx_seghealth._decision import decision_file
from nvrx_seghealth._decision import files as decisionfs
from nvrx_seghealth._decision.decision_file import (
    DecisionConflict,
    clear_decision,
    publish_decision,
)
from nvrx_seghealth._decision.files import (
    LOCK_NAME,
    Current,
    LockBusyError,
    NotRegularError,
    StepError,
)

SYMLINK = Current("unreadable", error="not a regular file: symbolic link")


@pytest.fixture
def path(tmp_path):
    return str(tmp_path / "segment_health_check.5.3")


def test_read_current_tells_absent_content_and_unreadable(tmp_path, path):
    assert decisionfs.read_current(path) == Current("absent")
    with open(path, "wb") as handle:
        handle.write(b"bad\n")
    assert decisionfs.read_current(path) == Current("content", b"bad\n", 4)
    os.unlink(path)
    os.mkfifo(path)  # no writer: a blocking open would hang
    assert decisionfs.read_current(path) == Current("unreadable", error="not a regular file: FIFO")
    os.unlink(path)
    os.symlink(path, path)  # a loop
    assert decisionfs.read_current(path) == SYMLINK
    os.unlink(path)
    target = tmp_path / "elsewhere"
    target.write_text("not this directory's business\n")
    os.symlink(target, path)  # never followed: its target is not read
    assert decisionfs.read_current(path) == SYMLINK


def test_read_current_refuses_a_fifo_without_opening_it(path):
    """A writer waiting in open() of the FIFO is released by any reader's open: it stays
    waiting, so read_current did not open it (device nodes take the same path)."""
    os.mkfifo(path)
    released = threading.Event()

    def writer():
        os.close(os.open(path, os.O_WRONLY))  # returns once a reader has opened the FIFO
        released.set()

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    wchan = Path(f"/proc/self/task/{thread.native_id}/wchan")
    deadline = time.monotonic() + 30
    while wchan.read_text() != "wait_for_partner":  # the writer is blocked in its open
        assert time.monotonic() < deadline, "the writer never reached its open of the FIFO"
        time.sleep(0.01)
    assert decisionfs.read_current(path) == Current("unreadable", error="not a regular file: FIFO")
    assert not released.wait(1.0)
    os.close(os.open(path, os.O_RDONLY | os.O_NONBLOCK))  # let the writer go
    thread.join(timeout=30)
    assert released.is_set()


def test_read_current_looks_again_at_a_file_replaced_while_it_was_opened(path, monkeypatch):
    """A writer's rename between the lstat and the open (made to happen exactly there)
    is seen as the new file, not as an error."""
    Path(path).write_bytes(b"old\n")
    newer = f"{path}.new"
    Path(newer).write_bytes(b"newer\n")
    real_open = os.open

    def open_after_a_rename(file, flags, mode=0o777, **kwargs):
        if file == path and os.path.exists(newer):
            os.rename(newer, path)
        return real_open(file, flags, mode, **kwargs)

    monkeypatch.setattr(os, "open", open_after_a_rename)
    assert decisionfs.read_current(path) == Current("content", b"newer\n", 6)


def test_a_write_expecting_what_was_read_happens(path):
    before = decisionfs.read_current(path)
    result = decisionfs.replace(path, b"mine\n", before)
    assert (result.status, result.before, result.warnings) == ("done", before, [])
    assert Path(path).read_bytes() == b"mine\n"


def test_a_write_whose_file_changed_since_the_read_writes_nothing(path):
    before = decisionfs.read_current(path)  # absent
    with open(path, "w") as handle:
        handle.write("ops: psu\n")  # another writer, between the read and the write
    result = decisionfs.replace(path, b"", before)
    assert result.status == "conflict"
    assert result.before == Current("content", b"ops: psu\n", 9)
    assert Path(path).read_text() == "ops: psu\n"
    with pytest.raises(DecisionConflict, match="changed since it was read"):
        clear_decision(os.path.dirname(path), "5", "3", expect=before)
    assert Path(path).read_text() == "ops: psu\n"


def test_the_compare_and_the_rename_hold_the_directory_lock(tmp_path, path):
    """A writer that holds the lock keeps every other writer out until it lets go."""
    fd = os.open(tmp_path / LOCK_NAME, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    done = []
    writer = threading.Thread(
        target=lambda: done.append(decisionfs.replace(path, b"second\n", None, lock_wait=30))
    )
    writer.start()
    time.sleep(0.5)
    assert not done and not os.path.exists(path)
    os.close(fd)
    writer.join(timeout=30)
    assert done[0].status == "done" and Path(path).read_text() == "second\n"


def test_a_lock_held_too_long_is_busy(tmp_path, path):
    fd = os.open(tmp_path / LOCK_NAME, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        with pytest.raises(LockBusyError, match=r"held by another writer for 0\.[2-9]"):
            decisionfs.replace(path, b"x\n", None, lock_wait=0.2)
    finally:
        os.close(fd)
    assert not os.path.exists(path)


def test_a_failed_directory_sync_after_the_rename_is_a_warning_not_a_failure(
    tmp_path, path, monkeypatch, caplog
):
    """The rename happened: the write is done and reported so, with a WARNING. (A failing
    fsync of a directory cannot be made real here: injected.)"""
    real_fsync = os.fsync

    def fsync(fd):
        if os.path.isdir(f"/proc/self/fd/{fd}"):
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    result = decisionfs.replace(path, b"bad\n")
    assert result.status == "done"
    assert len(result.warnings) == 1
    assert result.warnings[0].startswith(
        f"the decision was replaced, but syncing {tmp_path} failed (EIO"
    )
    caplog.set_level(logging.WARNING, logger="nvrx_seghealth")
    assert publish_decision(str(tmp_path), "5", "3", "worse") == path
    assert Path(path).read_text() == "worse"
    assert [r.levelno for r in caplog.records] == [logging.WARNING]
    assert "syncing" in caplog.records[0].getMessage()


def test_a_failed_step_is_named_and_leaves_no_temporary(tmp_path, path):
    os.mkdir(path)
    with pytest.raises(StepError) as failed:
        decisionfs.replace(path, b"x\n")
    assert (failed.value.step, failed.value.errno) == ("rename", errno.EISDIR)
    with pytest.raises(StepError) as failed:
        decisionfs.replace(str(tmp_path / "missing" / "f"), b"x\n")
    assert (failed.value.step, failed.value.errno) == ("lock", errno.ENOENT)
    assert sorted(os.listdir(tmp_path)) == [LOCK_NAME, os.path.basename(path)]


def test_removing_reports_what_was_there(path):
    assert decisionfs.replace(path, None).before.kind == "absent"
    decisionfs.replace(path, b"x\n")
    assert decisionfs.replace(path, None).before == Current("content", b"x\n", 2)
    assert not os.path.exists(path)


def test_the_library_api_takes_an_expectation(tmp_path):
    directory = str(tmp_path)
    before = decisionfs.read_current(decision_file.decision_file_path(directory, "5", "3"))
    path = publish_decision(directory, "5", "3", "bad\n", expect=before)
    with pytest.raises(DecisionConflict):
        publish_decision(directory, "5", "3", "other\n", expect=before)
    assert Path(path).read_text() == "bad\n"


def test_the_temporary_file_goes_also_when_a_signal_handler_raises(tmp_path, path, monkeypatch):
    """A real signal, delivered exactly between the write and the rename (the test sends
    it from inside the file's fsync)."""

    class Interrupted(BaseException):
        pass

    def interrupt(signum, frame):
        raise Interrupted

    previous = signal.signal(signal.SIGUSR1, interrupt)
    real_fsync = os.fsync

    def fsync_then_signal(fd):
        real_fsync(fd)
        if stat.S_ISREG(os.fstat(fd).st_mode):
            os.kill(os.getpid(), signal.SIGUSR1)

    monkeypatch.setattr(os, "fsync", fsync_then_signal)
    try:
        with pytest.raises(Interrupted):
            decisionfs.replace(path, b"x\n")
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert sorted(os.listdir(tmp_path)) == [LOCK_NAME]


def test_a_decision_is_never_written_without_the_lock(tmp_path, path):
    with pytest.raises(ValueError, match="only under the directory's lock"):
        decisionfs.replace(path, b"x\n", lock=False)
    state = str(tmp_path / ".publish-drained.p.5.json")  # one writer's own file
    assert decisionfs.replace(state, b"{}", lock=False).status == "done"
    assert sorted(os.listdir(tmp_path)) == [".publish-drained.p.5.json"]


def test_append_text_never_follows_a_symlink(tmp_path):
    target = tmp_path / "elsewhere"
    target.write_text("kept\n")
    log = tmp_path / "audit.jsonl"
    log.symlink_to(target)
    with pytest.raises(NotRegularError) as refused:
        decisionfs.append_text(str(log), "line\n")
    assert (refused.value.errno, refused.value.kind) == (errno.ELOOP, "symbolic link")
    assert target.read_text() == "kept\n"


def test_append_text_starts_a_new_line_after_a_cut_one(tmp_path):
    log = tmp_path / "audit.jsonl"
    log.write_text('{"a": 1}\n{"b": ')  # an earlier append cut short
    decisionfs.append_text(str(log), '{"c": 3}\n')
    decisionfs.append_text(str(log), '{"d": 4}\n')
    assert log.read_text().splitlines() == ['{"a": 1}', '{"b": ', '{"c": 3}', '{"d": 4}']


def test_a_file_that_already_holds_what_was_to_be_written_is_no_conflict(path):
    """Another writer (a replica of a producer) wrote the same content, or removed the
    file, between this writer's read and its write: nothing to write, nothing to report."""
    decisionfs.replace(path, b"old\n")
    read = decisionfs.read_current(path)
    decisionfs.replace(path, b"same\n")
    mtime = os.stat(path).st_mtime_ns
    result = decisionfs.replace(path, b"same\n", read)
    assert (result.status, result.before) == ("unchanged", Current("content", b"same\n", 5))
    assert os.stat(path).st_mtime_ns == mtime  # not written again
    assert decisionfs.replace(path, b"other\n", read).status == "conflict"
    os.unlink(path)
    assert decisionfs.replace(path, None, read).status == "unchanged"
