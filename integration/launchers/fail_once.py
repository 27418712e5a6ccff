"""A worker that fails once: every worker of the first attempt exits 1 after its world formed.

Every worker joins the gloo process group and adds its rank across the world, so the
first attempt's workers have put their addresses in the bootstrap store; then each exits 1
(so no agent finishes while another restarts), and every agent restarts its workers. The restarted workers print
``worker RANK of WORLD: sum of ranks SUM`` as ``examples/train.py`` does.
"""

import os
import sys

import torch
import torch.distributed as dist


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    total = torch.tensor([rank])
    dist.all_reduce(total)
    if os.environ["TORCHELASTIC_RESTART_COUNT"] == "0":
        print(f"worker {rank} of {world}: failing once", flush=True)
        sys.exit(1)
    print(f"worker {rank} of {world}: sum of ranks {int(total)}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
