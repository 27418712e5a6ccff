"""``nvrx-seghealth mark`` / ``clear``: atomic writes of one decision, nothing else touched."""

from __future__ import annotations

import os
import stat

import pytest

from harness.commands import nvrx_seghealth


@pytest.fixture
def shc(tmp_path):
    """A decision directory with neighbours that must never change."""
    directory = tmp_path / "shc"
    directory.mkdir()
    (directory / "segment_health_check.12.4").write_text("other unit\n")
    (directory / "notes.txt").write_text("operator notes\n")
    return directory


LOCK = ".segment_health_check.lock"


def snapshot(directory, skip):
    """Every file but ``skip`` and the writers' (empty) lock file."""
    return {p.name: p.read_bytes() for p in directory.iterdir() if p.name not in (skip, LOCK)}


def unit(shc):
    return ["--dir", str(shc), "--job-id", "12", "--task-id", "3"]


def test_mark_replaces_the_decision_atomically_and_touches_nothing_else(shc):
    path = shc / "segment_health_check.12.3"
    path.write_text("old\n")
    os.link(path, shc.parent / "old-link")  # still names the old inode after a rename
    before = snapshot(shc, path.name)

    done = nvrx_seghealth("mark", *unit(shc), "--reason", "n7: ECC errors (ticket 1)")
    assert done.returncode == 0, done.stderr
    assert {"job_id=12", "task_id=3", str(path)} <= set(done.stdout.split())
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
    assert {"job_id=12", "task_id=3", str(path)} <= set(done.stdout.split())
    assert path.read_bytes() == b""
    assert nvrx_seghealth("check", *unit(shc)).returncode == 0

    done = nvrx_seghealth("clear", *unit(shc), "--remove")
    assert done.returncode == 0, done.stderr
    assert not path.exists()
    done = nvrx_seghealth("clear", *unit(shc), "--remove")  # already gone: fine, and said
    assert (done.returncode, done.stderr) == (0, "")
    assert "job_id=12 task_id=3" in done.stdout and f"({path})" in done.stdout
    assert snapshot(shc, path.name) == before


def test_clear_where_there_is_no_decision_writes_nothing(shc):
    """An empty file would be the clearer's own: in a sticky directory, another account's
    producer could no longer mark the unit."""
    before = snapshot(shc, "segment_health_check.12.3")
    for remove in ([], ["--remove"]):
        done = nvrx_seghealth("clear", *unit(shc), *remove)
        assert (done.returncode, done.stderr) == (0, "")
        assert {"job_id=12", "task_id=3"} <= set(done.stdout.split())
        assert not (shc / "segment_health_check.12.3").exists()
    assert snapshot(shc, "segment_health_check.12.3") == before


@pytest.mark.parametrize(
    "args,named",
    [(["--reason", "  "], "--reason"), (["--reason", "x", "--dir", "shc"], "--dir")],
)
def test_mark_usage_errors_exit_2(shc, args, named):
    done = nvrx_seghealth("mark", "--job-id", "12", "--task-id", "3", "--dir", str(shc), *args)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith(f"nvrx-seghealth mark: error: {named} ")
    assert not (shc / "segment_health_check.12.3").exists()


def test_a_missing_directory_exits_1_with_the_fix_and_no_temporary_name(tmp_path):
    missing = tmp_path / "missing"
    for command in (["mark", "--reason", "bad"], ["clear"], ["clear", "--remove"]):
        done = nvrx_seghealth(*command, "--dir", str(missing), "--job-id", "1", "--task-id", "2")
        assert (done.returncode, done.stdout) == (1, "")
        [line] = done.stderr.splitlines()  # one line naming the unit, the directory, the fix
        assert line.startswith(f"nvrx-seghealth {command[0]}: job_id=1 task_id=2 ")
        assert f"mkdir -p {missing})" in line and "--dir" in line and ".tmp" not in line
    assert not missing.exists()


def test_a_directory_in_place_of_the_decision_names_the_fix(shc):
    path = shc / "segment_health_check.12.3"
    path.mkdir()
    done = nvrx_seghealth("mark", *unit(shc), "--reason", "bad")
    assert done.returncode == 1
    assert f"{path} is a directory, not a decision: remove it (rmdir {path})" in done.stderr
    assert ".tmp" not in done.stderr
    assert [p.name for p in shc.iterdir() if p.name.endswith(".tmp")] == []


@pytest.mark.parametrize(
    "job,task,hint",
    [
        ("123_7", "7", "give --job-id 123 --task-id 7"),
        ("12", "500_3", "give --job-id 500 --task-id 3"),
    ],
)
def test_squeue_style_ids_get_a_hint_to_split_them(shc, job, task, hint):
    done = nvrx_seghealth(
        "mark", "--dir", str(shc), "--job-id", job, "--task-id", task, "--reason", "x"
    )
    assert done.returncode == 2
    assert "is squeue's <array job id>_<task id>: " + hint in done.stderr


@pytest.mark.parametrize("command", [["mark", "--reason", "x"], ["clear"]])
@pytest.mark.parametrize(
    "job,task,hint",
    [("12", "007", "give --task-id 7"), ("0123", "3", "give --job-id 123")],
)
def test_ids_with_leading_zeros_are_refused_with_the_id_slurm_writes(shc, command, job, task, hint):
    """``SLURM_ARRAY_TASK_ID`` is ``7``, never ``007``: a decision for ``007`` would be one
    no launcher reads."""
    before = snapshot(shc, "")
    done = nvrx_seghealth(
        command[0], "--dir", str(shc), "--job-id", job, "--task-id", task, *command[1:]
    )
    assert done.returncode == 2
    assert "has leading zeros, which Slurm never writes: " + hint in done.stderr
    assert snapshot(shc, "") == before and not (shc / LOCK).exists()


def test_mark_waits_for_a_writer_holding_the_lock_and_lands_after_it(shc):
    """A writer inside its read-compare-rename holds the directory's lock; a mark waits
    for it instead of racing it, and gives up (exit 1, the fix) when it is held too
    long."""
    import fcntl
    import subprocess
    import time

    from harness.commands import COMMAND

    path = shc / "segment_health_check.12.3"
    fd = os.open(shc / LOCK, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        marking = subprocess.Popen(
            [*COMMAND, "mark", *unit(shc), "--reason", "ops: psu"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        time.sleep(1.5)
        assert marking.poll() is None, "mark did not wait for the lock"
        assert not path.exists()
        path.write_text("what the lock holder wrote\n")
    finally:
        os.close(fd)  # releases the lock
    _out, err = marking.communicate(timeout=30)
    assert marking.returncode == 0, err
    assert path.read_text() == "ops: psu\n"

    fd = os.open(shc / LOCK, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        done = nvrx_seghealth("clear", *unit(shc), "--fs-timeout", "1")
    finally:
        os.close(fd)
    assert done.returncode == 1
    assert f"another writer has held {shc / LOCK} for" in done.stderr
    assert f"`fuser {shc / LOCK}`" in done.stderr
    assert path.read_text() == "ops: psu\n"


@pytest.mark.parametrize("command", ["mark", "clear"])
@pytest.mark.parametrize("folders", [["123"], ["122"], ["123", "122"]])
def test_a_root_of_per_job_folders_is_warned_about(tmp_path, command, folders):
    """The job script's launchers read ``<root>/<array job id>``: a decision written in a
    root that holds per-job folders (the job's own, or other jobs' so far) is read by no
    launcher. The write stands, and the warning names the folder to write in."""
    root = tmp_path / "segment-health-check"
    for folder in folders:
        (root / folder).mkdir(parents=True)
    unit = ["--job-id", "123", "--task-id", "7", *(["--reason", "x"] if command == "mark" else [])]
    done = nvrx_seghealth(command, "--dir", str(root), *unit)
    assert done.returncode == 0, done.stderr
    assert f"--dir {root / '123'}" in done.stderr
    (root / "123").mkdir(exist_ok=True)
    done = nvrx_seghealth(command, "--dir", str(root / "123"), *unit)
    assert (done.returncode, done.stderr) == (0, "")  # the job's own folder


@pytest.mark.parametrize("names", [[], ["notes", "segment_health_check.123.6"]])
def test_a_directory_without_per_job_folders_is_not_warned_about(tmp_path, names):
    """A site may keep every job's decisions in one folder: nothing tells it is a root."""
    shc = tmp_path / "shc"
    shc.mkdir()
    for name in names:
        (shc / name).write_text("x\n")
    argv = ["--dir", str(shc), "--job-id", "123", "--task-id", "7"]
    done = nvrx_seghealth("mark", *argv, "--reason", "n7: ECC")
    assert (done.returncode, done.stderr) == (0, "")
