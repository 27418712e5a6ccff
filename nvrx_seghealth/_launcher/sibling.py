"""The coordinator of an array task's other launchers: process 0's verdict or the marker.

See :mod:`.coordinator` for the roles; :mod:`.handoff` for the protocol it asks.
"""

from __future__ import annotations

import logging
import time

from .._decision.unit import AllocationUnit
from .._errors import Exclusion, ExclusionReason, When
from .._settings.check_settings import CheckSettings
from .coordinator import Coordinator
from .events import DecisionRecorder
from .handoff import Verdict, VerdictHandoff
from .markers import ReplacementGroupMarkers
from .watch import WorldSignal

__all__ = ["Sibling"]

log = logging.getLogger(__name__)


class Sibling(Coordinator):
    """Another launcher of an array task: stands on process 0's verdict or the marker."""

    markers: ReplacementGroupMarkers

    def __init__(
        self,
        unit: AllocationUnit,
        events: DecisionRecorder,
        settings: CheckSettings,
        markers: ReplacementGroupMarkers,
        handoff: VerdictHandoff | None,
    ) -> None:
        super().__init__(unit, events, settings, markers, handoff)

    def _decide(self) -> None:
        admitted = self.handoff is not None and self._await_verdict(self.handoff)
        if not admitted:
            self._refuse_if_marked(When.BEFORE_JOINING)

    def joined(self, rank: int, world: WorldSignal | None, *, look: bool = True) -> None:
        """Look at the marker once more (``look``): process 0 may have published it while
        this launcher waited inside the rendezvous, or after a verdict given between rounds."""
        super().joined(rank, world, look=look)
        if look:
            self._refuse_if_marked(When.AFTER_JOINING)

    def _refuse_if_marked(self, when: When) -> None:
        """Raise when the unit's group is marked unhealthy."""
        if self.group is None:
            return
        detail = self.fail_open(
            "read-marker", "read the marker; proceeding", self.markers.detail, self.group
        )
        if detail is not None:
            raise self.exclude(
                Exclusion(
                    ExclusionReason.MARKER,
                    when,
                    f"its process 0 marked the replacement group unhealthy: {detail}",
                    marker=detail,
                )
            )

    def _await_verdict(self, handoff: VerdictHandoff) -> bool:
        """Ask process 0 for a verdict and wait for it.

        Returns whether a verdict admitted this launcher (``False``: none came, fail
        open). Raises when the verdict is an exclusion.
        """
        unit, timeout = self.unit, self._settings.handoff_timeout
        started = time.monotonic()
        asked = self.fail_open(
            "request-verdict", "ask process 0 for a verdict; joining without one", handoff.request
        )
        if asked is None:
            return False
        request, answer = asked
        verdict = (
            answer.verdict
            if answer.covers(request)  # process 0 stands in the rendezvous: at once
            else self.fail_open(
                "await-verdict",
                "read process 0's verdict; joining without one",
                handoff.wait,
                request,
                timeout,
            )
        )
        waited = time.monotonic() - started
        self._events.verdict_waited(None if verdict is None else verdict.value, request, waited)
        if verdict is None:
            log.warning(
                "Segment health check: no verdict from process 0 of array task %s_%s within "
                "%g s (process 0 absent, slow, or running without the check); joining "
                "without it (fail open)",
                unit.job_id,
                unit.task_id,
                timeout,
            )
            return False
        # A noticeable wait is worth a line: it is time the whole job spends at this gate.
        log.log(
            logging.INFO if waited >= 1 else logging.DEBUG,
            "Segment health check: process 0 of array task %s_%s answered request %d: %s "
            "(waited %.1f s)",
            unit.job_id,
            unit.task_id,
            request,
            verdict.value,
            waited,
        )
        if verdict is Verdict.EXCLUDED:
            self._refuse_if_marked(When.BEFORE_JOINING)  # the marker names the decision
            raise self.exclude(
                Exclusion(
                    ExclusionReason.VERDICT,
                    When.BEFORE_JOINING,
                    f"its process 0 gave the verdict {verdict.value!r}",
                )
            )
        return True
