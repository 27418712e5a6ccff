"""``fabric run`` (Lightning Fabric's CLI, the ``launchers`` extra) with the backend.

``fabric run`` has no rendezvous option: it calls torchrun's ``main()`` with
``--nnodes``, ``--node_rank``, ``--master_addr`` and ``--master_port`` only, and torchrun
takes every option it is not given from its ``PET_*`` environment. So
``PET_RDZV_BACKEND=segment-health``, ``PET_RDZV_ENDPOINT``, ``PET_RDZV_ID`` and
``PET_RDZV_CONF`` select the backend, and the ``master`` options are unused (they belong
to torchrun's ``static`` rendezvous). Three array tasks, task 1 marked, as for the other
launchers.
"""

from __future__ import annotations

from harness.jobs.launcherjob import (
    MARKED,
    TASKS,
    TRAIN,
    Launch,
    assert_marked_task_excluded_and_one_world_of_two,
    launcher_env,
    require_launcher,
    run_together,
    slurm_task,
    store_host,
)
from harness.ports import free_port

FABRIC_RUN = [
    "fabric",
    "run",
    "--accelerator=cpu",
    "--devices=1",
    "--num-nodes=2",
    str(TRAIN),
]


def test_fabric_run_keeps_the_marked_task_out(tmp_path, decisions) -> None:
    require_launcher("lightning_fabric")
    run_id = "fabric-1"
    with store_host("127.0.0.1", free_port()) as store:
        env = {
            "PET_RDZV_BACKEND": "segment-health",
            "PET_RDZV_ENDPOINT": store.endpoint,
            "PET_RDZV_ID": run_id,
            "PET_RDZV_CONF": f"segment_health_check_dir={decisions},is_host=false",
        }
        launches = [
            Launch(task, FABRIC_RUN, launcher_env(**slurm_task(task), **env)) for task in TASKS
        ]
        finished = run_together(launches, tmp_path / "logs", cwd=tmp_path)
        marked = store.marked_groups(run_id)
    assert_marked_task_excluded_and_one_world_of_two({done.task: done for done in finished})
    assert marked == [str(MARKED)]
