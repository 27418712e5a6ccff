"""Which coordinator a launcher gets: :func:`coordinator_for`.

See :mod:`.coordinator` for what each role does.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from torch.distributed import Store

from .._decision.unit import AllocationUnit
from .._settings.check_settings import CheckSettings
from .check import install_check, unit_from_env
from .coordinator import Coordinator
from .events import DecisionRecorder
from .handoff import VerdictHandoff
from .markers import ReplacementGroupMarkers
from .process_zero import ProcessZero
from .sibling import Sibling

__all__ = ["coordinator_for"]

log = logging.getLogger(__name__)


def coordinator_for(
    settings: CheckSettings,
    *,
    store: Store | None,
    run_id: str,
    events: DecisionRecorder,
    environ: Mapping[str, str] | None = None,
) -> Coordinator | None:
    """The coordinator of this launcher's role, or ``None`` when it has none.

    Reads the unit from ``environ`` (default ``os.environ``); an unusable identity or
    a missing store is one WARNING each, and the launcher does what it still can.
    """
    unit = events.unit = unit_from_env(environ)
    if unit is None:
        return None
    check = install_check(settings, unit)
    if check is not None:
        events.installed(settings.directory)
    group = unit.replacement_group
    markers = None if group is None else _markers(store, run_id, unit)
    handoff = (
        _handoff(markers, group, unit)
        if markers is not None and group is not None and settings.handoff_enabled
        else None
    )
    if check is not None:
        return ProcessZero(unit, events, settings, check, markers, handoff)
    if markers is not None:
        return Sibling(unit, events, settings, markers, handoff)
    return None


def _markers(
    store: Store | None, run_id: str, unit: AllocationUnit
) -> ReplacementGroupMarkers | None:
    if store is None:
        log.warning(
            "Segment health check has no rendezvous store: replacement-group markers "
            "for array task %s_%s can be neither published nor read; process 0 still "
            "excludes itself, the task's other launchers are stopped only by srun",
            unit.job_id,
            unit.task_id,
        )
        return None
    return ReplacementGroupMarkers(store, run_id, unit.job_id)


def _handoff(
    markers: ReplacementGroupMarkers, group: str, unit: AllocationUnit
) -> VerdictHandoff | None:
    if unit.restart_count is None:
        log.warning(
            "Segment health check hand-off disabled: SLURM_RESTART_COUNT is not a decimal "
            "Slurm id, so this life of array task %s_%s cannot be told from another; the "
            "task's other launchers look at its marker instead",
            unit.job_id,
            unit.task_id,
        )
        return None
    return VerdictHandoff(markers, group, unit.restart_count)
