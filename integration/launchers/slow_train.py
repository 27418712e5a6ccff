"""A worker that trains for a while: it forms its world, says so, then works for
``SLOW_TRAIN_SECONDS`` (default 20) before a last collective.

It prints ``worker RANK of WORLD: sum of ranks SUM`` as ``examples/train.py`` does, once
its world formed, so a test can start a late launcher while the world trains.
"""

import os
import time

import torch
import torch.distributed as dist


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    total = torch.tensor([rank])
    dist.all_reduce(total)
    print(f"worker {rank} of {world}: sum of ranks {int(total)}", flush=True)
    time.sleep(float(os.environ.get("SLOW_TRAIN_SECONDS", "20")))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
