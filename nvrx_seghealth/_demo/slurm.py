"""Slurm-like identities for simulated launchers.

Mirrors what ``sbatch --array`` + ``srun -N<n> --ntasks-per-node=1`` export on a real
cluster: every launcher of a unit sees the same job and array ids and differs only in
``SLURM_PROCID``/``SLURM_NODEID``. Like real Slurm, the array's
*last* task gets ``SLURM_JOB_ID == SLURM_ARRAY_JOB_ID`` and the others new ids, so job
ids alone do not name a task.
"""

from __future__ import annotations

from .._decision.unit import AllocationUnit
from .spec import JobSpec

__all__ = ["allocation_unit", "slurm_environment"]


def _job_id(spec: JobSpec, unit: int) -> int:
    if not spec.array or unit == spec.tasks - 1:
        return spec.array_job_id
    return spec.array_job_id + 1 + unit


def slurm_environment(spec: JobSpec, unit: int, procid: int) -> dict[str, str]:
    """The ``SLURM_*`` variables of launcher ``procid`` of ``unit``."""
    env = {
        "SLURM_JOB_ID": str(_job_id(spec, unit)),
        "SLURM_PROCID": str(procid),
        "SLURM_NODEID": str(procid),
        "SLURM_LOCALID": "0",
        "SLURM_NNODES": str(spec.nodes_per_task),
        "SLURM_NTASKS": str(spec.nodes_per_task),
        "SLURM_STEP_ID": "0",
        "SLURMD_NODENAME": f"{spec.unit_name(unit)}-n{procid}",
    }
    if spec.array:
        env |= {
            "SLURM_ARRAY_JOB_ID": str(spec.array_job_id),
            "SLURM_ARRAY_TASK_ID": str(unit),
            "SLURM_ARRAY_TASK_COUNT": str(spec.tasks),
            "SLURM_ARRAY_TASK_MIN": "0",
            "SLURM_ARRAY_TASK_MAX": str(spec.tasks - 1),
        }
    return env


def allocation_unit(spec: JobSpec, unit: int) -> AllocationUnit:
    """The unit as the consumer derives it (its decision file is named after it)."""
    found = AllocationUnit.from_env(slurm_environment(spec, unit, 0))
    assert found is not None  # SLURM_JOB_ID is always set
    return found
