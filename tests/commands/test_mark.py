"""``nvrx-seghealth mark`` / ``clear``: atomic writes of one decision, nothing else touched."""

from __future__ import annotations

import os
import stat

import pytest

from .runner import nvrx_seghealth


@pytest.fixture
def shc(tmp_path):
    """A decision directory with neighbours that must never change."""
    directory = tmp_path / "shc"
    directory.mkdir()
    (directory / "segment_health_check.12.4").write_text("other unit\n")
    (directory / "notes.txt").write_text("operator notes\n")
    return directory


def snapshot(directory, skip):
    return {p.name: p.read_bytes() for p in directory.iterdir() if p.name != skip}


def unit(shc):
    return ["--dir", str(shc), "--job-id", "12", "--task-id", "3"]


def test_mark_replaces_the_decision_atomically_and_touches_nothing_else(shc):
    path = shc / "segment_health_check.12.3"
    path.write_text("old\n")
    os.link(path, shc.parent / "old-link")  # still names the old inode after a rename
    before = snapshot(shc, path.name)

    done = nvrx_seghealth("mark", *unit(shc), "--reason", "n7: ECC errors (ticket 1)")
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"marked job_id=12 task_id=3 unhealthy: {path}\n"
    assert path.read_text() == "n7: ECC errors (ticket 1)\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert (shc.parent / "old-link").read_text() == "old\n", "written in place, not renamed"
    assert snapshot(shc, path.name) == before  # no neighbour changed, no temp file left
    assert nvrx_seghealth("check", *unit(shc)).returncode == 1


def test_clear_empties_then_remove_deletes(shc):
    path = shc / "segment_health_check.12.3"
    path.write_text("bad\n")
    before = snapshot(shc, path.name)

    done = nvrx_seghealth("clear", *unit(shc))
    assert done.returncode == 0, done.stderr
    assert "cleared job_id=12 task_id=3 (emptied)" in done.stdout
    assert path.read_bytes() == b""
    assert nvrx_seghealth("check", *unit(shc)).returncode == 0

    done = nvrx_seghealth("clear", *unit(shc), "--remove")
    assert done.returncode == 0 and "(removed)" in done.stdout
    assert not path.exists()
    assert nvrx_seghealth("clear", *unit(shc), "--remove").returncode == 0  # already gone
    assert snapshot(shc, path.name) == before


@pytest.mark.parametrize("args,message", [
    (["--reason", "  "], "--reason must not be empty"),
    (["--reason", "x", "--dir", "shc"], "--dir must be an absolute path"),
])
def test_mark_usage_errors_exit_2(shc, args, message):
    done = nvrx_seghealth("mark", "--job-id", "12", "--task-id", "3", "--dir", str(shc), *args)
    assert done.returncode == 2
    assert message in done.stderr
    assert not (shc / "segment_health_check.12.3").exists()


def test_a_failed_write_exits_1(tmp_path):
    missing = tmp_path / "missing"
    done = nvrx_seghealth("mark", "--dir", str(missing), "--job-id", "1", "--task-id", "2",
                          "--reason", "bad")
    assert done.returncode == 1
    assert f"cannot write the decision in {missing}" in done.stderr
    done = nvrx_seghealth("clear", "--dir", str(missing), "--job-id", "1", "--task-id", "2")
    assert done.returncode == 1
    assert not missing.exists()
