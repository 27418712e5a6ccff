"""A worker that fails once: every worker of the job's first world exits 1 after it formed.

Every worker joins the gloo process group and adds its rank across the world, so the
first world's workers have put their addresses in the bootstrap store; then each exits 1
(so no agent finishes while another restarts), and every agent restarts its workers.
"The first world" is told by a file in the working directory, shared by all the job's
workers, not by ``TORCHELASTIC_RESTART_COUNT``: an agent that restarts its workers for the
other agent's new round (a membership change) does not count a restart. The restarted
workers print ``worker RANK of WORLD: sum of ranks SUM`` as ``examples/train.py`` does.
"""

import sys
from pathlib import Path

import torch
import torch.distributed as dist

FAILED_ONCE = Path("failed-once")


def main() -> None:
    first_world = not FAILED_ONCE.exists()  # decided before the collective below
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    total = torch.tensor([rank])
    dist.all_reduce(total)
    if first_world:
        FAILED_ONCE.touch()
        print(f"worker {rank} of {world}: failing once", flush=True)
        sys.exit(1)
    print(f"worker {rank} of {world}: sum of ranks {int(total)}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
