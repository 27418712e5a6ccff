"""The barrier rendezvous over the etcd-v3 store, against a real etcd.

- In process: the same protocol as on a TCPStore, each launcher with its own etcd
  client. A world of three forms with ranks 0 to 2; all three join again and form
  round 1. Each launcher's heartbeat has a store of its own (the etcd-v3 store's clone),
  a store written in Python.
- Through torchrun (``--rdzv-conf store=etcd-v3``, every member of a three-member etcd
  an endpoint): the segment health check over it, ``inner_backend=barrier``. Task 1 is
  marked and leaves before joining; tasks 0 and 2 train in one world of 2, as over a
  TCPStore (``integration/test_barrier_segment_health.py``).
"""

from __future__ import annotations

import contextlib
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from harness.jobs.launcherjob import (
    TASKS,
    TRAIN,
    Launch,
    assert_marked_task_excluded_and_one_world_of_two,
    launcher_env,
    mark_task,
    run_together,
    slurm_task,
)
from harness.services.etcd import EtcdCluster
from harness.services.etcd_v3 import open_v3_launcher
from nvrx_seghealth._rendezvous.barrier import BarrierRendezvousHandler, BarrierSettings

pytestmark = pytest.mark.etcd

#: Seconds a test waits for a round; far beyond the round's own timeouts.
BOUND = 120.0


def test_a_barrier_world_forms_and_forms_again_on_etcd_v3(etcd_v3_server) -> None:
    run = f"run-{uuid.uuid4().hex[:8]}"
    settings = BarrierSettings(run, 3, 3, join_timeout=BOUND, local_addr="127.0.0.1")
    with contextlib.ExitStack() as stack:
        stores = [
            stack.enter_context(open_v3_launcher(etcd_v3_server.endpoint, run))[1] for _ in range(3)
        ]
        handlers = [BarrierRendezvousHandler(store, settings) for store in stores]
        try:
            with ThreadPoolExecutor(max_workers=3) as pool:
                for round_number in (0, 1):
                    infos = list(pool.map(lambda h: h.next_rendezvous(), handlers, timeout=BOUND))
                    assert sorted(info.rank for info in infos) == [0, 1, 2], round_number
                    assert {info.world_size for info in infos} == {3}
        finally:
            handlers[0].shutdown()
            for handler in handlers:
                handler._heartbeat.stop()


@pytest.mark.parametrize("etcd_v3_cluster", ["3.5"], indirect=True, ids=["etcd3.5"])
def test_a_marked_unit_leaves_and_the_others_train_over_barrier_on_etcd_v3(
    etcd_v3_cluster: EtcdCluster, tmp_path
) -> None:
    decisions = tmp_path / "segment-health-check"
    decisions.mkdir()
    mark_task(decisions)
    conf = (
        "inner_backend=barrier,store=etcd-v3,last_call_timeout=5,"
        f"segment_health_check_dir={decisions}"
    )
    command = [
        "torchrun",
        "--nnodes=2:3",
        "--nproc-per-node=1",
        "--rdzv-backend=segment-health",
        "--rdzv-endpoint=" + ",".join(m.server.endpoint for m in etcd_v3_cluster.members),
        f"--rdzv-id=barrier-v3-{uuid.uuid4().hex[:8]}",
        f"--rdzv-conf={conf}",
        str(TRAIN),
    ]
    launches = [Launch(task, command, launcher_env(**slurm_task(task))) for task in TASKS]
    finished = run_together(launches, tmp_path / "logs", cwd=tmp_path)
    assert_marked_task_excluded_and_one_world_of_two({done.task: done for done in finished})
