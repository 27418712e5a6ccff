"""``nvrx-seghealth check``: the consumer's decision, exit 0 proceed / 1 excluded / 2 usage."""

from __future__ import annotations

import json
import os
import re

import pytest

from harness.commands import nvrx_seghealth
from harness.slurmenv import slurm_env
from nvrx_seghealth import publish_decision


@pytest.fixture
def shc(tmp_path):
    directory = tmp_path / "shc"
    directory.mkdir()
    return directory


def check(shc, *args, env=None):
    return nvrx_seghealth("check", "--dir", str(shc), *args, env=env)


_VERDICT = re.compile(
    r"(PROCEED \(fail open\)|PROCEED|EXCLUDED)  job_id=(\S+) task_id=(\S+): ([a-z-]+): "
)


def verdict(done):
    """The first line's tokens: verdict, job_id, task_id and the outcome."""
    match = _VERDICT.match(done.stdout)
    assert match, done.stdout
    return match.groups()


def test_a_missing_decision_proceeds(shc):
    done = check(shc, "--job-id", "12", "--task-id", "3")
    assert done.returncode == 0, done.stderr
    assert verdict(done) == ("PROCEED", "12", "3", "absent")
    assert f"decision file: {shc}/segment_health_check.12.3" in done.stdout
    assert "\033[" not in done.stdout  # not a terminal: no colours


def test_an_empty_decision_proceeds(shc):
    (shc / "segment_health_check.12.3").touch()
    done = check(shc, "--job-id", "12", "--task-id", "3")
    assert done.returncode == 0
    assert verdict(done) == ("PROCEED", "12", "3", "clear")


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
    assert verdict(done) == ("PROCEED (fail open)", "12", "3", "not-a-regular-file")


def test_slurm_environment_names_the_unit_whatever_the_procid(shc):
    publish_decision(str(shc), "500", "4", "bad")
    done = check(shc, env=slurm_env(task=4, procid=1, array_job=500))
    assert done.returncode == 1
    assert verdict(done) == ("EXCLUDED", "500", "4", "unhealthy")


def test_regular_job_and_directory_from_the_environment(shc):
    done = nvrx_seghealth(
        "check", env={**slurm_env(job=77), "NVRX_SEGMENT_HEALTH_CHECK_DIR": str(shc)}
    )
    assert done.returncode == 0
    assert f"{shc}/segment_health_check.77.77" in done.stdout


def test_a_missing_directory_proceeds_with_a_hint(tmp_path, shc):
    missing = tmp_path / "missing"
    done = check(missing, "--job-id", "12", "--task-id", "3")
    assert done.returncode == 0
    assert verdict(done) == ("PROCEED", "12", "3", "absent")
    assert f"hint: decision directory {missing} " in done.stdout
    done = check(missing, "--job-id", "12", "--task-id", "3", "--json")
    report = json.loads(done.stdout)
    assert (report["outcome"], report["proceed"]) == ("absent", True)
    assert str(missing) in report["hint"] and "--dir" in report["hint"]
    done = check(shc, "--job-id", "12", "--task-id", "3", "--json")  # the directory exists
    assert json.loads(done.stdout)["hint"] is None


def test_a_root_of_per_job_folders_proceeds_with_a_hint(tmp_path):
    """The launchers read ``<root>/<array job id>``: a missing decision in the root says
    nothing of the unit, and the hint names the job's folder."""
    root = tmp_path / "segment-health-check"
    (root / "12").mkdir(parents=True)
    publish_decision(str(root / "12"), "12", "3", "n7: ECC")
    done = check(root, "--job-id", "12", "--task-id", "3", "--json")
    report = json.loads(done.stdout)
    assert (done.returncode, report["outcome"]) == (0, "absent")
    assert f"--dir {root / '12'}" in report["hint"]
    done = check(root / "12", "--job-id", "12", "--task-id", "3", "--json")
    assert (done.returncode, json.loads(done.stdout)["hint"]) == (1, None)


def test_no_nested_brackets_in_the_verdict(shc):
    publish_decision(str(shc), "12", "3", "n7 drained\n")
    line = check(shc, "--job-id", "12", "--task-id", "3").stdout.splitlines()[0]
    assert line == "EXCLUDED  job_id=12 task_id=3: unhealthy: non-empty decision file (11 bytes)"


@pytest.mark.parametrize(
    "args,env,named",
    [
        (["--dir", "rel/shc", "--job-id", "1", "--task-id", "1"], {}, ["--dir", "'rel/shc'"]),
        (["--job-id", "1", "--task-id", "1"], {}, ["--dir", "NVRX_SEGMENT_HEALTH_CHECK_DIR"]),
        (["--dir", "/shc", "--job-id", "1"], {}, ["--job-id", "--task-id"]),
        (["--dir", "/shc"], {}, ["SLURM_JOB_ID", "--job-id", "--task-id"]),
        (["--dir", "/shc"], {"SLURM_JOB_ID": "../x"}, ["SLURM_JOB_ID", "'../x'"]),
        (["--dir", "/shc", "--job-id", "../x", "--task-id", "1"], {}, ["--job-id", "'../x'"]),
        (
            ["--dir", "/shc", "--job-id", "123_7", "--task-id", "7"],
            {},
            ["'123_7'", "give --job-id 123 --task-id 7"],  # the fix docs/operators.md states
        ),
    ],
)
def test_usage_errors_exit_2_naming_what_is_wrong(args, env, named):
    done = nvrx_seghealth("check", *args, env=env)
    assert (done.returncode, done.stdout) == (2, "")
    assert "nvrx-seghealth check: error: " in done.stderr
    for name in named:
        assert name in done.stderr
