"""Shared by the end-to-end tests: the example batch script, run through real Slurm.

Every end-to-end test submits ``examples/segment-health-array.sbatch`` itself, with
``sbatch`` against the private cluster, and overrides only the script's documented
``SEGHEALTH_*`` settings. Each launcher is a real ``torchrun --rdzv-backend=segment-health``
started by ``srun --kill-on-bad-exit=1``; the training is the package's simulation worker
(:mod:`nvrx_seghealth._demo.worker`), which records its rank, world and
``SLURM_ARRAY_TASK_ID``/``SLURM_PROCID``. The rendezvous store is the package's
:class:`~nvrx_seghealth._demo.store_host.StoreHost`: a TCPStore process of the test,
outside every allocation unit (launchers get ``is_host=false``).

What the tests assert comes from Slurm (``scontrol show job``, srun's stderr in the job
output, the ``SLURM_*`` values the tasks saw) and from the workers' records.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import re
import shlex
import signal
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from harness.commands import nvrx_seghealth
from harness.telemetry import exclusion_tokens
from nvrx_seghealth._demo.records import LAUNCHER_ENV, WorkerRecord, read_records
from nvrx_seghealth._demo.store_host import StoreHost
from nvrx_seghealth._errors import When
from nvrx_seghealth._settings.rdzv_conf import WATCH_INTERVAL_KEY

if TYPE_CHECKING:
    from harness.services.slurm import Job, SlurmCluster

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "segment-health-array.sbatch"

#: The training each launcher runs (arguments of the example script; torchrun's ``-m``).
WORKER_MODULE = "nvrx_seghealth._demo.worker"

#: Rendezvous settings for a 2-core machine shared with other test runs. Each value
#: keeps a launcher that srun killed (the excluded task's process 1) out of a completed
#: round: torch assigns ranks to every participant of a completed round, and if one of
#: them is dead, every agent fails after 60 s (DistStoreError, no restart).
#:
#: * join_timeout: bounds a rendezvous that cannot form; starting six launchers (python
#:   and torch imports) took up to 15 s here under load.
#: * keep_alive 1 s x 5: a launcher counts as dead 5 s after its last heartbeat. With
#:   x 2, a busy but live launcher (the drained task's process 0, before it reached the
#:   restart boundary) was declared dead; the next round opened early, its sibling joined
#:   it, and srun killed the sibling once process 0 was excluded: the round then failed.
#: * last_call_timeout=15, well beyond the keep-alive tolerance: the excluded task's
#:   process 1 may join a round before its process 0 publishes the marker (both start
#:   together); srun kills it once process 0 has exited (up to ~3 s later here), and the
#:   round must not complete before it counts as dead. (torch's defaults, 30 s against
#:   5 s x 3, keep the same order.) It also lets six slow-starting launchers form one
#:   round instead of a round of four and then one more.
JOIN_TIMEOUT = 90
RDZV_CONF = (
    f"join_timeout={JOIN_TIMEOUT},last_call_timeout=15,keep_alive_interval=1,"
    "keep_alive_max_attempt=5"
)


def srun_exit_line(process: int, code: int) -> re.Pattern[str]:
    """srun's stderr line for task ``process`` of the step exiting with ``code``."""
    return re.compile(
        rf"^srun: error: n\d+: task {process}: Exited with exit code {code}$", re.MULTILINE
    )


def array_task_exit_reported(out: str) -> bool:
    """srun reported an excluded array task's launcher exiting 1.

    Process 0 publishes the marker and exits 1; its sibling may meet the marker and exit 1
    first, and srun then terminates process 0. Either exit ends the step.
    """
    return bool(srun_exit_line(0, 1).search(out) or srun_exit_line(1, 1).search(out))


def exclusion_line(
    job_id: str, task_id: str, decision: Path, *, during_training: bool = False
) -> re.Pattern[str]:
    """Process 0's exclusion log line, by its tokens (the decision file excluded the
    unit; ``when=during-training`` when the watch excluded it ``during_training``) and the
    file it names. It is logged before the marker is published, so srun cannot end the
    launcher before it is written."""
    when = When.DURING_TRAINING if during_training else When.BEFORE_JOINING
    tokens = exclusion_tokens(job_id, task_id, when=when)
    return re.compile(rf"^0: .*{re.escape(str(decision))}\b.*; {re.escape(tokens)}$", re.MULTILINE)


def install_line(process: int, directory: Path, job_id: str, task_id: str) -> re.Pattern[str]:
    """The consumer's install log line, as srun ``--label`` shows it for ``process``."""
    return re.compile(
        rf"^{process}: .*Segment health check installed directory={re.escape(str(directory))} "
        rf"job_id={job_id} task_id={task_id}$",
        re.MULTILINE,
    )


def formed_world(records: list[WorkerRecord], size: int) -> list[WorkerRecord]:
    """The workers of the latest round with a formed world of ``size``, else none (a record
    whose round could not be read belongs to no round)."""
    rounds = {r.round for r in records if r.world_size == size and r.round is not None}
    for number in sorted(rounds, reverse=True):
        world = [r for r in records if r.round == number and r.initialized_at is not None]
        if len(world) == size:
            return world
    return []


def run_seconds(job: Job) -> float:
    """How long ``job`` ran, from its ``StartTime`` and ``EndTime`` (whole seconds)."""
    start, end = (datetime.datetime.fromisoformat(job.fields[k]) for k in ("StartTime", "EndTime"))
    return (end - start).total_seconds()


def task_of(jobs: list[Job], task: str) -> Job:
    """The record of array task ``task`` among ``scontrol show job`` records."""
    [job] = [job for job in jobs if job.fields["ArrayTaskId"] == task]
    return job


@dataclass
class Training:
    """The example script, submitted to ``cluster`` with one rendezvous store.

    Attributes:
        cluster: the private Slurm cluster. store: the rendezvous store (started).
        workdir: holds the decision root, the worker records and the job outputs.
        submitted: every job id submitted, for the clean-up.
    """

    cluster: SlurmCluster
    store: StoreHost
    workdir: Path
    submitted: list[str] = field(default_factory=list)

    @property
    def decision_root(self) -> Path:
        """``SEGHEALTH_DECISION_ROOT``: the script adds one directory per job."""
        return self.workdir / "decisions"

    @property
    def results(self) -> Path:
        """Where the workers write their records."""
        return self.workdir / "results"

    def decisions(self, job_id: str) -> Path:
        """The decision directory of array (or regular) job ``job_id``."""
        return self.decision_root / job_id

    def submit(
        self,
        name: str,
        *sbatch_args: str,
        nnodes: str,
        steps: int,
        step_seconds: float = 0.2,
        max_restarts: int = 2,
        regular: bool = False,
        watch_interval: float | None = None,
        first_round_steps: int | None = None,
    ) -> str:
        """Submit the example script; return the job id (the array job id for an array).

        ``name`` becomes the job name and the workers' launcher label; ``sbatch_args``
        are more sbatch options (``--hold``, ...). The script's ``#SBATCH`` lines make an
        array; sbatch cannot unset ``--array``, so ``regular=True`` runs the same script
        with bash in a regular job (``sbatch --wrap``), whose options ``sbatch_args`` give.
        ``watch_interval`` turns the watch on (its rdzv-conf key); ``first_round_steps``:
        the steps of the workers of rendezvous round 0 (``steps`` otherwise).
        """
        endpoint = self.store.endpoint
        env = {
            "SEGHEALTH_RDZV_ENDPOINT": endpoint,
            "SEGHEALTH_DECISION_ROOT": str(self.decision_root),
            "SEGHEALTH_NNODES": nnodes,
            "SEGHEALTH_NPROC_PER_NODE": "1",
            "SEGHEALTH_MAX_RESTARTS": str(max_restarts),
            "SEGHEALTH_RDZV_CONF": RDZV_CONF
            + ("" if watch_interval is None else f",{WATCH_INTERVAL_KEY}={watch_interval:g}"),
            # Every peer dials loopback; check for a failed worker twice a second.
            "SEGHEALTH_TORCHRUN_ARGS": "--local-addr=127.0.0.1 --monitor-interval=0.5",
            "SEGHEALTH_PYTHON": sys.executable,
            LAUNCHER_ENV: name,
            "GLOO_SOCKET_IFNAME": "lo",
            # torchrun's own steps (rendezvous, worker starts and failures) in the output.
            "LOGLEVEL": "INFO",
            "PYTHONUNBUFFERED": "1",
        }
        script = [
            str(EXAMPLE), "-m", WORKER_MODULE, f"--results-dir={self.results}",
            f"--rdzv-endpoint={endpoint}", f"--steps={steps}", f"--step-seconds={step_seconds}",
        ]  # fmt: skip
        if first_round_steps is not None:
            script.append(f"--first-round-steps={first_round_steps}")
        if regular:
            script = [f"--wrap=exec bash {shlex.join(script)}"]
        job_id = dataclasses.replace(self.cluster, env=self.cluster.env | env).sbatch(
            f"--job-name={name}", f"--chdir={self.workdir}",
            f"--output={self.workdir}/%x-%A_%a.out", *sbatch_args, *script,
        )  # fmt: skip
        self.submitted.append(job_id)
        return job_id

    def mark(self, job_id: str, task_id: str, reason: str) -> Path:
        """Publish a unit's decision the way an operator does (``nvrx-seghealth mark``)."""
        directory = self.decisions(job_id)
        directory.mkdir(parents=True, exist_ok=True)
        done = nvrx_seghealth("mark", "--dir", str(directory), "--job-id", job_id,
                              "--task-id", task_id, "--reason", reason)  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        return directory / f"segment_health_check.{job_id}.{task_id}"

    def output(self, name: str, job: Job) -> str:
        """The job output of ``job`` (an array task or a regular job): batch and srun."""
        task = job.fields.get("ArrayTaskId", "4294967294")  # %a of a regular job
        array_job = job.fields.get("ArrayJobId", job.job_id)
        return (self.workdir / f"{name}-{array_job}_{task}.out").read_text()

    def records(self, name: str) -> list[WorkerRecord]:
        """The records of the workers of job ``name``, oldest first."""
        if not self.results.is_dir():
            return []
        return [record for record in read_records(self.results) if record.launcher == name]

    def wait_records(
        self, name: str, done: Callable[[list[WorkerRecord]], bool], what: str, timeout: float
    ) -> list[WorkerRecord]:
        """Wait (bounded) until ``done(records)``; fail naming ``what`` otherwise."""
        deadline = time.monotonic() + timeout
        while not done(records := self.records(name)):
            if time.monotonic() > deadline:
                pytest.fail(f"no {what} after {timeout}s: {records}", pytrace=False)
            time.sleep(0.2)
        return records

    def kill_worker(self, record: WorkerRecord) -> None:
        """SIGKILL one running worker process: a worker failure, as torchrun sees it."""
        cmdline = Path(f"/proc/{record.pid}/cmdline").read_bytes().split(b"\0")
        assert WORKER_MODULE.encode() in cmdline, f"pid {record.pid} is no longer the worker"
        os.kill(record.pid, signal.SIGKILL)


@contextmanager
def training(cluster: SlurmCluster, workdir: Path) -> Iterator[Training]:
    """A :class:`Training` with its store; afterwards every job is cancelled and waited
    for (bounded), and the store is stopped."""
    store = StoreHost(workdir / "store.log")
    run = Training(cluster, store, workdir)
    try:
        store.start(timeout=60)
        run.results.mkdir()
        yield run
    finally:
        try:
            for job_id in run.submitted:
                cluster.run("scancel", job_id, check=False)
            for job_id in run.submitted:
                cluster.wait_job(job_id, timeout=60)
        finally:
            store.stop()
