"""The worker of row 14 (``bench/v3_jobs.py``): it records that it started, then waits.

It appends ``RANK PID TIME`` (``time.time()`` at its start) to the file ``$V3_JOB_RECORDS``
and sleeps until its agent stops it: the harness kills one worker to make a sibling's
worker failure, and stops the whole job once the next world has started.
"""

import os
import time

STARTED = time.time()


def main() -> None:
    with open(os.environ["V3_JOB_RECORDS"], "a") as records:
        records.write(f"{os.environ['RANK']} {os.getpid()} {STARTED}\n")
    time.sleep(600)


if __name__ == "__main__":
    main()
