"""The launch shape the segment health check relies on, proven by real Slurm.

No torch here: the tasks record their environment, and the tests check it against
``nvrx_seghealth``'s view of the allocation unit and the decision-file name.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from nvrx_seghealth import AllocationUnit, decision_file_path

if TYPE_CHECKING:
    from harness.services.slurm import SlurmCluster

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(90)]

#: Where a producer would publish decisions; only used to build names, never read.
DECISIONS = "/shared/job/segment-health-check"

#: The launch shape the spec requires: one launcher per node, process 0 ends the step.
SRUN = ("srun", "--kill-on-bad-exit=1", "-N2", "--ntasks-per-node=1")


def _script(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o755)
    return path


def _record_env_script(directory: Path) -> Path:
    """A task that saves its environment as ``env.<SLURM_JOB_ID>.<SLURM_PROCID>``."""
    return _script(
        directory / "record-env.sh",
        '#!/bin/sh\nenv -0 >"$(dirname "$0")/env.$SLURM_JOB_ID.$SLURM_PROCID"\n',
    )


def _step_script(directory: Path, task: Path) -> Path:
    """A batch script whose one step runs ``task`` in the spec's launch shape."""
    return _script(directory / "step.sbatch", f"#!/bin/sh\nexec {' '.join(SRUN)} {task}\n")


def _recorded_envs(directory: Path) -> list[dict[str, str]]:
    envs = []
    for path in sorted(directory.glob("env.*")):
        entries = path.read_text().split("\0")
        envs.append(dict(entry.split("=", 1) for entry in entries if entry))
    return envs


def _wait_for_file(path: Path, timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            pytest.fail(f"{path} not written within {timeout}s", pytrace=False)
        time.sleep(0.1)
    return path.read_text().strip()


def test_srun_runs_one_task_per_node(slurm_cluster: SlurmCluster) -> None:
    out = slurm_cluster.run(*SRUN, "sh", "-c", 'echo "$SLURM_PROCID $SLURMD_NODENAME"').stdout
    rows = sorted(line.split() for line in out.splitlines())
    assert [procid for procid, _ in rows] == ["0", "1"]
    nodes = {node for _, node in rows}
    assert len(nodes) == 2 and nodes <= set(slurm_cluster.nodes)


def test_array_task_unit_is_array_job_id_and_task_id(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    batch = _step_script(tmp_path, _record_env_script(tmp_path))
    array_job_id = slurm_cluster.sbatch(
        "--array=0-2", "--no-requeue", "-N2", "--ntasks-per-node=1",
        f"--chdir={tmp_path}", f"--output={tmp_path}/slurm-%A_%a.out", str(batch),
    )  # fmt: skip
    jobs = slurm_cluster.wait_job(array_job_id)
    assert sorted((job.fields["ArrayTaskId"], job.state, job.exit_code) for job in jobs) == [
        (task, "COMPLETED", (0, 0)) for task in ("0", "1", "2")
    ]
    assert {job.fields["Requeue"] for job in jobs} == {"0"}, "--no-requeue reached every task"
    job_id_of_task = {job.fields["ArrayTaskId"]: job.job_id for job in jobs}

    envs = _recorded_envs(tmp_path)
    assert len(envs) == 6, "two launchers for each of three array tasks"
    for task in ("0", "1", "2"):
        launchers = [env for env in envs if env["SLURM_ARRAY_TASK_ID"] == task]
        assert sorted(env["SLURM_PROCID"] for env in launchers) == ["0", "1"]
        assert len({env["SLURMD_NODENAME"] for env in launchers}) == 2
        assert {env["SLURM_JOB_ID"] for env in launchers} == {job_id_of_task[task]}
        assert {env["SLURM_ARRAY_JOB_ID"] for env in launchers} == {array_job_id}

    # Only the last task keeps the array's own id as its job id: SLURM_JOB_ID alone
    # cannot name an array task's decision.
    assert {task for task, job_id in job_id_of_task.items() if job_id == array_job_id} == {"2"}

    for env in envs:
        unit = AllocationUnit.from_env(env)
        assert unit is not None and unit.is_array
        assert unit.procid == env["SLURM_PROCID"]
        assert decision_file_path(DECISIONS, unit.job_id, unit.task_id) == (
            f"{DECISIONS}/segment_health_check."
            f"{env['SLURM_ARRAY_JOB_ID']}.{env['SLURM_ARRAY_TASK_ID']}"
        )


def test_regular_job_unit_is_job_id_twice(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    batch = _step_script(tmp_path, _record_env_script(tmp_path))
    job_id = slurm_cluster.sbatch(
        "-N2", "--ntasks-per-node=1", f"--chdir={tmp_path}", f"--output={tmp_path}/slurm-%j.out",
        str(batch),
    )  # fmt: skip
    [job] = slurm_cluster.wait_job(job_id)
    assert (job.state, job.exit_code) == ("COMPLETED", (0, 0))

    envs = _recorded_envs(tmp_path)
    assert sorted(env["SLURM_PROCID"] for env in envs) == ["0", "1"]
    for env in envs:
        assert not [key for key in env if key.startswith("SLURM_ARRAY_")]
        assert env["SLURM_JOB_ID"] == job_id
        unit = AllocationUnit.from_env(env)
        assert unit == AllocationUnit(job_id, job_id, is_array=False, procid=env["SLURM_PROCID"])
        assert decision_file_path(DECISIONS, unit.job_id, unit.task_id) == (
            f"{DECISIONS}/segment_health_check.{job_id}.{job_id}"
        )


def test_process_zero_failure_ends_the_step(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    # Process 0 exits 3 after 1 s; process 1 would run 60 s and notes its SIGTERM.
    task = _script(
        tmp_path / "task.sh",
        "#!/bin/bash\n"
        'if [ "$SLURM_PROCID" = 0 ]; then sleep 1; exit 3; fi\n'
        'trap \'echo TERM >"$(dirname "$0")/term.$SLURM_PROCID"; exit 143\' TERM\n'
        "sleep 60 & wait\n",
    )
    batch = _step_script(tmp_path, task)
    started = time.monotonic()
    job_id = slurm_cluster.sbatch(
        "-N2", "--ntasks-per-node=1", "--no-requeue", f"--chdir={tmp_path}",
        f"--output={tmp_path}/out.txt", str(batch),
    )  # fmt: skip
    [job] = slurm_cluster.wait_job(job_id, timeout=45)
    assert time.monotonic() - started < 45, "process 1 was not terminated early (60 s)"

    assert (tmp_path / "term.1").read_text() == "TERM\n"
    # srun exits with the largest task exit code: the terminated sibling's 143 hides
    # process 0's 3, which only srun's stderr names.
    assert (job.state, job.exit_code) == ("FAILED", (143, 0))
    assert "task 0: Exited with exit code 3" in (tmp_path / "out.txt").read_text()


def test_drain_does_not_evict_a_running_task(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    task = _script(
        tmp_path / "task.sh",
        "#!/bin/sh\n"
        'dir=$(dirname "$0")\n'
        'echo "$SLURMD_NODENAME" >"$dir/node.tmp" && mv "$dir/node.tmp" "$dir/node"\n'
        'i=0; while [ ! -e "$dir/go" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done\n'
        '[ -e "$dir/go" ]\n',
    )
    job_id = slurm_cluster.sbatch(
        "-N1", "--no-requeue", f"--chdir={tmp_path}", f"--output={tmp_path}/out.txt",
        f"--wrap=exec srun {task}",
    )  # fmt: skip
    node = _wait_for_file(tmp_path / "node")
    try:
        slurm_cluster.run("scontrol", "update", f"nodename={node}", "state=drain", "reason=test")
        assert slurm_cluster.state_of(node) == "drng"
        time.sleep(1)  # give Slurm the chance to evict, which it must not take
        [job] = slurm_cluster.jobs(job_id)
        assert job.state == "RUNNING"
        assert slurm_cluster.state_of(node) == "drng"
    finally:
        (tmp_path / "go").touch()
    try:
        [job] = slurm_cluster.wait_job(job_id)
        assert (job.state, job.exit_code) == ("COMPLETED", (0, 0))
        assert slurm_cluster.state_of(node) == "drain"
    finally:
        slurm_cluster.run("scontrol", "update", f"nodename={node}", "state=resume")
    # A resumed node reads idle* (not responding) for a moment before it is idle.
    deadline = time.monotonic() + 15
    while (state := slurm_cluster.state_of(node)) != "idle":
        assert time.monotonic() < deadline, f"{node} is {state!r}, not idle, after resume"
        time.sleep(0.1)
