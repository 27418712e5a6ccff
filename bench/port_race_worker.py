"""The worker of row 13 (``bench/port_race.py``): one round, its outcome recorded, then a
failure, so that the agents start the next round.

It bootstraps its gloo process group from the store its agent named (``MASTER_ADDR``,
``MASTER_PORT``; the rank-0 worker binds that port unless the agent serves it), adds
across the world once, and appends ``RANK MASTER_PORT OUTCOME`` to the file
``$PORT_RACE_RECORDS``: ``ok``, ``EADDRINUSE`` (the port was taken before the rank-0
worker could listen on it) or ``failed:<error type>``. The process group's bound is
short, so a worker that dials a stale address fails instead of waiting 30 minutes.
"""

import datetime
import os
import sys

import torch
import torch.distributed as dist

PORT_TAKEN = "EADDRINUSE"
#: The exit code of every round: a failure, which the agents restart.
AGAIN = 3


def main() -> None:
    try:
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=20))
        total = torch.tensor([1])
        dist.all_reduce(total)
        dist.destroy_process_group()
        outcome = "ok"
    except Exception as error:  # noqa: BLE001  (the outcome is the record)
        outcome = PORT_TAKEN if PORT_TAKEN in str(error) else f"failed:{type(error).__name__}"
    with open(os.environ["PORT_RACE_RECORDS"], "a") as records:
        records.write(f"{os.environ['RANK']} {os.environ['MASTER_PORT']} {outcome}\n")
    sys.exit(AGAIN)


if __name__ == "__main__":
    main()
