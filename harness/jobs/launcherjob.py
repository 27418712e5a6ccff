"""Real launchers as the array tasks of one job on this machine, and what their workers said.

A job here is array job :data:`ARRAY_JOB` with three tasks (0, 1, 2) of one node each; task
:data:`MARKED` has a non-empty decision, so its launcher must exit 1 with
``reason=decision-file`` while tasks 0 and 2 train in one world of 2. Each task's launcher
gets its own Slurm-like environment (:func:`slurm_task`); the worker is
``examples/train.py``, which prints ``worker RANK of WORLD: sum of ranks SUM``.

Only the package's public API and its console script are used, with the launchers' own
commands, as a user would run them.
"""

from __future__ import annotations

import contextlib
import datetime
import importlib.util
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

import nvrx_seghealth

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ROOT / "examples" / "train.py"
ARRAY_JOB = "1000"
TASKS = (0, 1, 2)
MARKED = 1
#: Bound for one job of three launchers: about 10-20 s on two busy cores.
JOB_TIMEOUT = 240.0

_WORKER = re.compile(r"worker (\d+) of (\d+): sum of ranks (\d+)")


def require_launcher(module: str) -> None:
    """Skip unless ``module`` of the launchers extra is installed; fail instead under
    ``CI=true``, since ``./dev`` installs the extra."""
    if importlib.util.find_spec(module) is not None:
        return
    message = f"{module} is not installed: pip install -e '.[launchers]' (./dev installs it)"
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true requires the launchers extra: {message}", pytrace=False)
    pytest.skip(message)


#: What a handler built in this process may have set in its environment (the workers'
#: store, torch's rank exchange): a launcher gets them only where a test asks.
HANDLER_SETTINGS = ("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "TORCH_ELASTIC_WORKER_IDENTICAL")


def launcher_env(**settings: str) -> dict[str, str]:
    """This process's environment without Slurm, NVRx or torchrun (``PET_*``) settings nor
    :data:`HANDLER_SETTINGS`, the running environment's ``bin`` first on ``PATH``
    (``torchrun``, ``accelerate``, ``torchx``, ``nvrx-seghealth``), plus ``settings``."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("SLURM_", "NVRX_", "PET_", "TORCHELASTIC_"))
        and key not in HANDLER_SETTINGS
    }
    env["PATH"] = f"{Path(sys.prefix) / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env.update(settings)
    return env


def slurm_task(task: int) -> dict[str, str]:
    """What Slurm sets for process 0 of array task ``task`` of :data:`ARRAY_JOB`."""
    return {
        "SLURM_PROCID": "0",
        "SLURM_ARRAY_JOB_ID": ARRAY_JOB,
        "SLURM_ARRAY_TASK_ID": str(task),
        "SLURM_JOB_ID": str(int(ARRAY_JOB) + 1 + task),
    }


def mark_task(directory: Path, task: int = MARKED) -> Path:
    """Publish ``task``'s decision in ``directory``, as a producer does."""
    return Path(nvrx_seghealth.publish_decision(directory, ARRAY_JOB, task, "node1: ECC errors"))


@dataclass(frozen=True)
class StoreHost:
    """A running ``nvrx-seghealth store-host``: where it listens."""

    host: str
    port: int

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.port}"

    def marked_groups(self, run_id: str) -> list[str]:
        """The replacement groups marked in run ``run_id`` of :data:`ARRAY_JOB`."""
        from torch.distributed import TCPStore

        store = TCPStore(
            self.host, self.port, is_master=False, timeout=datetime.timedelta(seconds=30)
        )
        return nvrx_seghealth.ReplacementGroupMarkers(store, run_id, ARRAY_JOB).marked_groups()


@contextlib.contextmanager
def store_host(host: str, port: int) -> Iterator[StoreHost]:
    """``nvrx-seghealth store-host --host HOST --port PORT`` until the block ends (SIGTERM)."""
    with subprocess.Popen(
        ["nvrx-seghealth", "store-host", "--host", host, "--port", str(port)],
        env=launcher_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as server:  # its end closes the pipes and waits
        try:
            assert server.stdout is not None
            ready = server.stdout.readline()  # printed once the port is bound
            if f"{host}:{port}" not in ready:
                server.kill()
                _, errors = server.communicate(timeout=30)
                raise RuntimeError(f"store-host on {host}:{port} did not start: {ready}{errors}")
            yield StoreHost(host, port)
        finally:
            if server.poll() is None:
                server.send_signal(signal.SIGTERM)
                try:
                    server.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    server.kill()


@dataclass(frozen=True)
class Launch:
    """One launcher process to start: its command line and environment."""

    task: int
    argv: Sequence[str]
    env: Mapping[str, str]


@dataclass(frozen=True)
class Finished:
    """One launcher's end: its exit status and everything it printed."""

    task: int
    returncode: int
    output: str


def run_together(launches: Sequence[Launch], logs: Path, cwd: Path) -> list[Finished]:
    """Start every launch at once, each in its own session with its output in
    ``logs/task<N>.log``, and wait for all of them (:data:`JOB_TIMEOUT` in all). On the
    bound, or any error, every process group still running is killed."""
    logs.mkdir(parents=True, exist_ok=True)
    running: list[tuple[Launch, subprocess.Popen[bytes], Path]] = []
    try:
        for launch in launches:
            log = logs / f"task{launch.task}.log"
            with log.open("wb") as sink:
                process = subprocess.Popen(
                    list(launch.argv),
                    cwd=cwd,
                    env=dict(launch.env),
                    stdin=subprocess.DEVNULL,
                    stdout=sink,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            running.append((launch, process, log))
        for _, process, _ in running:
            process.wait(timeout=JOB_TIMEOUT)
    finally:
        for _, process, _ in running:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)  # the launcher's workers too
            process.wait()
    return [
        Finished(launch.task, process.returncode, log.read_text(errors="replace"))
        for launch, process, log in running
    ]


def worker_lines(output: str) -> list[tuple[int, int, int]]:
    """``(rank, world size, sum of ranks)`` of every worker line in ``output``."""
    return [(int(r), int(w), int(s)) for r, w, s in _WORKER.findall(output)]


def assert_marked_task_excluded_and_one_world_of_two(finished: Mapping[int, Finished]) -> None:
    """Task :data:`MARKED` exited 1 on its decision file without training; tasks 0 and 2
    exited 0 and their workers were ranks 0 and 1 of one world of 2."""
    assert sorted(finished) == list(TASKS), sorted(finished)
    excluded = finished[MARKED]
    tail = {task: done.output[-3000:] for task, done in finished.items()}
    assert excluded.returncode == 1, tail
    error_lines = [line for line in excluded.output.splitlines() if "reason=" in line]
    assert error_lines and all("reason=decision-file" in line for line in error_lines), tail
    assert f"job_id={ARRAY_JOB} task_id={MARKED}" in error_lines[0], error_lines
    assert worker_lines(excluded.output) == [], tail
    trained = [t for t in TASKS if t != MARKED]
    assert [finished[t].returncode for t in trained] == [0, 0], tail
    seen = [line for t in trained for line in worker_lines(finished[t].output)]
    assert len(seen) == 2, tail
    assert sorted(rank for rank, _, _ in seen) == [0, 1], seen
    assert {(world, total) for _, world, total in seen} == {(2, 1)}, seen
