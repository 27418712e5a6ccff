"""The unit holding rank 0 is excluded while its world trains; the survivors re-form.

Three array tasks of one node each (``--nnodes=2:3``, one worker each, torchrun's own
launcher on 127.0.0.1, the rendezvous store outside the tasks: c10d's served by
``nvrx-seghealth store-host``, or etcd-v2's etcd), the watch on. Once the
world of 3 trains, the task whose worker is rank 0 is marked: its launcher exits 1 on its
decision file, and the other two restart their workers into a world of 2, which trains to
the end. That is the round where torch's shared store would keep a survivor on the master
that left, and where torch's ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`` would hand the new
rank-0 worker a port it closed (the port race): the launcher now holding rank 0 serves the
new round's store itself (``_launcher/agentstore.py``). ``--max-restarts=0``, as in the
README's shortest launch line: a membership change costs no restart, and no worker may
fail.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import nvrx_seghealth
from harness.jobs.launcherjob import (
    ARRAY_JOB,
    JOB_TIMEOUT,
    TASKS,
    launcher_env,
    slurm_task,
    store_host,
    worker_lines,
)
from harness.ports import PORT_TAKEN, free_port

SLOW_TRAIN = Path(__file__).parent / "launchers" / "slow_train.py"
#: torch's agent logs this for each worker that failed.
WORKER_FAILED = "failed (exitcode: "
#: torch's agent logs this (at INFO) each time it starts workers, with ``True`` or ``False``.
USE_AGENT_STORE = "use_agent_store:"
#: What the wrapper's WARNING ends with when a step of its own failed.
FAILED_OPEN = "(fail open)"


#: The inner backends, and how each is told where its store is: c10d's outside the
#: tasks (``nvrx-seghealth store-host``), etcd-v2's in an etcd outside the job.
INNER = {"c10d": "is_host=false", "etcd-v2": "inner_backend=etcd-v2"}


def torchrun(endpoint: str, decisions: Path, inner: str) -> list[str]:
    conf = (
        f"segment_health_check_dir={decisions},segment_health_check_watch_interval=1,"
        f"{INNER[inner]},last_call_timeout=1"
    )
    return [
        "torchrun",
        "--nnodes=2:3",
        "--nproc-per-node=1",
        "--max-restarts=0",
        "--monitor-interval=0.5",
        "--rdzv-backend=segment-health",
        f"--rdzv-endpoint={endpoint}",
        f"--rdzv-id=rank-zero-{inner}",
        f"--rdzv-conf={conf}",
        str(SLOW_TRAIN),
    ]


def holding_rank_zero(logs: dict[int, Path], world: int) -> int | None:
    """The task whose worker is rank 0 of a world of ``world``, once every task's worker
    of that world said so; ``None`` before."""
    seen = {
        task: [
            rank for rank, size, _ in worker_lines(log.read_text(errors="replace")) if size == world
        ]
        for task, log in logs.items()
    }
    if not all(seen.values()):
        return None
    return next(task for task, ranks in seen.items() if 0 in ranks)


def after_the_world_of_3(output: str) -> list[tuple[int, int, int]]:
    """The worker lines of ``output`` after its last one in a world of 3."""
    lines = worker_lines(output)
    last = max(i for i, (_, size, _) in enumerate(lines) if size == 3)
    return lines[last + 1 :]


@contextlib.contextmanager
def rendezvous_endpoint(inner: str, request: pytest.FixtureRequest) -> Iterator[str]:
    """Where the launchers rendezvous for ``inner``, served outside the tasks."""
    if inner == "etcd-v2":
        yield request.getfixturevalue("etcd_server").endpoint
        return
    with store_host("127.0.0.1", free_port()) as store:
        yield store.endpoint


@pytest.mark.parametrize("inner", ["c10d", pytest.param("etcd-v2", marks=pytest.mark.etcd)])
def test_the_unit_holding_rank_0_is_excluded_and_the_survivors_re_form(
    tmp_path, request, inner
) -> None:
    decisions = tmp_path / "segment-health-check"
    decisions.mkdir()
    logs = {task: tmp_path / f"task{task}.log" for task in TASKS}
    running: dict[int, subprocess.Popen[bytes]] = {}
    try:
        with rendezvous_endpoint(inner, request) as endpoint:
            command = torchrun(endpoint, decisions, inner)
            for task in TASKS:
                with logs[task].open("wb") as sink:
                    running[task] = subprocess.Popen(
                        command,
                        cwd=tmp_path,
                        env=launcher_env(
                            **slurm_task(task), SLOW_TRAIN_SECONDS="15", LOGLEVEL="INFO"
                        ),
                        stdin=subprocess.DEVNULL,
                        stdout=sink,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
            deadline = time.monotonic() + JOB_TIMEOUT
            while (holder := holding_rank_zero(logs, 3)) is None:
                assert time.monotonic() < deadline and all(
                    p.poll() is None for p in running.values()
                ), {t: log.read_text(errors="replace")[-3000:] for t, log in logs.items()}
                time.sleep(0.2)
            nvrx_seghealth.publish_decision(decisions, ARRAY_JOB, holder, "node1: ECC errors")
            codes = {task: p.wait(timeout=JOB_TIMEOUT) for task, p in running.items()}
    finally:
        for process in running.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    output = {task: log.read_text(errors="replace") for task, log in logs.items()}
    tail = {task: text[-4000:] for task, text in output.items()}
    survivors = [task for task in TASKS if task != holder]
    assert codes[holder] == 1 and "reason=decision-file" in output[holder], tail
    assert [codes[task] for task in survivors] == [0, 0], tail
    second = sorted(line for t in survivors for line in after_the_world_of_3(output[t]))
    assert second == [(0, 2, 1), (1, 2, 1)], tail  # the world of 2 formed and trained
    assert not any(PORT_TAKEN in output[t] or WORKER_FAILED in output[t] for t in survivors), tail
    # every round's workers bootstrapped from the store a launcher served, none failed open
    served = [line for t in TASKS for line in output[t].splitlines() if USE_AGENT_STORE in line]
    assert len(served) >= 5 and all(line.endswith(": True") for line in served), served
    assert not any(FAILED_OPEN in text for text in output.values()), tail
