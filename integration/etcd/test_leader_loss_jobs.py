"""Whole jobs on a three-member etcd whose leader is killed: while the launchers gather,
while the world trains, and while the launchers wait in torchrun's exit barrier.

Three one-node array tasks run real ``torchrun`` on ``etcd-v2`` through ``segment-health``
(the check on), each beside the same job on plain ``torchrun --rdzv-backend=etcd-v2``.
The launchers name the leader, which dies. The worker is ``leader_loss_worker.py``.

- *gather*: once the three launchers joined, in the rendezvous's last call
  (``--nnodes=3:4``), the leader is killed: each one's heartbeat, written every second,
  meets the election.
- *train*: once every worker trains, the leader is killed; training stops 10 s later.
- *exit barrier*: task 2's worker exits only when told; once tasks 0 and 1 wait in the
  exit barrier, the leader is killed and task 2's worker released.

With ``segment-health`` every launcher exits 0 and one world of three trains. Plain
torchrun's outcome is printed beside it, its job cut at :data:`PLAIN_TIMEOUT`; measured:
it loses the gather (every launcher exits 1) and hangs in the exit barrier.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.common import AT_ONCE_BOUND, wait_until
from harness.launcherjob import launcher_env, slurm_task

pytestmark = pytest.mark.etcd

WORKER = Path(__file__).with_name("leader_loss_worker.py")
TASKS = (0, 1, 2)
#: Bound for one job: about 20-40 s on two busy cores.
JOB_TIMEOUT = 240.0
#: Seconds a job has to reach a phase (two launchers rendezvousing, a world training).
PHASE_BOUND = 2 * AT_ONCE_BOUND
#: Bound for plain torchrun's job: its launchers can wait out torch's 300 s exit barrier.
PLAIN_TIMEOUT = 45.0
RENDEZVOUS = "Rendezvous'ing worker group"
#: Seconds of the rendezvous's last call (``last_call_timeout``).
LAST_CALL = 10
BARRIER = "Waiting 300 seconds for other agents to finish"


@dataclass(frozen=True)
class Outcome:
    """One job's end: each launcher's exit code and output."""

    returncodes: tuple[int | None, ...]
    outputs: tuple[str, ...]

    def worlds(self) -> list[str]:
        return [w for out in self.outputs for w in re.findall(r"leader-loss formed .*", out)]


class Job:
    """Three launchers of one job (started one by one), their logs in ``workdir``."""

    def __init__(self, backend: str, endpoint: str, workdir: Path) -> None:
        self.workdir = workdir
        self.stop = workdir / "stop"
        self.release = workdir / "release"
        # --nnodes=3:4 with three launchers: a last call of LAST_CALL seconds once all
        # three joined, each writing its heartbeat every second meanwhile.
        conf = (
            f"join_timeout=120,last_call_timeout={LAST_CALL},"
            "keep_alive_interval=1,keep_alive_max_attempt=20"
        )
        if backend == "segment-health":
            conf = f"inner_backend=etcd-v2,segment_health_check_dir={workdir},{conf}"
        self.argv = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nnodes=3:4",
            "--nproc-per-node=1",
            "--max-restarts=0",
            "--monitor-interval=1",
            f"--rdzv-backend={backend}",
            f"--rdzv-endpoint={endpoint}",
            f"--rdzv-id=run-{uuid.uuid4().hex[:8]}",
            f"--rdzv-conf={conf}",
            str(WORKER),
        ]
        self.processes: dict[int, subprocess.Popen[bytes]] = {}

    def start(self, task: int, hold: bool = False) -> None:
        env = launcher_env(
            **slurm_task(task),
            LEADER_LOSS_STOP=str(self.stop),
            TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1",
            LOGLEVEL="INFO",
        )
        if hold:
            env["LEADER_LOSS_EXIT"] = str(self.release)
        with self.log(task).open("wb") as sink:
            self.processes[task] = subprocess.Popen(
                self.argv,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def log(self, task: int) -> Path:
        return self.workdir / f"task{task}.log"

    def said(self, text: str, tasks: tuple[int, ...]) -> bool:
        """Whether each of ``tasks`` printed ``text`` (or ended)."""
        return all(
            text in self.log(t).read_text(errors="replace") or self.processes[t].poll() is not None
            for t in tasks
        )

    def wait_for(self, text: str, tasks: tuple[int, ...]) -> None:
        """Wait until :meth:`said`, at most :data:`PHASE_BOUND` seconds: a job that
        never gets there goes on, and its end tells."""
        with contextlib.suppress(AssertionError):
            wait_until(lambda: self.said(text, tasks), timeout=PHASE_BOUND)

    def end(self, timeout: float = JOB_TIMEOUT) -> Outcome:
        """Each launcher's end; one still running after ``timeout`` seconds in all is
        killed (its exit code is then ``-9``)."""
        deadline = time.monotonic() + timeout
        try:
            for process in self.processes.values():
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(timeout=max(0.0, deadline - time.monotonic()))
        finally:
            for process in self.processes.values():
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)  # the launcher's workers too
                process.wait()
        return Outcome(
            tuple(self.processes[t].returncode for t in TASKS),
            tuple(self.log(t).read_text(errors="replace") for t in TASKS),
        )


def _gather(job: Job, cluster) -> None:
    for task in TASKS:
        job.start(task)
    job.wait_for(RENDEZVOUS, TASKS)
    time.sleep(2)  # all three joined: the last call runs, each writes its heartbeat
    cluster.kill_leader()
    job.wait_for("leader-loss formed", TASKS)
    job.stop.touch()


def _train(job: Job, cluster) -> None:
    for task in TASKS:
        job.start(task)
    job.wait_for("leader-loss formed", TASKS)
    cluster.kill_leader()
    time.sleep(10)  # torchrun's monitor and torch's keep-alive meet the election
    job.stop.touch()


def _exit_barrier(job: Job, cluster) -> None:
    for task in TASKS:
        job.start(task, hold=task == 2)
    job.wait_for("leader-loss formed", TASKS)
    job.stop.touch()
    job.wait_for(BARRIER, (0, 1))
    cluster.kill_leader()
    time.sleep(0.5)
    job.release.touch()


PHASES = {"gather": _gather, "train": _train, "exit-barrier": _exit_barrier}


def _named(cluster) -> str:
    """The member the launchers name: the leader, which dies."""
    return cluster.leader().server.endpoint


@pytest.mark.parametrize("phase", list(PHASES))
def test_the_job_completes_when_the_etcd_leader_is_lost(phase, etcd_cluster, tmp_path) -> None:
    """segment-health: every launcher exits 0 and one world of three trained."""
    job = Job("segment-health", _named(etcd_cluster), tmp_path)
    PHASES[phase](job, etcd_cluster)
    outcome = job.end()
    print(f"segment-health, leader lost at {phase}: exits {outcome.returncodes}")
    for task, output in zip(TASKS, outcome.outputs):
        print(f"--- task{task}:\n" + "\n".join(_retry_lines(output)))
    assert outcome.returncodes == (0, 0, 0)
    assert sorted(outcome.worlds()) == [f"leader-loss formed rank={r} world=3" for r in range(3)]


@pytest.mark.parametrize("phase", list(PHASES))
def test_plain_torchrun_beside_it(phase, etcd_cluster, tmp_path) -> None:
    """Plain torchrun on etcd-v2 in the same scenario, for the comparison: its outcome is
    printed. The wrapper is never worse: every segment-health run above exits 0."""
    job = Job("etcd-v2", _named(etcd_cluster), tmp_path)
    PHASES[phase](job, etcd_cluster)
    outcome = job.end(PLAIN_TIMEOUT)
    print(f"plain etcd-v2, leader lost at {phase}: exits {outcome.returncodes}")
    for task, output in zip(TASKS, outcome.outputs):
        errors = re.findall(r"\w*(?:Error|Exception)\b: .{0,160}", output)
        print(f"--- task{task}: {sorted(set(errors))[:3]}")
    assert all(code is not None for code in outcome.returncodes)


def _retry_lines(output: str) -> list[str]:
    return [line[-300:] for line in output.splitlines() if "retry=" in line]
