"""Programs the harness runs by path, in a process of their own, never imported.

- :data:`HUNGFS`: a FUSE filesystem that hangs or answers late (:mod:`harness.services.fuse`).
- :data:`WATCH_TRAIN`: the torchrun worker of the watch's jobs (:mod:`harness.jobs.watchjob`).

Rules: a program imports nothing of the harness, only the standard library and what it
runs (torch, mfusepy), since it starts outside the test process. Whoever runs one takes
its path from here. The layers contract keeps this room at the bottom.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["HUNGFS", "WATCH_TRAIN"]

HUNGFS = Path(__file__).with_name("hungfs.py")
WATCH_TRAIN = Path(__file__).with_name("watch_train.py")
