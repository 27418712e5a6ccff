"""The training worker of a simulated job, started by ``torchrun -m`` on every launcher.

It joins a gloo process group, computes for a while without collectives when asked
(``--compute-seconds``, in the first ``--compute-rounds`` rounds), runs a few
``all_reduce`` steps, and records who it was
(launcher, array task, ranks, rendezvous round, restart count) and how far it got in
``--results-dir`` (see :mod:`.records`). It ends with ``destroy_process_group()``:
without it some exits abort (``notes/torch-elastic-facts.md``).

Contract: exits 0 only when every step's all-reduce summed to the world size.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import logging
import os
import pickle
import signal
import sys
import time
from pathlib import Path
from typing import Any

from .records import LAUNCHER_ENV, WorkerRecord, write_record

__all__ = [
    "BROKEN_EXIT_CODE",
    "BROKEN_HOW_ENV",
    "BROKEN_TASKS_ENV",
    "ROUND_READERS",
    "c10d_rendezvous_state",
    "etcd_rendezvous_round",
    "main",
    "rendezvous_round",
]

log = logging.getLogger(__name__)

#: Environment variable (e.g. in ``JobSpec.agent_env``): comma-separated array task ids
#: whose nodes are broken, as a drained node would be. Their workers exit with
#: :data:`BROKEN_EXIT_CODE` right after joining the process group, in every round.
BROKEN_TASKS_ENV = "NVRX_SIM_BROKEN_TASKS"
#: How a broken node fails: ``worker`` (default: the worker crashes and its agent
#: restarts it up to ``--max-restarts``) or ``node`` (the whole node goes down: the
#: worker SIGKILLs its agent, then exits; srun's kill-on-bad-exit ends the unit).
BROKEN_HOW_ENV = "NVRX_SIM_BROKEN_HOW"
#: The exit code of a worker on a broken node.
BROKEN_EXIT_CODE = 3


def _on_broken_node(array_task: int | None) -> bool:
    """Whether ``array_task`` is listed in :data:`BROKEN_TASKS_ENV`."""
    broken = {t.strip() for t in os.environ.get(BROKEN_TASKS_ENV, "").split(",") if t.strip()}
    return array_task is not None and str(array_task) in broken


def rendezvous_round(endpoint: str, run_id: str, timeout: datetime.timedelta) -> int:
    """The round of the c10d rendezvous that started this worker.

    torch does not tell workers the round, so this reads the rendezvous state the way
    torch's dynamic handler does: the c10d backend keeps it pickled under
    ``torch.rendezvous.<run_id>`` in the rendezvous store. The value is this worker's
    round: its agent stays a participant while the worker runs, and a round only
    advances once every participant has left.
    """
    from torch.distributed import TCPStore

    host, port = endpoint.rsplit(":", 1)
    store = TCPStore(host, int(port), is_master=False, timeout=timeout)
    state = c10d_rendezvous_state(store, run_id)
    if state is None:
        raise RuntimeError(f"no rendezvous state for run {run_id!r} at {endpoint}")
    return int(state.round)


def c10d_rendezvous_state(store: Any, run_id: str) -> Any:
    """torch's dynamic-rendezvous state of ``run_id`` in the c10d ``store``, or ``None``.

    It is torch's own ``_RendezvousState`` (``round``, ``participants``, ``wait_list``,
    ``redundancy_list``, ...), read with torch's c10d backend and unpickled as torch's
    dynamic handler does; ``None`` before any node joined.
    """
    from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import (
        C10dRendezvousBackend,
    )

    state = C10dRendezvousBackend(store, run_id).get_state()
    return None if state is None else pickle.loads(state[0])


def etcd_rendezvous_round(endpoint: str, run_id: str, timeout: datetime.timedelta) -> int:
    """The round of the etcd-v2 rendezvous that started this worker.

    The etcd-v2 backend keeps the same pickled state as c10d, base64-encoded in one etcd
    key per run (``/torch/elastic/rendezvous/<run_id>``). It is read through torch's own
    ``create_backend``, so the key is torch's and not a copy of it. The value is this
    worker's round for the reason given in :func:`rendezvous_round`.
    """
    from torch.distributed.elastic.rendezvous import RendezvousParameters
    from torch.distributed.elastic.rendezvous.etcd_rendezvous_backend import create_backend

    read_timeout = max(1, int(timeout.total_seconds()))
    params = RendezvousParameters("etcd-v2", endpoint, run_id, 1, 1, read_timeout=read_timeout)
    backend, _ = create_backend(params)
    state = backend.get_state()
    if state is None:
        raise RuntimeError(f"no etcd-v2 rendezvous state for run {run_id!r} at {endpoint}")
    return int(pickle.loads(state[0]).round)


#: How a worker reads its round, by the rendezvous (``JobSpec.rendezvous``) that ran.
ROUND_READERS = {"c10d": rendezvous_round, "etcd-v2": etcd_rendezvous_round}


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.partition("\n")[0])
    parser.add_argument("--results-dir", type=Path, required=True)
    parser.add_argument(
        "--rdzv-endpoint", required=True, help="HOST:PORT of the c10d store or of etcd"
    )
    parser.add_argument(
        "--rdzv-backend",
        choices=sorted(ROUND_READERS),
        default="c10d",
        help="the rendezvous that keeps the round (default: c10d)",
    )
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--first-round-steps", type=int, help="steps in round 0 (default: --steps)")
    parser.add_argument("--step-seconds", type=float, default=0.2)
    parser.add_argument(
        "--compute-seconds",
        type=float,
        default=0.0,
        help="seconds of collective-free compute after joining, before the steps",
    )
    parser.add_argument(
        "--compute-rounds", type=int, default=1, help="rounds 0..N-1 compute (default: 1)"
    )
    parser.add_argument(
        "--timeout", type=float, default=30, help="process-group timeout in seconds"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the worker; see the module doc."""
    import torch
    import torch.distributed as dist

    logging.basicConfig(level=logging.INFO, format="[worker %(process)d] %(message)s")
    args = _parse(argv)
    env = os.environ
    timeout = datetime.timedelta(seconds=args.timeout)
    record = WorkerRecord(
        launcher=env[LAUNCHER_ENV],
        array_task=int(env["SLURM_ARRAY_TASK_ID"]) if "SLURM_ARRAY_TASK_ID" in env else None,
        procid=int(env["SLURM_PROCID"]),
        pid=os.getpid(),
        rank=int(env["RANK"]),
        world_size=int(env["WORLD_SIZE"]),
        group_rank=int(env["GROUP_RANK"]),
        group_world_size=int(env["GROUP_WORLD_SIZE"]),
        round=ROUND_READERS[args.rdzv_backend](
            args.rdzv_endpoint, env["TORCHELASTIC_RUN_ID"], timeout
        ),
        restart_count=int(env["TORCHELASTIC_RESTART_COUNT"]),
        started_at=time.time(),
    )
    write_record(args.results_dir, record)
    log.info(
        "%s: round %d, rank %d of %d", record.launcher, record.round, record.rank, record.world_size
    )
    dist.init_process_group("gloo", timeout=timeout)
    record = dataclasses.replace(record, initialized_at=time.time())
    write_record(args.results_dir, record)
    if _on_broken_node(record.array_task):
        log.error("%s: broken node (%s); crashing after joining", record.launcher, BROKEN_TASKS_ENV)
        if os.environ.get(BROKEN_HOW_ENV) == "node":
            os.kill(os.getppid(), signal.SIGKILL)  # the parent is this worker's torchrun agent
        os._exit(BROKEN_EXIT_CODE)  # a crash: no clean shutdown of the process group
    if record.round < args.compute_rounds and args.compute_seconds > 0:
        # Between collectives nothing tells this worker that a peer died: only its
        # agent, through num_nodes_waiting, or the next collective would.
        seconds = args.compute_seconds
        log.info("%s: computing for %g s without collectives", record.launcher, seconds)
        time.sleep(seconds)
        record = dataclasses.replace(record, computed_at=time.time())
        write_record(args.results_dir, record)
    in_round_zero = record.round == 0 and args.first_round_steps is not None
    steps = args.first_round_steps if in_round_zero else args.steps
    ok = True
    for _ in range(steps):
        tensor = torch.ones(1)
        dist.all_reduce(tensor)
        ok = ok and int(tensor.item()) == record.world_size
        time.sleep(args.step_seconds)
    dist.destroy_process_group()
    record = dataclasses.replace(record, finished_at=time.time(), all_reduce_ok=ok)
    write_record(args.results_dir, record)
    log.info(
        "%s: %d steps done, all-reduce %s",
        record.launcher,
        steps,
        "correct" if ok else "WRONG",
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
