"""``SegmentHealthRendezvousHandler``: keeps an excluded allocation unit out of the rendezvous.

The wrapper sits around any torch ``RendezvousHandler`` (c10d, etcd-v2, a launcher's
own) and adds, in ``next_rendezvous()``:

1. Process 0 of the unit (``SLURM_PROCID=0``) stats the decision artifact. A non-empty
   regular file excludes the unit: for an array task the replacement-group marker is
   published in the rendezvous store, then :class:`UnhealthyNodeException` is raised.
   A regular job has no replacement group; process 0 only raises, and
   ``srun --kill-on-bad-exit=1`` ends the step.
2. The hand-off (:mod:`.handoff`, array tasks): process 0 publishes its verdict for
   this attempt (after the marker, when excluded); every other launcher of the task
   waits for a verdict newer than its last one, at most ``handoff_timeout`` seconds,
   before it may join. Without a verdict in time it joins anyway (one WARNING): a
   missing process 0 never holds the job.
3. Any launcher of an array task whose group is marked raises without joining. This
   is how the unit leaves a rendezvous whose host knows nothing of groups.
4. Otherwise the inner handler's ``next_rendezvous()`` runs.
5. Right after it returns, an array launcher looks at its marker again. With the
   hand-off this only matters when a sibling joined without a verdict; then process 0
   may have published while this launcher waited inside the rendezvous. Marked: raise,
   so at most one more round is needed.

Once excluded, the handler stays excluded: later ``next_rendezvous()`` calls raise
again, and ``shutdown()`` / ``set_closed()`` do **not** reach the inner handler. torch's
``launch_agent`` calls ``shutdown()`` after any failure, and a dynamic handler's
``shutdown()`` closes the rendezvous for every node; delegating it would end the whole
job because one unit left.
"""

from __future__ import annotations

import datetime
import logging
import os
import socket
import time
from collections.abc import Mapping

from torch.distributed import Store
from torch.distributed.elastic.rendezvous import RendezvousHandler, RendezvousInfo

from .allocation import AllocationUnit, InvalidIdentityError
from .artifact import DEFAULT_STAT_TIMEOUT, Decision, require_absolute_directory
from .check import SegmentHealthCheck, install_check, unit_from_env, validate_stat_timeout
from .errors import UnhealthyNodeException
from .handoff import Verdict, VerdictHandoff, default_handoff_timeout, validate_handoff_timeout
from .markers import ReplacementGroupMarkers

__all__ = ["SegmentHealthRendezvousHandler"]

log = logging.getLogger(__name__)


class SegmentHealthRendezvousHandler(RendezvousHandler):
    """A ``RendezvousHandler`` that refuses to join for an excluded allocation unit.

    Args:
        inner: the handler that runs the actual rendezvous.
        store: the store the inner rendezvous shares between all launchers (for c10d,
            the TCPStore; for etcd-v2, the ``EtcdStore``), used for replacement-group
            markers. ``None``: markers can be neither published nor read (one WARNING);
            process 0 still excludes itself.
        directory: absolute path of the decision directory; ``None`` or empty disables
            the segment health check, and the wrapper only delegates.
        environ: where to read Slurm's variables (default ``os.environ``).
        stat_timeout: seconds one ``stat`` of the artifact may take (``None``: no bound).
        backend: the name ``get_backend()`` reports (default: the inner handler's).
            A registered backend must report the name it was registered under.
        handoff_timeout: seconds a sibling waits for process 0's verdict before it
            joins without one; ``None``: ``stat_timeout`` plus
            :data:`~.handoff.HANDOFF_MARGIN` (30 s with the defaults); ``0``: no hand-off.

    Raises:
        ValueError: ``directory`` is not absolute, ``stat_timeout`` is not positive, or
            ``handoff_timeout`` is negative.
    """

    def __init__(
        self,
        inner: RendezvousHandler,
        *,
        store: Store | None,
        directory: str | None,
        environ: Mapping[str, str] | None = None,
        stat_timeout: float | None = DEFAULT_STAT_TIMEOUT,
        backend: str | None = None,
        handoff_timeout: float | None = None,
    ) -> None:
        self._inner = inner
        self._backend = backend or inner.get_backend()
        self._unit: AllocationUnit | None = None
        self._check: SegmentHealthCheck | None = None
        self._markers: ReplacementGroupMarkers | None = None
        self._exclusion: UnhealthyNodeException | None = None
        self._handoff: VerdictHandoff | None = None
        self._handoff_timeout = (
            default_handoff_timeout(stat_timeout)
            if handoff_timeout is None
            else validate_handoff_timeout(handoff_timeout)
        )
        if not directory:
            return
        require_absolute_directory(directory)
        validate_stat_timeout(stat_timeout)
        self._unit = unit_from_env(environ)
        self._check = install_check(directory, self._unit, stat_timeout=stat_timeout)
        if self._unit is None or not self._unit.is_array:
            return
        if store is None:
            log.warning(
                "Segment health check has no rendezvous store: replacement-group markers "
                "for array task %s_%s can be neither published nor read; process 0 still "
                "excludes itself, the task's other launchers are stopped only by srun",
                self._unit.job_id,
                self._unit.task_id,
            )
            return
        self._markers = ReplacementGroupMarkers(store, inner.get_run_id(), self._unit.job_id)
        if self._handoff_timeout > 0:
            self._handoff = self._handoff_for(self._markers, self._unit, environ)

    @staticmethod
    def _handoff_for(
        markers: ReplacementGroupMarkers,
        unit: AllocationUnit,
        environ: Mapping[str, str] | None,
    ) -> VerdictHandoff | None:
        restart_count = (os.environ if environ is None else environ).get("SLURM_RESTART_COUNT")
        try:
            return VerdictHandoff(markers, unit.task_id, restart_count or "0")
        except InvalidIdentityError as error:
            log.warning("Segment health check hand-off disabled: %s", error)
            return None

    @property
    def inner(self) -> RendezvousHandler:
        """The wrapped handler."""
        return self._inner

    @property
    def check(self) -> SegmentHealthCheck | None:
        """The installed check (process 0 only), else ``None``."""
        return self._check

    @property
    def markers(self) -> ReplacementGroupMarkers | None:
        """The markers of this launcher's array job, when it has a store and a group."""
        return self._markers

    @property
    def handoff(self) -> VerdictHandoff | None:
        """The hand-off with process 0, for an array launcher with a store, else ``None``."""
        return self._handoff

    @property
    def excluded(self) -> bool:
        """Whether this launcher's unit has been excluded."""
        return self._exclusion is not None

    def get_backend(self) -> str:
        """See base class."""
        return self._backend

    @property
    def use_agent_store(self) -> bool:
        """See base class."""
        return self._inner.use_agent_store

    def next_rendezvous(self) -> RendezvousInfo:
        """Check the unit, then join through the inner handler; see the module doc.

        Raises:
            UnhealthyNodeException: the unit is excluded.
            Exception: whatever the inner handler raised.
        """
        if self._exclusion is not None:
            raise self._exclude(
                str(self._exclusion),
                path=self._exclusion.path,
                size=self._exclusion.size,
            )
        if self._check is not None:
            decision = self._check.evaluate()
            if not decision.proceed:
                self._exclude_by_decision(decision)
            self._publish_verdict(Verdict.UNCHECKED if decision.failed_open else Verdict.HEALTHY)
        elif self._handoff is not None:
            # A task marked earlier gets no further verdicts: no need to wait for one.
            self._refuse_if_marked("before joining")
            self._await_verdict()
        self._refuse_if_marked("before joining")
        info = self._inner.next_rendezvous()
        self._refuse_if_marked("after joining")
        return info

    def is_closed(self) -> bool:
        """See base class."""
        return self._inner.is_closed()

    def set_closed(self) -> None:
        """See base class; does nothing once this unit was excluded."""
        if self._exclusion is not None:
            log.info("Segment health check: excluded unit does not close the shared rendezvous")
            return
        self._inner.set_closed()

    def num_nodes_waiting(self) -> int:
        """See base class."""
        return self._inner.num_nodes_waiting()

    def get_run_id(self) -> str:
        """See base class."""
        return self._inner.get_run_id()

    def shutdown(self) -> bool:
        """See base class. After an exclusion, returns ``False`` without closing.

        The excluded launcher is about to exit; the rendezvous stays open for the
        healthy units, which re-form without it.
        """
        if self._exclusion is not None:
            log.info(
                "Segment health check: excluded unit leaves the shared rendezvous open "
                "for the other units"
            )
            return False
        return self._inner.shutdown()

    def _exclude_by_decision(self, decision: Decision) -> None:
        unit = self._unit
        assert unit is not None  # a check is only installed for a known unit
        # Logged before the marker goes out: once siblings see it, srun may end this
        # launcher at any moment.
        exclusion = self._exclude(
            f"allocation unit job_id={unit.job_id} task_id={unit.task_id} is excluded: "
            f"decision file {decision.path} is non-empty ({decision.size} bytes)",
            path=decision.path,
            size=decision.size,
        )
        if unit.replacement_group is not None:
            self._publish_marker(unit, decision)
            self._publish_verdict(Verdict.EXCLUDED)
        raise exclusion

    def _publish_verdict(self, verdict: Verdict) -> None:
        if self._handoff is None:
            return
        try:
            self._handoff.publish(verdict)
        except Exception as error:  # siblings then join after their bound (fail open)
            unit = self._unit
            assert unit is not None
            log.warning(
                "Segment health check could not publish process 0's verdict (%s) for array "
                "task %s_%s (%s: %s); the task's other launchers join after %g s without it",
                verdict.value,
                unit.job_id,
                unit.task_id,
                type(error).__name__,
                error,
                self._handoff_timeout,
            )

    def _await_verdict(self) -> None:
        """Sibling: wait for process 0's verdict; raise when it is an exclusion."""
        handoff, unit = self._handoff, self._unit
        assert handoff is not None and unit is not None
        started = time.monotonic()
        try:
            taken = handoff.take(self._handoff_timeout)
        except Exception as error:
            log.warning(
                "Segment health check could not read process 0's verdict for array task "
                "%s_%s (%s: %s); joining without it (fail open)",
                unit.job_id,
                unit.task_id,
                type(error).__name__,
                error,
            )
            return
        if taken is None:
            log.warning(
                "Segment health check: no verdict from process 0 of array task %s_%s within "
                "%g s (process 0 absent, slow, or running without the check); joining "
                "without it (fail open)",
                unit.job_id,
                unit.task_id,
                self._handoff_timeout,
            )
            return
        number, verdict = taken
        waited = time.monotonic() - started
        # A noticeable wait is worth a line: it is time the whole job spends at this gate.
        log.log(
            logging.INFO if waited >= 1 else logging.DEBUG,
            "Segment health check: process 0 of array task %s_%s gave verdict %d: %s "
            "(waited %.1f s)",
            unit.job_id,
            unit.task_id,
            number,
            verdict.value,
            waited,
        )
        if verdict is Verdict.EXCLUDED:
            self._refuse_if_marked("before joining")
            raise self._exclude(
                f"allocation unit job_id={unit.job_id} task_id={unit.task_id} is excluded "
                f"(before joining): its process 0 gave the verdict {verdict.value!r}"
            )

    def _publish_marker(self, unit: AllocationUnit, decision: Decision) -> None:
        if self._markers is None:
            return  # already warned at construction
        detail = (
            f"{decision.path} ({decision.size} bytes) host={socket.gethostname()} "
            f"pid={os.getpid()} at={datetime.datetime.now(datetime.timezone.utc).isoformat()}"
        )
        try:
            self._markers.publish(unit.task_id, detail)
        except Exception as error:  # the exclusion itself stands regardless
            log.warning(
                "Segment health check could not publish the unhealthy marker of array "
                "task %s_%s (%s: %s); the task's other launchers are stopped only by srun",
                unit.job_id,
                unit.task_id,
                type(error).__name__,
                error,
            )

    def _refuse_if_marked(self, when: str) -> None:
        if self._markers is None:
            return
        unit = self._unit
        assert unit is not None and unit.replacement_group is not None
        try:
            detail = self._markers.detail(unit.replacement_group)
        except Exception as error:
            log.warning(
                "Segment health check could not read the marker of array task %s_%s "
                "(%s: %s); proceeding (fail open)",
                unit.job_id,
                unit.task_id,
                type(error).__name__,
                error,
            )
            return
        if detail is not None:
            raise self._exclude(
                f"allocation unit job_id={unit.job_id} task_id={unit.task_id} is excluded "
                f"({when}): its process 0 marked the replacement group unhealthy: {detail}"
            )

    def _exclude(
        self, message: str, *, path: str | None = None, size: int | None = None
    ) -> UnhealthyNodeException:
        """Record the exclusion (logged the first time) and return the exception to raise."""
        unit = self._unit
        assert unit is not None
        if self._exclusion is None:
            log.error("Segment health check: %s", message)
        self._exclusion = UnhealthyNodeException(
            message, job_id=unit.job_id, task_id=unit.task_id, path=path, size=size
        )
        return self._exclusion
