"""A private, real Slurm cluster as the tests drive it: its client commands
(:class:`SlurmCluster`), its job records (:class:`Job`), its nodes' states, and a
``publish-drained`` woken by a Slurm trigger.

The cluster itself is started by the ``slurm_cluster`` fixture
(``integration/slurm/conftest.py``); the example job script run through it is
:mod:`harness.jobs.slurmjob`.
"""

from __future__ import annotations

import functools
import re
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.commands import COMMAND
from harness.waits import wait_until

__all__ = [
    "FINISHED_STATES",
    "PROGRAM",
    "Job",
    "SlurmCluster",
    "drained",
    "node_state",
    "running_nodes",
    "running_producer",
    "trigger",
]

#: The program of the producer's Slurm trigger: it wakes a running ``publish-drained``.
PROGRAM = Path(__file__).resolve().parents[2] / "examples" / "publish-drained-now.sh"

#: Job states after which ``scontrol show job`` no longer changes.
FINISHED_STATES = frozenset(
    {
        "BOOT_FAIL",
        "CANCELLED",
        "COMPLETED",
        "DEADLINE",
        "FAILED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "TIMEOUT",
    }
)


@dataclass(frozen=True)
class Job:
    """One record of ``scontrol show job``: a job, or one task of a job array."""

    fields: dict[str, str]

    @property
    def job_id(self) -> str:
        return self.fields["JobId"]

    @property
    def state(self) -> str:
        return self.fields["JobState"]

    @property
    def exit_code(self) -> tuple[int, int]:
        """``ExitCode=status:signal`` as integers."""
        status, signal = self.fields["ExitCode"].split(":")
        return int(status), int(signal)


@dataclass(frozen=True)
class SlurmCluster:
    """A running private cluster; ``env`` is what its client commands need."""

    state_dir: Path
    env: dict[str, str]
    nodes: tuple[str, ...]

    def run(
        self, *args: str, timeout: float = 30, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Run a command (``srun``, ``sbatch``, ``scontrol``, ...) against this cluster.

        Output is captured as text; ``check`` fails the test on a non-zero exit.
        """
        result = subprocess.run(
            args,
            env=self.env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and result.returncode != 0:
            pytest.fail(
                f"{' '.join(args)} exited {result.returncode}\n"
                f"--- stdout\n{result.stdout}--- stderr\n{result.stderr}",
                pytrace=False,
            )
        return result

    def sbatch(self, *args: str) -> str:
        """Submit a batch job; return its job id (the array job id for an array)."""
        return self.run("sbatch", "--parsable", *args).stdout.strip().split(";")[0]

    def jobs(self, job_id: str) -> list[Job]:
        """Read ``scontrol show job``: one record per job, or per task of an array."""
        out = self.run("scontrol", "show", "job", "--oneliner", job_id).stdout
        return [
            Job(dict(re.findall(r"(?:^|\s)([^\s=]+)=(\S*)", line)))
            for line in out.splitlines()
            if line.strip()
        ]

    def state_of(self, node: str) -> str:
        """``node``'s state as ``sinfo``'s compact form writes it (``idle``, ``drng``,
        ``idle*`` ...)."""
        return self.run("sinfo", "-h", "-N", "-n", node, "-o", "%t").stdout.strip()

    def wait_job(self, job_id: str, timeout: float = 60) -> list[Job]:
        """Wait until every record of ``job_id`` has finished; return the records."""
        deadline = time.monotonic() + timeout
        while True:
            jobs = self.jobs(job_id)
            if all(job.state in FINISHED_STATES for job in jobs):
                return jobs
            if time.monotonic() > deadline:
                pytest.fail(
                    f"job {job_id} not finished after {timeout}s: "
                    + ", ".join(f"{job.job_id}={job.state}" for job in jobs),
                    pytrace=False,
                )
            time.sleep(0.2)


def running_nodes(cluster: SlurmCluster, job_id: str) -> dict[str, list[str]]:
    """The running array tasks of ``job_id``, each with its nodes (by ``squeue``)."""
    out = cluster.run("squeue", "-j", job_id, "-r", "-h", "-t", "R", "-o", "%K %N").stdout
    return {
        task: cluster.run("scontrol", "show", "hostnames", hostlist).stdout.split()
        for task, hostlist in (line.split() for line in out.splitlines())
    }


def _responds(cluster: SlurmCluster, node: str) -> bool:
    """Whether ``node`` is back in service (a resumed node reads "not responding" (*) for
    a moment; that is unavailable too)."""
    return cluster.state_of(node) in ("idle", "alloc", "mix")


@contextmanager
def node_state(cluster: SlurmCluster, node: str, state: str, reason: str) -> Iterator[None]:
    """Put ``node`` in ``state``; always resume it and wait until it responds again."""
    try:
        cluster.run("scontrol", "update", f"nodename={node}", f"state={state}", f"reason={reason}")
        yield
    finally:
        cluster.run("scontrol", "update", f"nodename={node}", "state=resume", check=False)
        wait_until(functools.partial(_responds, cluster, node))


@contextmanager
def drained(cluster: SlurmCluster, nodes: list[str], reason: str) -> Iterator[None]:
    """Drain ``nodes`` in one update; always resume them and wait until they respond."""
    names = ",".join(nodes)
    try:
        cluster.run("scontrol", "update", f"nodename={names}", "state=drain", f"reason={reason}")
        yield
    finally:
        cluster.run("scontrol", "update", f"nodename={names}", "state=resume", check=False)
        for node in nodes:
            wait_until(functools.partial(_responds, cluster, node))


@contextmanager
def trigger(cluster: SlurmCluster, event: str, program: str) -> Iterator[None]:
    """A permanent node trigger on every node for ``event``; cleared at the end."""
    cluster.run("strigger", "--set", "--node", f"--{event}", "--flags=PERM", f"--program={program}")
    rows = cluster.run("strigger", "--get", "--noheader").stdout.splitlines()
    ids = [row.split()[0] for row in rows if row.rstrip().endswith(program)]
    assert len(ids) == 1, rows
    try:
        yield
    finally:
        cluster.run("strigger", "--clear", f"--id={ids[0]}", check=False)


def _pass_done(process: subprocess.Popen[str]) -> None:
    assert process.stdout is not None
    for line in process.stdout:
        if "pass done" in line:
            return
    raise AssertionError("the producer ended before its first pass")


@contextmanager
def running_producer(
    cluster: SlurmCluster, job_id: str, shc: Path, pid_file: Path
) -> Iterator[subprocess.Popen[str]]:
    """``publish-drained --interval 600 --pid-file pid_file`` for ``job_id`` into ``shc``,
    once its first pass is done; afterwards it must stop on SIGTERM with exit 0 and
    remove its pid file (it is killed and reaped in any case)."""
    command = [
        *COMMAND, "publish-drained", "--dir", str(shc), "--job-id", job_id,
        "--interval", "600", "--pid-file", str(pid_file), "--producer-id", "t",
        "--slurm-timeout", "10",
    ]  # fmt: skip
    process = subprocess.Popen(
        command,
        env=cluster.env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _pass_done(process)
        yield process
        process.terminate()
        assert process.wait(timeout=30) == 0
        assert not pid_file.exists()
    finally:
        process.kill()
        process.communicate()
