"""The training worker of a simulated job, started by ``torchrun -m`` on every launcher.

It joins a gloo process group, computes for a while without collectives when asked
(``--compute-seconds``, in the first ``--compute-rounds`` rounds), runs a few
``all_reduce`` steps, and records who it was
(launcher, array task, ranks, rendezvous round, restart count) and how far it got in
``--results-dir`` (see :mod:`.records`). It reads its round from torch's rendezvous state
(:mod:`.rendezvous_state`; torch does not tell workers the round): its agent stays a
participant while the worker runs, and a round only advances once every participant has
left, so the state's round is this worker's. When the state cannot be read the round is
recorded as unknown (``None``, with one WARNING) and the worker computes in no round.
It ends with ``destroy_process_group()``:
a gloo process group still alive at interpreter exit can abort the exit.

Contract: exits 0 only when every step's all-reduce summed to the world size.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import logging
import os
import signal
import sys
import time
from pathlib import Path

from .._logfmt import format_fields
from .._rendezvous import registry
from .logtokens import BROKEN_NODE_FAULT, FAULT_FIELD
from .records import LAUNCHER_ENV, WorkerRecord, write_record
from .rendezvous_state import read_endpoint

__all__ = [
    "BROKEN_EXIT_CODE",
    "BROKEN_HOW_ENV",
    "BROKEN_TASKS_ENV",
    "main",
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


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.partition("\n")[0])
    parser.add_argument("--results-dir", type=Path, required=True)
    parser.add_argument(
        "--rdzv-endpoint",
        required=True,
        help="HOST:PORT of the c10d store, or etcd's member(s), comma-separated",
    )
    parser.add_argument(
        "--rdzv-backend",
        choices=registry.names(),
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
    launcher = env[LAUNCHER_ENV]
    state = read_endpoint(
        args.rdzv_backend, args.rdzv_endpoint, env["TORCHELASTIC_RUN_ID"], timeout
    )
    if state.round is None:
        log.warning("%s: rendezvous round unknown: %s", launcher, state.problem)
    record = WorkerRecord(
        launcher=launcher,
        array_task=int(env["SLURM_ARRAY_TASK_ID"]) if "SLURM_ARRAY_TASK_ID" in env else None,
        procid=int(env["SLURM_PROCID"]),
        pid=os.getpid(),
        rank=int(env["RANK"]),
        world_size=int(env["WORLD_SIZE"]),
        group_rank=int(env["GROUP_RANK"]),
        group_world_size=int(env["GROUP_WORLD_SIZE"]),
        round=state.round,
        restart_count=int(env["TORCHELASTIC_RESTART_COUNT"]),
        started_at=time.time(),
    )
    write_record(args.results_dir, record)
    log.info(
        "%s: round %s, rank %d of %d",
        record.launcher,
        "unknown" if record.round is None else record.round,
        record.rank,
        record.world_size,
    )
    dist.init_process_group("gloo", timeout=timeout)
    record = dataclasses.replace(record, initialized_at=time.time())
    write_record(args.results_dir, record)
    if _on_broken_node(record.array_task):
        fields = {FAULT_FIELD: BROKEN_NODE_FAULT, "listed_in": BROKEN_TASKS_ENV}
        log.error("%s: crashing after joining %s", record.launcher, format_fields(fields))
        if os.environ.get(BROKEN_HOW_ENV) == "node":
            os.kill(os.getppid(), signal.SIGKILL)  # the parent is this worker's torchrun agent
        os._exit(BROKEN_EXIT_CODE)  # a crash: no clean shutdown of the process group
    computes = record.round is not None and record.round < args.compute_rounds
    if computes and args.compute_seconds > 0:
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
    for done in range(1, steps + 1):
        tensor = torch.ones(1)
        dist.all_reduce(tensor)
        ok = ok and int(tensor.item()) == record.world_size
        record = dataclasses.replace(record, steps_done=done)
        write_record(args.results_dir, record)
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
