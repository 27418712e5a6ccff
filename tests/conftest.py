"""Shared fixtures: Slurm-like environments and real torch stores on 127.0.0.1."""

from __future__ import annotations

import datetime

import pytest


def slurm_env(task: int | None = None, procid: int = 0, *, array_job: int = 1000,
              job: int | None = None) -> dict[str, str]:
    """A Slurm-like environment: an array task when ``task`` is given, else a regular job."""
    env = {"SLURM_PROCID": str(procid)}
    if task is None:
        env["SLURM_JOB_ID"] = str(job if job is not None else array_job)
    else:
        env["SLURM_ARRAY_JOB_ID"] = str(array_job)
        env["SLURM_ARRAY_TASK_ID"] = str(task)
        env["SLURM_JOB_ID"] = str(job if job is not None else array_job + 1 + task)
    return env


@pytest.fixture
def tcp_store():
    """A real TCPStore server on 127.0.0.1 (any free port); yields the master store."""
    from torch.distributed import TCPStore

    store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                     timeout=datetime.timedelta(seconds=30))
    yield store
    del store


def tcp_client(master) -> object:
    """A new client connection to ``master``'s server."""
    from torch.distributed import TCPStore

    return TCPStore("127.0.0.1", master.port, is_master=False,
                    timeout=datetime.timedelta(seconds=30))
