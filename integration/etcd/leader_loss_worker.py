"""The torchrun worker of the leader-loss jobs (``test_leader_loss_jobs.py``), run by path.

It joins a gloo process group, prints ``leader-loss formed rank=R world=W``, then
all-reduces ``[1, stop]`` every 0.1 s until a rank sees the file ``LEADER_LOSS_STOP``
(every rank leaves at the same step). It prints ``leader-loss done rank=R``, and exits
once the file ``LEADER_LOSS_EXIT`` exists when that variable is set: its launcher is then
the last to reach torchrun's exit barrier.
"""

from __future__ import annotations

import datetime
import os
import time

import torch
import torch.distributed as dist


def main() -> None:
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    rank, world = dist.get_rank(), dist.get_world_size()
    print(f"leader-loss formed rank={rank} world={world}", flush=True)
    while True:
        flags = torch.tensor([1, int(os.path.exists(os.environ["LEADER_LOSS_STOP"]))])
        dist.all_reduce(flags)
        if flags[1] > 0:
            break
        time.sleep(0.1)
    dist.destroy_process_group()
    print(f"leader-loss done rank={rank}", flush=True)
    hold = os.environ.get("LEADER_LOSS_EXIT")
    deadline = time.monotonic() + 120  # bounded: an orphaned worker must not wait forever
    while hold and not os.path.exists(hold) and time.monotonic() < deadline:
        time.sleep(0.05)


if __name__ == "__main__":
    main()
