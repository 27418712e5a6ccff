"""``accelerate launch`` (the ``launchers`` extra) with the ``segment-health`` backend.

Three array tasks on this machine, one ``accelerate launch`` each, a store outside every
task (``nvrx-seghealth store-host``, ``is_host=false``), task 1 marked: task 1's launcher
exits 1 on its decision file, tasks 0 and 2 train in one world of 2. accelerate passes
``--rdzv_backend`` and ``--rdzv_conf`` through to torchrun; it has no ``--rdzv_id``, so the
run id comes from ``PET_RDZV_ID``; and its port check connects to ``localhost:PORT``, so the
store, on this same host, listens on another loopback address.
"""

from __future__ import annotations

from pathlib import Path

from harness.jobs.launcherjob import (
    MARKED,
    TASKS,
    TRAIN,
    Launch,
    StoreHost,
    assert_marked_task_excluded_and_one_world_of_two,
    launcher_env,
    require_launcher,
    run_together,
    slurm_task,
    store_host,
)
from harness.ports import free_port

#: Not ``localhost``: accelerate would take the store for a port in use and refuse to start.
STORE_ADDRESS = "127.0.0.2"


def accelerate_launch(store: StoreHost, decisions: Path) -> list[str]:
    """One task's ``accelerate launch``: two machines of one process each, the
    ``segment-health`` rendezvous at ``store``."""
    return [
        "accelerate",
        "launch",
        "--multi_gpu",
        "--num_machines=2",
        "--num_processes=2",
        "--machine_rank=0",  # required; ranks come from the rendezvous
        f"--main_process_ip={store.host}",
        f"--main_process_port={store.port}",
        "--mixed_precision=no",
        "--dynamo_backend=no",
        "--rdzv_backend=segment-health",
        f"--rdzv_conf=segment_health_check_dir={decisions},is_host=false",
        str(TRAIN),
    ]


def test_accelerate_launch_keeps_the_marked_task_out(tmp_path, decisions) -> None:
    require_launcher("accelerate")
    run_id = "accelerate-1"
    with store_host(STORE_ADDRESS, free_port()) as store:
        env = {"PET_RDZV_ID": run_id, "HF_HOME": str(tmp_path / "hf")}  # no user config
        command = accelerate_launch(store, decisions)
        launches = [
            Launch(task, command, launcher_env(**slurm_task(task), **env)) for task in TASKS
        ]
        finished = run_together(launches, tmp_path / "logs", cwd=tmp_path)
        marked = store.marked_groups(run_id)
    assert_marked_task_excluded_and_one_world_of_two({done.task: done for done in finished})
    assert marked == [str(MARKED)]  # in the run PET_RDZV_ID named
