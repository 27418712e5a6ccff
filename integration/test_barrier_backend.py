"""The barrier rendezvous under real torchrun agents: ``--rdzv-backend=barrier``.

Two launchers of one job (``--nnodes=2``, one worker each) on 127.0.0.1, the store served
by ``nvrx-seghealth store-host`` and ``is_host=false``, as a job with a store outside its
launchers runs it. One job trains (``examples/train.py``) and exits 0. In the other every
worker of the first world fails once (``fail_once.py``): both agents join the next round,
and the restarted world of 2 completes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.jobs.launcherjob import (
    TRAIN,
    Launch,
    launcher_env,
    run_together,
    store_host,
    worker_lines,
)
from harness.ports import PORT_TAKEN, free_port

FAIL_ONCE = Path(__file__).parent / "launchers" / "fail_once.py"
WORKER_FAILED = "failed (exitcode: "


def barrier_job(endpoint: str, run_id: str, worker: Path) -> list[str]:
    return [
        "torchrun",
        "--nnodes=2",
        "--nproc-per-node=1",
        "--max-restarts=2",
        "--rdzv-backend=barrier",
        f"--rdzv-endpoint={endpoint}",
        f"--rdzv-id={run_id}",
        "--rdzv-conf=is_host=false",
        str(worker),
    ]


@pytest.mark.parametrize("worker", [TRAIN, FAIL_ONCE], ids=["trains", "restarts"])
def test_a_barrier_job_of_two_launchers_completes(tmp_path, worker) -> None:
    with store_host("127.0.0.1", free_port()) as store:
        command = barrier_job(store.endpoint, f"barrier-{worker.stem}", worker)
        launches = [Launch(task, command, launcher_env()) for task in (0, 1)]
        finished = run_together(launches, tmp_path / "logs", cwd=tmp_path)
    tail = {done.task: done.output[-3000:] for done in finished}
    assert [done.returncode for done in finished] == [0, 0], tail
    seen = sorted(line for done in finished for line in worker_lines(done.output))
    assert seen == [(0, 2, 1), (1, 2, 1)], tail
    if worker == FAIL_ONCE:
        failures = [done.output.count(WORKER_FAILED) for done in finished]
        assert max(failures) <= 1 or any(PORT_TAKEN in done.output for done in finished), tail
