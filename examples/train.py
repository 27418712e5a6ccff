"""A stand-in for a training script, for trying the segment health check on one machine.

Each worker joins the process group torchrun set up (gloo, so no GPU is needed), adds its
rank across the world once, and prints what it saw. Run it under torchrun, e.g.
``torchrun --nnodes=1 --nproc-per-node=2 examples/train.py``.
"""

import torch
import torch.distributed as dist


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    total = torch.tensor([rank])
    dist.all_reduce(total)
    print(f"worker {rank} of {world}: sum of ranks {int(total)}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
