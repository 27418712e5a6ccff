"""Writing decision files: conditional, locked, atomic, and honest about a failed sync."""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import threading
import time
from pathlib import Path

import pytest

from nvrx_seghealth import _artifact as artifact
from nvrx_seghealth import _decisionfs as decisionfs
from nvrx_seghealth._artifact import DecisionConflict, clear_decision, publish_decision
from nvrx_seghealth._decisionfs import LOCK_NAME, Current, LockBusyError, StepError


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
    os.symlink(path, path)
    current = decisionfs.read_current(path)
    assert current.kind == "unreadable" and current.error.startswith("ELOOP")


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
    before = decisionfs.read_current(artifact.artifact_path(directory, "5", "3"))
    path = publish_decision(directory, "5", "3", "bad\n", expect=before)
    with pytest.raises(DecisionConflict):
        publish_decision(directory, "5", "3", "other\n", expect=before)
    assert Path(path).read_text() == "bad\n"
