"""Who this launcher is: its Slurm allocation unit, read from the environment.

An *allocation unit* is what Slurm can take away from a job as a whole: one task of
a job array, or the whole job for a regular (non-array) job. Every launcher of the
unit (one per node, started by one ``srun``) sees the same unit identity; only the
launcher with ``SLURM_PROCID=0`` is the unit's *process 0*.

This module is standard-library only: a producer on a controller node can use it
without PyTorch.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from .._errors import SegmentHealthError

__all__ = ["AllocationUnit", "InvalidIdentityError", "SlurmId", "validate_id"]


class InvalidIdentityError(ValueError, SegmentHealthError):
    """A Slurm identity value is unusable (not decimal digits, or inconsistent).

    Attributes:
        canonical: for digits with leading zeros (``007``), the id as Slurm writes it
            (``7``); else ``None``.
    """

    def __init__(self, message: str, canonical: str | None = None) -> None:
        super().__init__(message)
        self.canonical = canonical


class SlurmId(str):
    """A Slurm id that was validated where it entered: a non-empty string of ASCII digits
    without leading zeros (``0`` itself is an id), as Slurm writes every id.

    Made only by :func:`validate_id`. Every layer below the entry (the unit, the
    replacement-group markers, the hand-off) takes a ``SlurmId`` as it is.
    """

    __slots__ = ()


def validate_id(name: str, value: str) -> SlurmId:
    """Return ``value`` as a :class:`SlurmId` when it is a non-empty string of ASCII
    decimal digits without leading zeros; a ``SlurmId`` is returned as it is (it was
    validated when made).

    Identity values become part of a file name; anything but digits (``../x``, ``7/..``,
    an empty string) could make the path escape the decision directory. Slurm writes no
    id with leading zeros (``SLURM_ARRAY_TASK_ID`` is ``7``, never ``007``), so a
    decision for ``007`` would name a file no launcher reads: it is refused too.

    Raises:
        InvalidIdentityError: naming ``name`` and the refused value; for leading zeros,
            with the id Slurm writes (:attr:`InvalidIdentityError.canonical`).
    """
    if isinstance(value, SlurmId):
        return value
    if not (value.isascii() and value.isdigit()):
        raise InvalidIdentityError(
            f"{name}={value!r} is not a decimal Slurm id; expected digits only"
        )
    canonical = value.lstrip("0") or "0"
    if canonical != value:
        raise InvalidIdentityError(
            f"{name}={value!r} has leading zeros, which Slurm never writes: give {canonical}",
            canonical,
        )
    return SlurmId(value)


@dataclass(frozen=True)
class AllocationUnit:
    """The Slurm allocation unit of one launcher.

    Attributes:
        job_id: ``SLURM_ARRAY_JOB_ID`` for an array task, else ``SLURM_JOB_ID``.
        task_id: ``SLURM_ARRAY_TASK_ID`` for an array task, else ``SLURM_JOB_ID``.
        is_array: whether the unit is an array task (and so a replacement group).
        procid: the launcher's ``SLURM_PROCID`` as given, or ``None`` when unset.
        restart_count: ``SLURM_RESTART_COUNT`` (how often Slurm requeued the unit;
            ``"0"`` when unset or empty), or ``None`` when it is not decimal digits:
            the unit's lives cannot be told apart, so nothing keyed by them is used.

    The ids and the restart count are :class:`SlurmId` once the unit is made: given as
    plain strings (the constructor is an entry), they are validated here; read by
    :meth:`from_env`, they were validated as the variables they came from.

    Raises:
        InvalidIdentityError: an id or the restart count is not decimal digits.
    """

    job_id: str
    task_id: str
    is_array: bool
    procid: str | None = None
    restart_count: str | None = "0"

    def __post_init__(self) -> None:
        object.__setattr__(self, "job_id", validate_id("job_id", self.job_id))
        object.__setattr__(self, "task_id", validate_id("task_id", self.task_id))
        if self.restart_count is not None:
            count = validate_id("restart_count", self.restart_count)
            object.__setattr__(self, "restart_count", count)

    @property
    def is_process_zero(self) -> bool:
        """True only for ``SLURM_PROCID`` exactly ``"0"``."""
        return self.procid == "0"

    @property
    def replacement_group(self) -> str | None:
        """The array task id that names this unit's replacement group, or ``None``.

        A regular job has no replacement group: nothing can take its place inside
        the same job, so nothing is published for it.
        """
        return self.task_id if self.is_array else None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> AllocationUnit | None:
        """Read the unit from Slurm's variables in ``environ`` (default ``os.environ``).

        Returns ``None`` when there is no Slurm job id at all (not running under Slurm).
        A ``SLURM_RESTART_COUNT`` that is not decimal digits does not make the unit
        unusable: its :attr:`restart_count` is ``None``.

        Raises:
            InvalidIdentityError: an id is not decimal digits, or only one of
                ``SLURM_ARRAY_JOB_ID`` / ``SLURM_ARRAY_TASK_ID`` is set.
        """
        env = os.environ if environ is None else environ
        procid = env.get("SLURM_PROCID")
        restart_count = _restart_count(env.get("SLURM_RESTART_COUNT"))
        array_job_id = env.get("SLURM_ARRAY_JOB_ID")
        array_task_id = env.get("SLURM_ARRAY_TASK_ID")
        if array_job_id is not None or array_task_id is not None:
            if array_job_id is None or array_task_id is None:
                raise InvalidIdentityError(
                    "SLURM_ARRAY_JOB_ID and SLURM_ARRAY_TASK_ID must be set together; "
                    f"got SLURM_ARRAY_JOB_ID={array_job_id!r}, "
                    f"SLURM_ARRAY_TASK_ID={array_task_id!r}"
                )
            return cls(
                validate_id("SLURM_ARRAY_JOB_ID", array_job_id),
                validate_id("SLURM_ARRAY_TASK_ID", array_task_id),
                is_array=True,
                procid=procid,
                restart_count=restart_count,
            )
        job_id = env.get("SLURM_JOB_ID")
        if job_id is None:
            return None
        job = validate_id("SLURM_JOB_ID", job_id)
        return cls(job, job, is_array=False, procid=procid, restart_count=restart_count)


def _restart_count(value: str | None) -> SlurmId | None:
    """``SLURM_RESTART_COUNT`` as a :class:`SlurmId` (``"0"`` when unset or empty), or
    ``None`` when it is not decimal digits."""
    try:
        return validate_id("SLURM_RESTART_COUNT", value or "0")
    except InvalidIdentityError:
        return None
