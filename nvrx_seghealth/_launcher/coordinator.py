"""What one launcher of a checked allocation unit does around each join.

:func:`~.roles.coordinator_for` builds one coordinator per launcher, for its role in the
unit. This module holds what the roles share, :class:`Coordinator`:

* :class:`~.process_zero.ProcessZero` (``SLURM_PROCID=0``) judges the decision file and
  answers its siblings.
* :class:`~.sibling.Sibling` (an array task's other launchers) stands on process 0's
  verdict or on its group's marker.

Every other launcher has no coordinator: the handler only delegates. The rules:

* Every piece of a coordinator's own work goes through one :class:`~.failopen.FailOpen`.
* Only an exclusion, and what stops the launcher (:mod:`.signals`), leave as exceptions.
* :meth:`Coordinator.exclude` is the one door of an exclusion, and the first one stands.
* Once stopped, a coordinator starts no more work of its own.

The roles' story, the hand-off between them included: docs/concepts.md.
"""

from __future__ import annotations

import abc
import logging

from .._decision.unit import AllocationUnit
from .._errors import Exclusion, UnhealthyNodeException
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

    The handler calls, for each ``next_rendezvous()``: :meth:`joining`, then the inner
    rendezvous, then :meth:`out_of_rendezvous` (whether it returned or raised), then
    :meth:`joined` with its result and the round's :class:`~.watch.WorldSignal`.

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

    def joining(self) -> None:
        """Decide before joining a round.

        Raises:
            UnhealthyNodeException: the unit is excluded.
        """
        if self.exclusion is not None:
            raise self.exclusion
        self._events.rank = None
        self._decide()

    def out_of_rendezvous(self) -> None:
        """The inner ``next_rendezvous()`` returned or raised."""

    def joined(self, rank: int, world: WorldSignal | None, *, look: bool = True) -> None:
        """The launcher joined a round as ``rank``; ``world``: the round's signal, which
        the handler tells when this launcher leaves the round (:mod:`.watch`). ``look``:
        judge the unit again now; ``False`` where the launcher may not leave the round it
        joined (:mod:`.rankexchange`), so that no slow stat holds a formed round.

        Raises:
            UnhealthyNodeException: the unit is excluded.
        """
        self._events.rank = rank

    def stop(self) -> None:
        """Stop any work of the coordinator's own, for good (the launcher leaves)."""
        self._stopped = True

    @abc.abstractmethod
    def _decide(self) -> None:
        """Decide before joining a round; raise :meth:`exclude`'s exception to refuse."""

    def exclude(self, exclusion: Exclusion) -> UnhealthyNodeException:
        """Exclude the unit: build the exception, log it, record it, and return it.

        The first exclusion stands: a later one returns the first exception again.
        """
        if self.exclusion is None:
            self.exclusion = exclusion.error(self.unit.job_id, self.unit.task_id)
            # The tokens end the line, so a logfmt reader takes them as they are.
            log.error(
                "Segment health check: %s; %s",
                self.exclusion,
                format_fields(self.exclusion.fields()),
            )
            self._events.excluded(exclusion)
        return self.exclusion
