"""``torchx run -s local_cwd dist.ddp`` (TorchX 0.7.0, the ``launchers`` extra) with the
``segment-health`` backend.

One app of three replicas on this machine, each replica an array task (``${replica_id}``
gives its task id), a store outside every replica (``nvrx-seghealth store-host``), replica
1 marked: it exits 1 on its decision file, replicas 0 and 2 train in one world of 2.
``dist.ddp`` has no ``--rdzv_conf``, and its ``--env`` cannot carry a value with ``=``: the
directory comes from ``NVRX_SEGMENT_HEALTH_CHECK_DIR`` and the inner backend's keys from
``PET_RDZV_CONF``, both exported to ``torchx run`` (local_cwd passes its environment on).
TorchX reports the app ``FAILED`` (exit 1) because one replica failed; each replica's
exit is in the ``SUCCESS`` file of the app's log folder.
"""

from __future__ import annotations

import json
import subprocess

from harness.jobs.launcherjob import (
    ARRAY_JOB,
    JOB_TIMEOUT,
    MARKED,
    TASKS,
    TRAIN,
    Finished,
    assert_marked_task_excluded_and_one_world_of_two,
    launcher_env,
    require_launcher,
    store_host,
)
from harness.ports import free_port


def test_torchx_dist_ddp_keeps_the_marked_replica_out(tmp_path, decisions) -> None:
    require_launcher("torchx")
    logs = tmp_path / "logs"
    # dist.ddp's endpoint on local_cwd is localhost:--rdzv_port.
    with store_host("127.0.0.1", free_port()) as store:
        env = launcher_env(
            SLURM_PROCID="0",
            SLURM_ARRAY_JOB_ID=ARRAY_JOB,
            NVRX_SEGMENT_HEALTH_CHECK_DIR=str(decisions),
            # A world of 2 of up to 3 replicas closes 2 s after the second joined.
            PET_RDZV_CONF="is_host=false,last_call_timeout=2",
        )
        done = subprocess.run(
            [
                "torchx",
                "run",
                "-s",
                "local_cwd",
                "-cfg",
                f"log_dir={logs}",
                "dist.ddp",
                "-j",
                "2:3x1",
                "--rdzv_backend",
                "segment-health",
                "--rdzv_port",
                str(store.port),
                "--env",
                "SLURM_ARRAY_TASK_ID=${replica_id},SLURM_JOB_ID=200${replica_id}",
                "--script",
                str(TRAIN),
            ],
            cwd=tmp_path,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=JOB_TIMEOUT,
            check=False,
        )
        apps = list((logs / "torchx").glob("*/SUCCESS"))
        assert len(apps) == 1, done.stderr[-3000:]  # one app, its summary written
        app = apps[0].parent
        marked = store.marked_groups(app.name)  # dist.ddp's --rdzv_id is the app id
    summary = json.loads((app / "SUCCESS").read_text())  # written however the app ended
    assert done.returncode == 1 and summary["final_state"] == "FAILED", done.stderr[-3000:]
    replicas = summary["roles"]["train"]
    finished = {
        r["replica_id"]: Finished(
            r["replica_id"],
            r["exitcode"],
            (app / "train" / str(r["replica_id"]) / "stdout.log").read_text()
            + (app / "train" / str(r["replica_id"]) / "stderr.log").read_text(),
        )
        for r in replicas
    }
    assert sorted(finished) == list(TASKS)
    assert_marked_task_excluded_and_one_world_of_two(finished)
    assert marked == [str(MARKED)]
