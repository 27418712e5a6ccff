"""A training loop that keeps its progress across a restart of its workers.

An agent stops its workers with SIGTERM on every restart (a membership change, a failure,
the segment health watch's exclusion of a unit). Rank 0 saves the last completed step
then and every ``SAVE_EVERY`` steps; every rank starts again from the saved step.
"""

import os
import signal
import sys

import torch
import torch.distributed as dist

CHECKPOINT = os.environ.get("CHECKPOINT", "checkpoint.pt")
STEPS, SAVE_EVERY = int(os.environ.get("STEPS", "1000")), 100


def save(state: dict) -> None:
    """Write the checkpoint whole or not at all (a reader never sees half of one)."""
    torch.save(state, f"{CHECKPOINT}.tmp")
    os.replace(f"{CHECKPOINT}.tmp", CHECKPOINT)


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    state = torch.load(CHECKPOINT) if os.path.exists(CHECKPOINT) else {"step": 0}
    print(f"rank {rank} starts at step {state['step']}", flush=True)

    def stop(signum, frame):  # the agent stops this worker: keep the last step, leave
        if rank == 0:
            save(state)
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    while state["step"] < STEPS:
        dist.all_reduce(torch.ones(1))  # one training step
        state = {"step": state["step"] + 1}
        if rank == 0 and state["step"] % SAVE_EVERY == 0:
            save(state)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
