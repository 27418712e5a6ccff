"""The pre-flight's findings, from an environment and a real directory, in-process.

``nvrx-seghealth doctor`` prints them (``tests/commands/test_doctor.py``); here each rule
is held on its own: one ``FAIL`` per problem, with its fix.
"""

from __future__ import annotations

import os
import re

import pytest

from harness.slurmenv import slurm_env
from nvrx_seghealth import publish_decision
from nvrx_seghealth._decision.preflight import Finding, Level, preflight

#: Two nodes, one launcher on each, as ``srun --ntasks-per-node=1`` gives.
STEP = {"SLURM_STEP_TASKS_PER_NODE": "1(x2)"}
#: Process 0 of array task 4 of job 500.
TASK = {**slurm_env(task=4, array_job=500), **STEP}


def levels(findings: list[Finding]) -> list[str]:
    return [finding.level.value for finding in findings]


def messages(findings: list[Finding], level: Level) -> list[str]:
    return [finding.message for finding in findings if finding.level is level]


def test_a_good_setup_on_process_0(tmp_path):
    findings = preflight(TASK, str(tmp_path), standalone=False)
    assert levels(findings) == [
        "ok",  # absolute
        "ok",  # exists
        "ok",  # nobody else writes
        "ok",  # identity
        "info",  # process 0
        "info",  # the decision file
        "ok",  # its stat's time
        "ok",  # the verdict
        "ok",  # one per node
        "hint",
        "hint",
        "hint",
    ]
    text = [finding.message for finding in findings]
    assert text[0] == f"decision directory {tmp_path} is absolute"
    assert re.fullmatch(rf"directory {tmp_path} exists \(stat took [0-9.]+ ms\)", text[1])
    assert text[3] == "Slurm identity: array task, job_id=500 task_id=4"
    assert text[4].startswith("SLURM_PROCID=0: this launcher installs the check")
    assert text[5] == f"process 0 of this unit consults {tmp_path}/segment_health_check.500.4"
    assert text[7] == "decision now: proceed (absent: no decision file)"
    assert text[9].startswith("start the launchers with srun --kill-on-bad-exit=1")
    assert text[10].startswith("never start the launchers with --standalone")
    assert text[11].startswith("give --rdzv-backend on the launcher's command line")


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("missing", "does not exist: create it on storage that every launcher mounts (mkdir -p"),
        ("file", "is not a directory: point --dir at the directory"),
        ("no-slurm", "not inside a Slurm job (no SLURM_JOB_ID): run doctor as the launchers run"),
        ("invalid-id", "invalid Slurm identity: "),
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
def test_each_problem_is_one_fail_with_its_fix(tmp_path, case, message):
    directory, env, standalone = str(tmp_path), dict(TASK), False
    if case == "missing":
        directory = str(tmp_path / "missing")
    elif case == "file":
        directory = str(tmp_path / "file")
        (tmp_path / "file").touch()
    elif case == "no-slurm":
        env = dict(STEP)
    elif case == "invalid-id":
        env["SLURM_ARRAY_TASK_ID"] = "x4"
    elif case == "two-per-node":
        env["SLURM_STEP_TASKS_PER_NODE"] = "2(x2)"
    elif case == "fifo":
        os.mkfifo(tmp_path / "segment_health_check.500.4")
    elif case == "standalone":
        env["PET_STANDALONE"] = "1"
        standalone = True
    elif case == "requeued":
        env["SLURM_RESTART_COUNT"] = "1"
    [fail] = messages(preflight(env, directory, standalone=standalone), Level.FAIL)
    assert message in fail


def test_without_a_usable_directory_the_launcher_is_still_looked_at():
    """The caller says why the setting is unusable; the identity and the launch shape
    follow, and no decision file is looked for."""
    findings = preflight(TASK, None, standalone=False)
    assert levels(findings) == ["ok", "info", "ok", "hint", "hint", "hint"]
    assert not any("consults" in finding.message for finding in findings)


def test_a_regular_job_requeued_is_no_problem(tmp_path):
    """Only an array task must not be requeued: its decision names it."""
    env = {**slurm_env(job=77), **STEP, "SLURM_RESTART_COUNT": "2"}
    assert messages(preflight(env, str(tmp_path), standalone=False), Level.FAIL) == []


def test_an_unknown_launch_shape_is_a_hint(tmp_path):
    findings = preflight(slurm_env(task=4, array_job=500), str(tmp_path), standalone=False)
    assert "run exactly one launcher per node (srun --ntasks-per-node=1)" in messages(
        findings, Level.HINT
    )


def test_other_launchers_and_a_marked_unit_are_reported_not_failed(tmp_path):
    publish_decision(str(tmp_path), "77", "77", "bad")
    findings = preflight({**slurm_env(job=77, procid=1), **STEP}, str(tmp_path), standalone=False)
    assert messages(findings, Level.FAIL) == []
    [role] = [message for message in messages(findings, Level.INFO) if "PROCID" in message]
    assert role.startswith("SLURM_PROCID=1: this launcher does not read the decision")
    [marked] = messages(findings, Level.WARN)
    assert marked.startswith("the unit is marked unhealthy (")


def test_a_directory_everyone_can_write_is_a_warning_with_the_fix(tmp_path):
    tmp_path.chmod(0o777)
    findings = preflight(TASK, str(tmp_path), standalone=False)
    [warning] = messages(findings, Level.WARN)
    assert warning.startswith(
        f"decision directory {tmp_path} (owner root, mode 0777) is writable by its group and "
        "every user without the sticky bit"
    )
    assert messages(findings, Level.FAIL) == []
    tmp_path.chmod(0o1777)
    findings = preflight(TASK, str(tmp_path), standalone=False)
    assert messages(findings, Level.WARN) == []
    assert f"no other account can replace or remove another's decision in {tmp_path}" in messages(
        findings, Level.OK
    )


def test_a_symlinked_directory_is_named_where_its_files_live(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    ok = messages(preflight(TASK, str(link), standalone=False), Level.OK)
    assert (
        f"no other account can replace or remove another's decision in {real} "
        f"(reached through {link})" in ok
    )


@pytest.mark.parametrize("target", ["unhealthy", "empty", "dangling"])
def test_a_symlink_named_like_the_decision_is_reported_not_judged(tmp_path, target):
    """Whatever the planted symlink points to (a secret, an empty file, nothing), the
    finding says the decision path is a symlink, and does not judge nor read the target."""
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
    findings = preflight(TASK, str(shc), standalone=False)
    [warning] = messages(findings, Level.WARN)
    assert warning.startswith(f"{decision} is ") and "symbolic link" in warning
    assert not any("root's secret" in finding.message for finding in findings)
    assert not any(finding.message.startswith("decision now") for finding in findings)
    assert messages(findings, Level.FAIL) == []
