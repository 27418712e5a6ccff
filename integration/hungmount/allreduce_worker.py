"""The torchrun worker of the hung-mount test: one gloo ``all_reduce``, then exit 0.

Prints ``all_reduce=<sum> world_size=<n>`` once the collective has completed.
"""

from __future__ import annotations

import datetime

import torch
import torch.distributed as dist


def main() -> None:
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    tensor = torch.ones(1)
    dist.all_reduce(tensor)
    print(f"all_reduce={tensor.item():g} world_size={dist.get_world_size()}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
