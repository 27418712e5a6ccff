"""The consumer: the segment health check that process 0 runs before each rendezvous.

:func:`get_segment_health_check` decides, from the configured directory and Slurm's
environment, whether *this* launcher installs the check. Only the launcher with
``SLURM_PROCID=0`` of its allocation unit does; every other launcher gets ``None`` and
never touches the decision file. The installed :class:`SegmentHealthCheck` performs one
bounded ``stat`` per call and logs what an operator needs:

* once, at install (INFO):
  ``Segment health check installed directory=<dir> job_id=<job> task_id=<task>``
* a missing decision: nothing (the producer may not be running);
* an unreadable path or a file that is not regular: one WARNING per evaluation,
  naming the path and the error; the unit proceeds (fail open);
* the first time the decision is missing, the directory itself is looked at once: a
  configured directory that does not exist (a typo, an unmounted filesystem) gets one
  WARNING, so the feature never turns itself off without a word.

Standard library only.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

from .._decision.boundedstat import prepare as prepare_stat_helper
from .._decision.decision_file import (
    Decision,
    DirectoryPath,
    Outcome,
    directory_problem,
    judge,
    unit_decision_file_path,
    unit_id,
)
from .._decision.helperprocess import HelperStartError
from .._decision.unit import AllocationUnit, InvalidIdentityError
from .._settings.check_settings import CheckSettings
from .._settings.durations import DEFAULT_STAT_TIMEOUT

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = [
    "SegmentHealthCheck",
    "get_segment_health_check",
    "install_check",
    "unit_from_env",
]

log = logging.getLogger(__name__)


class SegmentHealthCheck:
    """The decision check for one allocation unit.

    Calling it returns ``True`` when the unit may proceed (healthy, or the decision file
    could not be judged and the check fails open) and ``False`` when it is excluded.

    Args:
        directory: absolute path of the shared decision directory.
        job_id: the unit's job id (``SLURM_ARRAY_JOB_ID`` or ``SLURM_JOB_ID``), a
            string of decimal digits or an ``int``.
        task_id: the unit's task id (``SLURM_ARRAY_TASK_ID`` or ``SLURM_JOB_ID``), the
            same.
        stat_timeout: seconds one ``stat`` may take before failing open, in the
            range of :data:`~.._settings.durations.STAT_TIMEOUT`.

    Raises:
        ValueError: ``directory`` is not absolute, an id is not decimal digits, or
            ``stat_timeout`` is out of range (:class:`~.._errors.ConfigurationError`).
        TypeError: an id is neither a ``str`` nor an ``int`` (a ``bool`` included).
    """

    # Set by :meth:`from_settings`, the one builder of every check.
    directory: str
    job_id: str
    task_id: str
    path: str
    stat_timeout: float
    _directory_looked_at: bool

    def __new__(
        cls,
        directory: DirectoryPath,
        job_id: str | int,
        task_id: str | int,
        *,
        stat_timeout: float = DEFAULT_STAT_TIMEOUT,
    ) -> Self:
        """The door for raw values: validate them, then build as :meth:`from_settings`."""
        settings = CheckSettings.validate(directory, stat_timeout=stat_timeout)
        return cls.from_settings(settings, unit_id("job_id", job_id), unit_id("task_id", task_id))

    @classmethod
    def from_settings(cls, settings: CheckSettings, job_id: str, task_id: str) -> Self:
        """The check of the unit ``job_id``/``task_id`` with ``settings``, all validated
        where they entered and taken as they are; the constructor validates raw values and
        comes here too."""
        check = super().__new__(cls)
        check.directory = settings.directory
        check.job_id = job_id
        check.task_id = task_id
        check.path = unit_decision_file_path(settings.directory, job_id, task_id)
        check.stat_timeout = settings.stat_timeout
        check._directory_looked_at = False
        return check

    def __getnewargs_ex__(self) -> tuple[tuple[str, str, str], dict[str, float]]:
        """``pickle`` and ``copy`` rebuild a check through its constructor."""
        return (self.directory, self.job_id, self.task_id), {"stat_timeout": self.stat_timeout}

    def evaluate(self, *, warn: bool = True) -> Decision:
        """Stat the decision file once and return the decision; warn when failing open
        (``warn=False``: the caller warns, e.g. once for a run of failing looks)."""
        decision = judge(self.path, self.stat_timeout)
        if decision.failed_open and warn:
            log.warning(
                "Segment health check cannot judge %s (%s); proceeding (fail open)",
                decision.path,
                decision.reason,
            )
        elif decision.outcome is Outcome.ABSENT and not self._directory_looked_at:
            self._directory_looked_at = True
            problem = directory_problem(self.directory, self.stat_timeout)
            if problem is not None:
                log.warning(
                    "Segment health check: %s; no decision can be read until it does "
                    "(proceeding, fail open). Check the configured directory",
                    problem,
                )
        return decision

    def __call__(self) -> bool:
        return self.evaluate().proceed

    def __repr__(self) -> str:
        return (
            f"SegmentHealthCheck(directory={self.directory!r}, job_id={self.job_id!r}, "
            f"task_id={self.task_id!r})"
        )


def unit_from_env(environ: Mapping[str, str] | None = None) -> AllocationUnit | None:
    """Read this launcher's allocation unit; ``None`` (after one WARNING) when unusable
    or absent: it is only read when a decision directory is configured."""
    try:
        unit = AllocationUnit.from_env(environ)
    except InvalidIdentityError as error:
        log.warning("Segment health check not installed: %s", error)
        return None
    if unit is None:
        log.warning(
            "Segment health check not installed: a decision directory is configured, but "
            "this launcher's environment names no Slurm job (no SLURM_JOB_ID or "
            "SLURM_ARRAY_JOB_ID); launch it with srun to turn the check on"
        )
    return unit


def install_check(
    settings: CheckSettings, unit: AllocationUnit | None
) -> SegmentHealthCheck | None:
    """Install the check for ``unit`` when it is its process 0; log the install line.

    The stat helper process is started now, before the first round, so no stat's bound
    is spent on it; if it cannot be started, each stat tries again and reports it. Other
    processes' stuck calls in the directory are looked up now too, off the first round.
    """
    if unit is None or not unit.is_process_zero:
        return None
    check = SegmentHealthCheck.from_settings(settings, unit.job_id, unit.task_id)
    with contextlib.suppress(HelperStartError):  # the first stat fails open and says why
        prepare_stat_helper(check.path)
    log.info(
        "Segment health check installed directory=%s job_id=%s task_id=%s",
        settings.directory,
        unit.job_id,
        unit.task_id,
    )
    return check


def get_segment_health_check(
    directory: DirectoryPath | None,
    environ: Mapping[str, str] | None = None,
    *,
    stat_timeout: float = DEFAULT_STAT_TIMEOUT,
) -> SegmentHealthCheck | None:
    """Install the check for this launcher, or return ``None`` when it is not eligible.

    Eligible means: ``directory`` is given, Slurm's environment (``environ``, default
    ``os.environ``) names a job, and ``SLURM_PROCID`` is exactly ``"0"``. Installing logs
    the install line once (INFO). Identity values that are not decimal digits are
    refused with one WARNING and nothing is installed.

    Raises:
        ValueError: ``directory`` is not absolute (on every launcher, eligible or not:
            it is a configuration error), or ``stat_timeout`` is out of range.
    """
    if not directory:
        return None
    settings = CheckSettings.validate(directory, stat_timeout=stat_timeout)
    return install_check(settings, unit_from_env(environ))
