"""A Slurm-like environment: the variables a launcher reads to name its allocation unit.

Standard library only: unit tests build launchers in-process with it, and
:mod:`harness.rendezvous` gives it to each launcher it starts.
"""

from __future__ import annotations

__all__ = ["slurm_env"]


def slurm_env(
    task: int | None = None, procid: int = 0, *, array_job: int = 1000, job: int | None = None
) -> dict[str, str]:
    """A Slurm-like environment: an array task when ``task`` is given, else a regular job."""
    env = {"SLURM_PROCID": str(procid)}
    if task is None:
        env["SLURM_JOB_ID"] = str(job if job is not None else array_job)
    else:
        env["SLURM_ARRAY_JOB_ID"] = str(array_job)
        env["SLURM_ARRAY_TASK_ID"] = str(task)
        env["SLURM_JOB_ID"] = str(job if job is not None else array_job + 1 + task)
    return env
