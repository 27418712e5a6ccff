"""``nvrx-seghealth check``: the consumer's decision, exit 0 proceed / 1 excluded / 2 usage."""

from __future__ import annotations

import json
import os

import pytest

from nvrx_seghealth import publish_decision

from ..support import slurm_env
from .runner import nvrx_seghealth


@pytest.fixture
def shc(tmp_path):
    directory = tmp_path / "shc"
    directory.mkdir()
    return directory


def check(shc, *args, env=None):
    return nvrx_seghealth("check", "--dir", str(shc), *args, env=env)


def test_a_missing_decision_proceeds(shc):
    done = check(shc, "--job-id", "12", "--task-id", "3")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("PROCEED  job_id=12 task_id=3: absent: no decision file")
    assert f"decision file: {shc}/segment_health_check.12.3" in done.stdout
    assert "\033[" not in done.stdout  # not a terminal: no colours


def test_an_empty_decision_proceeds(shc):
    (shc / "segment_health_check.12.3").touch()
    done = check(shc, "--job-id", "12", "--task-id", "3")
    assert done.returncode == 0
    assert "PROCEED  job_id=12 task_id=3: clear: empty decision file" in done.stdout


def test_a_non_empty_decision_excludes_with_json(shc):
    path = publish_decision(str(shc), "12", "3", "n7 drained\n")
    done = check(shc, "--job-id", "12", "--task-id", "3", "--json")
    assert done.returncode == 1
    assert json.loads(done.stdout) == {
        "path": path,
        "job_id": "12",
        "task_id": "3",
        "outcome": "unhealthy",
        "reason": "non-empty decision file (11 bytes)",
        "size": 11,
        "proceed": False,
        "hint": None,
    }


def test_a_fifo_fails_open_without_blocking(shc):
    os.mkfifo(shc / "segment_health_check.12.3")  # opening it for reading would block
    done = check(shc, "--job-id", "12", "--task-id", "3")
    assert done.returncode == 0
    assert (
        "PROCEED (fail open)  job_id=12 task_id=3: not-a-regular-file: not a regular "
        "file: FIFO" in done.stdout
    )


def test_slurm_environment_names_the_unit_whatever_the_procid(shc):
    publish_decision(str(shc), "500", "4", "bad")
    done = check(shc, env=slurm_env(task=4, procid=1, array_job=500))
    assert done.returncode == 1
    assert "EXCLUDED  job_id=500 task_id=4" in done.stdout


def test_regular_job_and_directory_from_the_environment(shc):
    done = nvrx_seghealth(
        "check", env={**slurm_env(job=77), "NVRX_SEGMENT_HEALTH_CHECK_DIR": str(shc)}
    )
    assert done.returncode == 0
    assert f"{shc}/segment_health_check.77.77" in done.stdout


def test_a_missing_directory_proceeds_with_a_hint(tmp_path):
    missing = tmp_path / "missing"
    done = check(missing, "--job-id", "12", "--task-id", "3")
    assert done.returncode == 0
    assert done.stdout.startswith("PROCEED  job_id=12 task_id=3: absent: no decision file")
    assert f"hint: decision directory {missing} does not exist" in done.stdout
    assert "fix --dir" in done.stdout
    done = check(missing, "--job-id", "12", "--task-id", "3", "--json")
    assert "does not exist" in json.loads(done.stdout)["hint"]


def test_no_nested_brackets_in_the_verdict(shc):
    publish_decision(str(shc), "12", "3", "n7 drained\n")
    line = check(shc, "--job-id", "12", "--task-id", "3").stdout.splitlines()[0]
    assert line == "EXCLUDED  job_id=12 task_id=3: unhealthy: non-empty decision file (11 bytes)"


@pytest.mark.parametrize(
    "args,env,message",
    [
        (
            ["--dir", "rel/shc", "--job-id", "1", "--task-id", "1"],
            {},
            "--dir must be an absolute path",
        ),
        (
            ["--job-id", "1", "--task-id", "1"],
            {},
            "no decision directory: give --dir DIR or set NVRX_SEGMENT_HEALTH_CHECK_DIR",
        ),
        (["--dir", "/shc", "--job-id", "1"], {}, "give --job-id and --task-id together"),
        (["--dir", "/shc"], {}, "not inside a Slurm job (no SLURM_JOB_ID): give --job-id"),
        (["--dir", "/shc"], {"SLURM_JOB_ID": "../x"}, "invalid Slurm identity"),
        (["--dir", "/shc", "--job-id", "../x", "--task-id", "1"], {}, "is not a decimal Slurm id"),
        (
            ["--dir", "/shc", "--job-id", "123_7", "--task-id", "7"],
            {},
            "'123_7' is squeue's <array job id>_<task id>: give --job-id 123 --task-id 7",
        ),
    ],
)
def test_usage_errors_exit_2_with_the_fix(args, env, message):
    done = nvrx_seghealth("check", *args, env=env)
    assert done.returncode == 2
    assert message in done.stderr
    assert done.stdout == ""
