"""``nvrx-seghealth doctor``: one line per finding, exit 1 on any FAIL with the fix."""

from __future__ import annotations

import json
import os
import re

import pytest

from harness.commands import nvrx_seghealth
from harness.common import slurm_env
from nvrx_seghealth import publish_decision

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


def test_other_launchers_and_a_marked_unit_are_reported_not_failed(tmp_path):
    publish_decision(str(tmp_path), "77", "77", "bad")
    done = doctor("--dir", str(tmp_path), env={**slurm_env(job=77, procid=1), **STEP})
    assert done.returncode == 0, done.stdout
    assert "SLURM_PROCID=1: this launcher does not read the decision" in done.stdout
    assert "warn  the unit is marked unhealthy" in done.stdout


@pytest.mark.parametrize(
    "case,message",
    [
        ("missing", "does not exist: create it on storage that every launcher mounts (mkdir -p"),
        ("file", "is not a directory: point --dir at the directory"),
        ("relative", "--dir must be an absolute path"),
        ("no-slurm", "not inside a Slurm job (no SLURM_JOB_ID): run doctor as the launchers run"),
        ("two-per-node", "2 launchers on a node (tasks per node 2(x2)): run one launcher per node"),
        ("fifo", "the launcher would fail open and ignore the producer"),
        ("standalone", "PET_STANDALONE=1 makes torchrun replace any --rdzv-backend with c10d"),
        (
            "requeued",
            (
                "this array task was requeued (SLURM_RESTART_COUNT=1): submit job arrays "
                "with sbatch --no-requeue"
            ),
        ),
    ],
)
def test_each_problem_fails_with_its_fix(tmp_path, case, message):
    directory, env = str(tmp_path), {**slurm_env(task=4, array_job=500), **STEP}
    if case == "missing":
        directory = str(tmp_path / "missing")
    elif case == "file":
        directory = str(tmp_path / "file")
        (tmp_path / "file").touch()
    elif case == "relative":
        directory = "shc"
    elif case == "no-slurm":
        env = {}
    elif case == "two-per-node":
        env["SLURM_STEP_TASKS_PER_NODE"] = "2(x2)"
    elif case == "fifo":
        os.mkfifo(tmp_path / "segment_health_check.500.4")
    elif case == "requeued":
        env["SLURM_RESTART_COUNT"] = "1"
    elif case == "standalone":
        env["PET_STANDALONE"] = "1"
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


def test_a_directory_everyone_can_write_is_a_warning_with_the_fix(tmp_path):
    tmp_path.chmod(0o777)
    done = doctor("--dir", str(tmp_path), env={**slurm_env(task=4, array_job=500), **STEP})
    assert done.returncode == 0, done.stdout  # a warning, not a failure
    assert (
        f"warn  decision directory {tmp_path} (owner root, mode 0777) is writable by "
        "its group and every user without the sticky bit" in done.stdout
    )
    tmp_path.chmod(0o1777)
    done = doctor("--dir", str(tmp_path), env={**slurm_env(task=4, array_job=500), **STEP})
    assert "sticky" not in done.stdout
    assert (
        f"ok    no other account can replace or remove another's decision in {tmp_path}"
        in done.stdout
    )


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


@pytest.mark.parametrize("target", ["unhealthy", "empty", "dangling"])
def test_a_symlink_named_like_the_decision_is_reported_not_judged(tmp_path, target):
    """Whatever the planted symlink points to (a secret, an empty file, nothing), doctor
    says the decision path is a symlink and does not judge the target."""
    shc = tmp_path / "shc"
    shc.mkdir()
    secret = tmp_path / "secret"
    if target == "unhealthy":
        secret.write_text("root's secret\n")
        secret.chmod(0o600)
    elif target == "empty":
        secret.touch()
    decision = shc / "segment_health_check.500.4"
    decision.symlink_to(secret)
    done = doctor("--dir", str(shc), "--json", env={**slurm_env(task=4, array_job=500), **STEP})
    assert done.returncode == 0, done.stdout  # a warning, not a failure
    findings = json.loads(done.stdout)["findings"]
    [warning] = [f["message"] for f in findings if f["level"] == "warn"]
    assert warning.startswith(f"{decision} is ") and "symbolic link" in warning
    assert "root's secret" not in done.stdout
    assert not any(f["message"].startswith("decision now") for f in findings)
