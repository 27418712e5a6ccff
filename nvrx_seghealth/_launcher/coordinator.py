"""What one launcher of a checked allocation unit does around each join.

:func:`~.roles.coordinator_for` builds, once per launcher, the coordinator of its role in
the unit, from the validated :class:`~.._settings.check_settings.CheckSettings` and Slurm's
environment. This module holds what both roles share, :class:`Coordinator`; each role has
its own module:

* :class:`~.process_zero.ProcessZero` (``SLURM_PROCID=0``): stats the decision file before each
  join. A non-empty regular file excludes the unit: for an array task the
  replacement-group marker is published and the hand-off answers every request with
  ``excluded``; then :class:`~.._errors.UnhealthyNodeException` is raised. Otherwise it
  answers its siblings' verdict requests (:mod:`.handoff`): at once while it stands
  in the rendezvous, and between its attempts from a thread that looks for requests
  every :data:`~.process_zero.RESPONDER_INTERVAL` seconds, so a sibling that restarts alone is
  answered while process 0's workers run. It stats again right after joining, before its
  workers start, and with the watch on (:mod:`.watch`) every ``watch_interval`` seconds
  while they run.
* :class:`~.sibling.Sibling` (the other launchers of an array task): asks process 0 for a
  verdict and waits, at most ``handoff_timeout`` seconds, for one that covers its
  request. ``excluded``: it refuses without joining. No verdict (no hand-off, or none
  in time, one WARNING): it looks at its group's marker before joining. Verdict or
  not, it looks at the marker again right after the inner rendezvous returns (one
  store ``check``): it may have waited inside the rendezvous while process 0
  published, and a verdict given between rounds comes from a stat that process 0 does
  not join on (process 0 stats again when its own agent restarts it, and that stat may
  exclude). Marked: it raises, so at most one more round is needed.

Every other launcher (a regular job's other tasks, an array task without a store,
a launcher outside Slurm) has no coordinator: the handler only delegates.

Do no harm: every piece of a coordinator's own work (the stat, each store call)
goes through one fail-open helper, :class:`~.failopen.FailOpen`. A failure is one
WARNING and a ``fail_open`` event, and the launcher goes on as plain torchrun would;
only an exclusion, and what stops the launcher (torch's ``SignalException``,
``KeyboardInterrupt``, ``SystemExit``: :mod:`.signals`), leave a coordinator as an
exception. Once excluded, it stays excluded; once stopped, it starts no more work of
its own. Each decision is recorded once as an event and metrics (:mod:`.events`).
"""

from __future__ import annotations

import abc
import logging

from .._decision.unit import AllocationUnit
from .._errors import ExclusionReason, UnhealthyNodeException
from .._logfmt import format_fields
from .._settings.check_settings import CheckSettings
from .events import DecisionRecorder
from .failopen import FailOpen
from .handoff import VerdictHandoff
from .markers import ReplacementGroupMarkers
from .watch import WorldSignal

__all__ = ["Coordinator"]

log = logging.getLogger(__name__)


class Coordinator(abc.ABC):
    """One launcher's part in its unit's check; see the module documentation.

    The handler calls, for each ``next_rendezvous()``: :meth:`before_joining`, then the
    inner rendezvous, then :meth:`out_of_rendezvous` (whether it returned or raised),
    then :meth:`after_joining` with its result and the round's
    :class:`~.watch.WorldSignal`.

    Attributes:
        unit: the launcher's allocation unit.
        group: its replacement group (``None`` for a regular job).
        markers: the array job's markers, when the launcher has a store and a group.
        handoff: the hand-off with process 0, for an array task with a store.
        exclusion: the exclusion, once the unit is excluded, else ``None``.
    """

    def __init__(
        self,
        unit: AllocationUnit,
        events: DecisionRecorder,
        settings: CheckSettings,
        markers: ReplacementGroupMarkers | None,
        handoff: VerdictHandoff | None,
    ) -> None:
        self.unit = unit
        self.group = unit.replacement_group
        self.markers = markers
        self.handoff = handoff
        self.exclusion: UnhealthyNodeException | None = None
        self._events = events
        self._settings = settings
        #: Runs every piece of the coordinator's own work (:class:`~.failopen.FailOpen`).
        self.fail_open = FailOpen(
            events, f" of array task {unit.job_id}_{unit.task_id}" if unit.is_array else ""
        )
        self._stopped = False

    def before_joining(self) -> None:
        """Decide before joining a round.

        Raises:
            UnhealthyNodeException: the unit is excluded.
        """
        if self.exclusion is not None:
            raise self.exclusion
        self._events.rank = None
        self._before_joining()

    def out_of_rendezvous(self) -> None:
        """The inner ``next_rendezvous()`` returned or raised."""

    def after_joining(self, rank: int, world: WorldSignal | None) -> None:
        """The launcher joined a round as ``rank``; ``world``: the round's signal, which
        the handler tells when this launcher leaves the round (:mod:`.watch`).

        Raises:
            UnhealthyNodeException: the unit is excluded.
        """
        self._events.rank = rank

    def stop(self) -> None:
        """Stop any work of the coordinator's own, for good (the launcher leaves)."""
        self._stopped = True

    @abc.abstractmethod
    def _before_joining(self) -> None: ...

    def _exclude(
        self,
        message: str,
        reason: ExclusionReason,
        *,
        after_joining: bool = False,
        during_training: bool = False,
        path: str | None = None,
        size: int | None = None,
        marker: str | None = None,
    ) -> UnhealthyNodeException:
        """The exclusion to raise; logged and recorded the first time."""
        if self.exclusion is None:
            unit = self.unit
            self.exclusion = UnhealthyNodeException(
                message,
                job_id=unit.job_id,
                task_id=unit.task_id,
                reason=reason,
                after_joining=after_joining,
                path=path,
                size=size,
                marker=marker,
            )
            # The tokens end the line, so a logfmt reader takes them as they are.
            log.error(
                "Segment health check: %s; %s", message, format_fields(self.exclusion.fields())
            )
            # process 0's stat before joining needs no ``when``: it is the only one
            when = (
                "during-training"
                if during_training
                else _when(after_joining)
                if after_joining or path is None
                else None
            )
            self._events.excluded(reason, path=path, size=size, when=when, marker=marker)
        return self.exclusion

    def _refuse_if_marked(self, markers: ReplacementGroupMarkers, *, after_joining: bool) -> None:
        """Raise when the unit's group is marked unhealthy (array tasks only)."""
        if self.group is None:
            return
        detail = self.fail_open(
            "read-marker", "read the marker; proceeding", markers.detail, self.group
        )
        if detail is not None:
            raise self._exclude(
                f"allocation unit job_id={self.unit.job_id} task_id={self.unit.task_id} is "
                f"excluded ({_when(after_joining).replace('-', ' ')}): its process 0 marked "
                f"the replacement group unhealthy: {detail}",
                ExclusionReason.MARKER,
                after_joining=after_joining,
                marker=detail,
            )


def _when(after_joining: bool) -> str:
    return "after-joining" if after_joining else "before-joining"
