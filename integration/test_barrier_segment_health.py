"""The segment health check over the barrier rendezvous: ``inner_backend=barrier``.

Three array tasks of one launcher each, ``--nnodes=2:3``, the store served by
``nvrx-seghealth store-host``; task 1 has a non-empty decision file. It leaves before
joining, with ``reason=decision-file``, and tasks 0 and 2 train in one world of 2, as
over ``c10d`` (``harness/jobs/launcherjob.py``).
"""

from __future__ import annotations

from harness.jobs.launcherjob import (
    TASKS,
    TRAIN,
    Launch,
    assert_marked_task_excluded_and_one_world_of_two,
    launcher_env,
    mark_task,
    run_together,
    slurm_task,
    store_host,
)
from harness.ports import free_port


def test_a_marked_unit_leaves_and_the_others_train_over_barrier(tmp_path) -> None:
    decisions = tmp_path / "segment-health-check"
    decisions.mkdir()
    mark_task(decisions)
    conf = f"inner_backend=barrier,is_host=false,last_call_timeout=5,segment_health_check_dir={decisions}"
    with store_host("127.0.0.1", free_port()) as store:
        command = [
            "torchrun",
            "--nnodes=2:3",
            "--nproc-per-node=1",
            "--rdzv-backend=segment-health",
            f"--rdzv-endpoint={store.endpoint}",
            "--rdzv-id=seghealth-barrier",
            f"--rdzv-conf={conf}",
            str(TRAIN),
        ]
        launches = [Launch(task, command, launcher_env(**slurm_task(task))) for task in TASKS]
        finished = run_together(launches, tmp_path / "logs", cwd=tmp_path)
    assert_marked_task_excluded_and_one_world_of_two({done.task: done for done in finished})
