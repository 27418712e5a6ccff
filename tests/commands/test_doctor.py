"""``nvrx-seghealth doctor``: one line per finding, exit 1 on any FAIL with the fix.

The command prints what the pre-flight finds; each of its rules is held in-process in
``tests/decision/test_preflight.py``. Here: the lines, the verdict, the exit code, the
JSON, and an unusable ``--dir``, which is the command's own finding.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile

import pytest

from harness.commands import nvrx_seghealth
from harness.slurmenv import slurm_env

pytestmark = pytest.mark.torch  # doctor reads the launch shape through torchrun

STEP = {"SLURM_STEP_TASKS_PER_NODE": "1(x2)"}


def doctor(*args, env=None):
    return nvrx_seghealth("doctor", *args, env=env)


def levels(output):
    return [line.split(None, 1)[0] for line in output.splitlines()[:-1]]


def test_a_good_setup_on_process_0(tmp_path):
    done = doctor("--dir", str(tmp_path), env={**slurm_env(task=4, array_job=500), **STEP})
    assert done.returncode == 0, done.stdout
    out = done.stdout
    assert "FAIL" not in out and out.splitlines()[-1] == "no problems found"
    assert f"ok    decision directory {tmp_path} is absolute" in out
    assert re.search(rf"ok    directory {tmp_path} exists \(stat took [0-9.]+ ms\)", out)
    assert "ok    Slurm identity: array task, job_id=500 task_id=4" in out
    assert "SLURM_PROCID=0: this launcher installs the check" in out
    assert f"consults {tmp_path}/segment_health_check.500.4" in out
    assert re.search(r"ok    stat of the decision file took [0-9.]+ ms \(bound 10 s\)", out)
    assert "ok    decision now: proceed (absent: no decision file)" in out
    assert "ok    one launcher per node" in out
    assert "hint  start the launchers with srun --kill-on-bad-exit=1" in out
    assert "hint  never start the launchers with --standalone" in out
    assert "hint  give --rdzv-backend on the launcher's command line" in out


@pytest.mark.parametrize(
    "case,message",
    [
        ("missing", "does not exist: create it on storage that every launcher mounts (mkdir -p"),
        ("relative", "--dir must be an absolute path"),
    ],
)
def test_each_problem_fails_with_its_fix(tmp_path, case, message):
    directory, env = str(tmp_path / "missing"), {**slurm_env(task=4, array_job=500), **STEP}
    if case == "relative":
        directory = "shc"
    done = doctor("--dir", directory, env=env)
    assert done.returncode == 1
    assert levels(done.stdout).count("FAIL") == 1
    assert "FAIL  " in done.stdout and message in done.stdout
    assert done.stdout.splitlines()[-1] == "problems found: see the FAIL lines"


def test_json(tmp_path):
    done = doctor("--json", env={**slurm_env(job=5), "NVRX_SEGMENT_HEALTH_CHECK_DIR": "rel"})
    assert done.returncode == 1
    report = json.loads(done.stdout)
    assert report["ok"] is False
    assert report["findings"][0] == {
        "level": "FAIL",
        "message": "environment variable NVRX_SEGMENT_HEALTH_CHECK_DIR must be an absolute "
        f"path that every launcher can reach, got 'rel'; pass e.g. "
        f"{os.path.abspath('rel')!r}",
    }


def test_a_symlinked_directory_is_judged_where_its_files_live(tmp_path):
    """The path given is a symlink in a safe place; the real directory is under a parent
    everyone can write without the sticky bit: that parent is warned about, and the
    warning names the real directory and the symlink."""
    open_parent = tmp_path / "open"
    open_parent.mkdir()
    open_parent.chmod(0o777)
    real = open_parent / "shc"
    real.mkdir()
    safe = tmp_path / "safe"
    safe.mkdir()
    link = safe / "shc"
    link.symlink_to(real)
    env = {**slurm_env(task=4, array_job=500), **STEP}

    report = json.loads(doctor("--dir", str(link), "--json", env=env).stdout)
    warnings = [f["message"] for f in report["findings"] if f["level"] == "warn"]
    assert report["ok"] is True  # a warning, not a failure
    [warning] = warnings
    assert warning.startswith(f"{open_parent}, ") and str(real) in warning and str(link) in warning
    status = json.loads(nvrx_seghealth("status", "--dir", str(link), "--json").stdout)
    assert status["warnings"] == warnings

    open_parent.chmod(0o755)  # the same place, made safe: nothing to warn about
    report = json.loads(doctor("--dir", str(link), "--json", env=env).stdout)
    assert [f for f in report["findings"] if f["level"] == "warn"] == []


def filesystem_findings(directory):
    """Whether ``doctor`` passes ``directory``, and its findings of the directory's
    filesystem: (level, message) each."""
    env = {**slurm_env(task=4, array_job=500), **STEP}
    report = json.loads(doctor("--dir", str(directory), "--json", env=env).stdout)
    about = f"decision directory {directory} is on "
    found = [(f["level"], f["message"]) for f in report["findings"] if about in f["message"]]
    return report["ok"], found


def mounted_type(path):
    """The filesystem type of ``path`` as util-linux's findmnt tells it: a second witness."""
    done = subprocess.run(
        ["findmnt", "-n", "-o", "FSTYPE", "--target", str(path)],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.split()[-1]  # the last of stacked mounts is the one seen


@pytest.fixture
def in_memory():
    """A fresh directory on /dev/shm, a tmpfs: each node has its own."""
    if mounted_type("/dev/shm") != "tmpfs":
        pytest.fail("/dev/shm is not a tmpfs here: the test needs one")
    directory = tempfile.mkdtemp(dir="/dev/shm", prefix="nvrx-doctor-")
    try:
        yield directory
    finally:
        os.rmdir(directory)


def test_a_directory_in_the_nodes_memory_is_warned_about(in_memory, tmp_path):
    link = tmp_path / "shc"
    link.symlink_to(in_memory)  # reached through a symlink: judged where it lives
    for directory in (in_memory, link):
        ok, [(level, message)] = filesystem_findings(directory)
        assert ok is True  # a warning, not a failure
        assert level == "warn" and f"{directory} is on tmpfs" in message


def test_a_directory_on_a_disk_is_not_warned_about():
    """The checkout lives on a disk (or a shared filesystem), never in memory."""
    here = os.path.dirname(os.path.abspath(__file__))
    kind = mounted_type(here)
    assert kind not in ("tmpfs", "ramfs")
    ok, [(level, message)] = filesystem_findings(here)
    assert ok is True and level in ("hint", "ok")
    assert f" {kind} filesystem" in message
