"""``publish-drained --pid-file``: claimed atomically, refused while its holder runs, taken
over from a dead one, released only while it still names this process."""

from __future__ import annotations

import os
import subprocess

import pytest

from nvrx_seghealth import ConfigurationError
from nvrx_seghealth._producer.pidfile import PidFile


def _dead_pid() -> int:
    """The pid of a process that has ended and been reaped."""
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def test_claim_writes_this_pid_and_release_removes_it(tmp_path):
    path = tmp_path / "p.pid"
    pid_file = PidFile(str(path))
    pid_file.claim()
    assert path.read_text() == f"{os.getpid()}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.pid"]  # no temporary left
    pid_file.release()
    assert list(tmp_path.iterdir()) == []


def test_a_live_holder_is_refused_and_its_file_kept(tmp_path):
    path = tmp_path / "p.pid"
    holder = subprocess.Popen(["sleep", "600"])
    try:
        path.write_text(f"{holder.pid}\n")
        with pytest.raises(ConfigurationError, match="which is running") as refused:
            PidFile(str(path)).claim()
        assert refused.value.setting == "--pid-file"
        assert path.read_text() == f"{holder.pid}\n"
    finally:
        holder.kill()
        holder.wait()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.pid"]


def test_a_dead_holder_is_taken_over(tmp_path):
    path = tmp_path / "p.pid"
    path.write_text(f"{_dead_pid()}\n")
    PidFile(str(path)).claim()
    assert path.read_text() == f"{os.getpid()}\n"


@pytest.mark.parametrize("content", ["", "not a pid\n", "0\n"])
def test_a_file_without_a_pid_is_not_a_pid_file_and_is_left_alone(tmp_path, content):
    path = tmp_path / "notes.txt"
    path.write_text(content)
    with pytest.raises(ConfigurationError, match="holds no pid"):
        PidFile(str(path)).claim()
    assert path.read_text() == content


def test_release_leaves_a_file_that_names_another_process(tmp_path):
    path = tmp_path / "p.pid"
    pid_file = PidFile(str(path))
    pid_file.claim()
    path.write_text("12345\n")  # taken over meanwhile
    pid_file.release()
    assert path.read_text() == "12345\n"
    path.unlink()
    pid_file.release()  # gone: nothing to do, no error


def test_a_path_that_cannot_be_written_says_so(tmp_path):
    with pytest.raises(ConfigurationError, match="cannot be written"):
        PidFile(str(tmp_path / "no" / "p.pid")).claim()
