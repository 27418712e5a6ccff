"""A marked unit that arrives after the world formed is refused before it joins.

NVRx's ``ft_launcher`` 0.7.0 checks a unit only once a round is open: a marked unit that
arrives after a round closed waits as a standby and exits 0 without ever being checked.
This package checks before every join. Two healthy array tasks (0 and 2) form a world of 2
with ``--nnodes=2:3`` and train; then marked task 1's launcher starts: it exits 1 on its
decision file without joining, so the world of 2 is never asked to re-form (a waiting node
would restart every worker into a world with the marked unit), and it trains to the end.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

from harness.jobs.launcherjob import (
    JOB_TIMEOUT,
    MARKED,
    launcher_env,
    slurm_task,
    store_host,
    worker_lines,
)
from harness.ports import free_port

SLOW_TRAIN = Path(__file__).with_name("slow_train.py")


def torchrun(endpoint: str, decisions: Path) -> list[str]:
    return [
        "torchrun",
        "--nnodes=2:3",
        "--nproc-per-node=1",
        "--rdzv-backend=segment-health",
        f"--rdzv-endpoint={endpoint}",
        "--rdzv-id=late-1",
        f"--rdzv-conf=segment_health_check_dir={decisions},is_host=false,last_call_timeout=1",
        str(SLOW_TRAIN),
    ]


def start(command: list[str], task: int, log: Path, cwd: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as sink:
        return subprocess.Popen(
            command,
            cwd=cwd,
            env=launcher_env(**slurm_task(task), SLOW_TRAIN_SECONDS="20"),
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def test_a_marked_unit_arriving_after_the_world_formed_is_refused(tmp_path, decisions) -> None:
    logs = {task: tmp_path / f"task{task}.log" for task in (0, MARKED, 2)}
    running: list[subprocess.Popen[bytes]] = []
    try:
        with store_host("127.0.0.1", free_port()) as store:
            command = torchrun(store.endpoint, decisions)
            healthy = [start(command, task, logs[task], tmp_path) for task in (0, 2)]
            running += healthy
            deadline = time.monotonic() + JOB_TIMEOUT
            while sum(len(worker_lines(logs[t].read_text())) for t in (0, 2)) < 2:
                assert time.monotonic() < deadline, {
                    t: logs[t].read_text()[-2000:] for t in logs if logs[t].exists()
                }
                assert all(p.poll() is None for p in healthy), "a healthy launcher ended early"
                time.sleep(0.2)
            late = start(command, MARKED, logs[MARKED], tmp_path)  # the world trains
            running.append(late)
            late_code = late.wait(timeout=JOB_TIMEOUT)
            codes = [p.wait(timeout=JOB_TIMEOUT) for p in healthy]
    finally:
        for process in running:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    output = {task: log.read_text(errors="replace") for task, log in logs.items()}
    tail = {task: text[-3000:] for task, text in output.items()}
    assert late_code == 1 and "reason=decision-file" in output[MARKED], tail
    assert worker_lines(output[MARKED]) == [], tail
    assert codes == [0, 0], tail
    seen = sorted(line for t in (0, 2) for line in worker_lines(output[t]))
    assert seen == [(0, 2, 1), (1, 2, 1)], tail  # one world of 2, never re-formed
