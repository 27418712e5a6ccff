"""The torchrun worker of the watch's jobs: a gloo collective every step until told to stop.

Each step all-reduces ``[1, stop]``, where ``stop`` is 1 on a rank that sees the file
``WATCH_TRAIN_STOP_FILE``: every rank leaves the loop at the same step, and the job ends
with exit 0. A worker whose environment names ``WATCH_TRAIN_STALL_FILE`` stops calling the
collective once that file exists and sleeps (a unit whose network hung): every peer
then blocks in the collective until the process group's timeout,
``WATCH_TRAIN_GLOO_TIMEOUT`` seconds (default 120). The stalled worker exits 1 after
twice that, unless its agent stopped it before. A worker whose environment names
``WATCH_TRAIN_FAIL_FILE`` fails once that file exists: it removes the file and exits 1
at once (a worker's own failure, which its agent restarts), so only one worker fails.

It prints one line per event, each ending with the wall-clock time ``t=`` (seconds since
the epoch), for the test to read:

* ``watch-train formed rank=R world=W tasks=T,T,.. restart=N port=P t=..`` once its process
  group formed (``tasks``: the ``SLURM_ARRAY_TASK_ID`` of every rank, in rank order;
  ``restart``: torchrun's ``TORCHELASTIC_RESTART_COUNT``, which a membership change
  leaves as it was; ``port``: the ``MASTER_PORT`` it bootstrapped from);
* ``watch-train stalled rank=R t=..`` when it stops calling the collective;
* ``watch-train fails rank=R t=..`` when it fails on the fail file;
* ``watch-train done rank=R steps=S t=..`` once it trained to the end.
"""

from __future__ import annotations

import datetime
import os
import time

import torch
import torch.distributed as dist

#: Seconds between two steps (the collective's own time comes on top).
STEP_PAUSE = 0.1


def say(event: str, **fields: object) -> None:
    """Print one record line (see the module documentation)."""
    values = " ".join(f"{key}={value}" for key, value in fields.items())
    print(f"watch-train {event} {values} t={time.time():.3f}", flush=True)


def main() -> None:
    timeout = float(os.environ.get("WATCH_TRAIN_GLOO_TIMEOUT", "120"))
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    tasks: list[object] = [None] * world
    dist.all_gather_object(tasks, os.environ.get("SLURM_ARRAY_TASK_ID", "?"))
    restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "?")
    port = os.environ.get("MASTER_PORT", "?")
    say(
        "formed",
        rank=rank,
        world=world,
        tasks=",".join(map(str, tasks)),
        restart=restart,
        port=port,
    )
    stop_file = os.environ["WATCH_TRAIN_STOP_FILE"]
    stall_file = os.environ.get("WATCH_TRAIN_STALL_FILE")
    fail_file = os.environ.get("WATCH_TRAIN_FAIL_FILE")
    steps = 0
    while True:
        if fail_file is not None and _taken(fail_file):
            say("fails", rank=rank)
            os._exit(1)  # a crash: no clean-up, as a worker's own failure
        if stall_file is not None and os.path.exists(stall_file):
            say("stalled", rank=rank)
            time.sleep(2 * timeout)  # bounded: an orphaned worker must not sleep forever
            raise SystemExit(1)
        flags = torch.tensor([1, int(os.path.exists(stop_file))])
        dist.all_reduce(flags)
        steps += 1
        if flags[1] > 0:
            break
        time.sleep(STEP_PAUSE)
    dist.destroy_process_group()
    say("done", rank=rank, steps=steps)


def _taken(path: str) -> bool:
    """Remove ``path``; whether it existed (so that it makes one failure only)."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True


if __name__ == "__main__":
    main()
