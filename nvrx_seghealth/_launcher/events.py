"""The wrapper's decisions as TorchElastic rendezvous events and metrics.

Every decision of a launcher is recorded once, in torch's own telemetry:

* an event, as torch's ``RdzvEvent``, on the destination where torch's dynamic rendezvous
  records its own (:data:`EVENT_DESTINATION`). Its ``name`` is an :class:`EventName`, its
  ``message`` the decision's logfmt fields (:func:`parse_fields` reads them back). Its
  node fields are those the inner dynamic handler gives its own events.
* data points through torch's ``put_metric``, in the group :data:`METRIC_GROUP`.

Nothing is built while torch's destination has its default ``NullHandler``. Recording
never raises: a failing handler costs one WARNING, then DEBUG lines, and the decision
stands. The application configures both before the rendezvous starts. Every field:
docs/reference/events.md.
"""

from __future__ import annotations

import enum
import logging
import os
import socket

from torch.distributed.elastic import events as torch_events
from torch.distributed.elastic import metrics as torch_metrics
from torch.distributed.elastic.events import NodeState, RdzvEvent
from torch.distributed.elastic.rendezvous import RendezvousHandler

from .._decision.decision_file import Decision, Outcome
from .._decision.unit import AllocationUnit
from .._errors import Exclusion, ExclusionReason, When
from .._logfmt import FieldValue, format_fields, parse_fields
from .._rendezvous.signals import stops_the_launcher

__all__ = [
    "EVENT_DESTINATION",
    "METRIC_GROUP",
    "DecisionRecorder",
    "EventName",
    "FailOpenReason",
    "MetricName",
    "format_fields",
    "parse_fields",
]

log = logging.getLogger(__name__)

#: torch's events destination the dynamic rendezvous records to; ours go there too.
EVENT_DESTINATION = "dynamic_rendezvous"
#: The ``put_metric`` group of every metric here (``torchelastic`` is torch's own).
METRIC_GROUP = "nvrx_seghealth"


class EventName(str, enum.Enum):
    """The ``name`` of each recorded event: one per decision."""

    #: Process 0 installed the check (once per launcher). Fields: ``directory``.
    INSTALLED = "nvrx_seghealth.installed"
    #: A stat found the unit healthy. Fields: ``outcome`` (``clear``: empty file,
    #: ``absent``: none), ``path``, ``check_us``, ``trigger``.
    PROCEED = "nvrx_seghealth.proceed"
    #: The unit goes on without a judgement. Fields: ``reason`` (a
    #: :class:`FailOpenReason`) and what it needs: ``path``, ``check_us``,
    #: ``trigger`` and ``detail`` for the decision file; ``action`` and ``error`` for
    #: the wrapper's own work; ``request`` and ``waited_s`` for a missing verdict;
    #: ``without_watch``, ``world_size`` and ``member_*`` for a world not restarted.
    FAIL_OPEN = "nvrx_seghealth.fail_open"
    #: The launcher leaves (once per launcher). Fields: ``by`` (an
    #: :class:`~.._errors.ExclusionReason`), ``path`` and ``size`` (decision file),
    #: ``when`` (a :class:`~.._errors.When` token; none for process 0's stat before
    #: joining), ``marker`` (the marker's text).
    EXCLUDED = "nvrx_seghealth.excluded"
    #: Process 0 marked its replacement group unhealthy. Fields: ``group``.
    MARKER_PUBLISHED = "nvrx_seghealth.marker_published"
    #: Process 0 answered its siblings. Fields: ``verdict`` (``healthy``,
    #: ``unchecked``, ``excluded``), ``covers`` (the requests answered so far),
    #: ``standing`` (answers every request while process 0 is in the rendezvous),
    #: ``trigger``.
    VERDICT_PUBLISHED = "nvrx_seghealth.verdict_published"
    #: A sibling got process 0's verdict. Fields: ``verdict``, ``request``, ``waited_s``.
    VERDICT_WAITED = "nvrx_seghealth.verdict_waited"
    #: The round's signal restarts this launcher's workers: a unit of its world left it,
    #: excluded by the watch or on joining (the watch on or off). Fields: ``aligned``
    #: (every member reached the restart), ``waited_s``.
    WORLD_RESTART = "nvrx_seghealth.world_restart"


class FailOpenReason(str, enum.Enum):
    """Why a unit went on without a judgement, or without acting on one (``reason`` of
    ``fail_open``)."""

    #: The decision file's stat failed or did not answer in time.
    UNREADABLE = Outcome.UNREADABLE.value
    #: The decision path is a directory, FIFO, socket or device.
    NOT_REGULAR = Outcome.NOT_REGULAR.value
    #: The wrapper's own work failed (a store call, a bug); ``action`` says which.
    WRAPPER_ERROR = "wrapper-error"
    #: A sibling had no verdict from process 0 within the hand-off timeout.
    NO_VERDICT = "no-verdict"
    #: A unit excluded by the watch trains on until its next restart: a member of
    #: its world has no watch (:mod:`.watch`), whose workers the restart would fail.
    #: ``without_watch``, ``world_size`` and the first such member's ``member_*``.
    MIXED_WATCH = "mixed-watch"


class MetricName(str, enum.Enum):
    """The metrics of :data:`METRIC_GROUP`."""

    #: Microseconds of each stat of the decision file (process 0).
    CHECK_DURATION = "check.duration.us"
    #: 1 for each excluded launcher.
    EXCLUDED = "excluded"
    #: Milliseconds each sibling waited for process 0's verdict (answered or not).
    VERDICT_WAIT = "verdict_wait.duration.ms"
    #: 1 for each fail-open; the name ends with the reason: ``fail_open.no-verdict``.
    FAIL_OPEN = "fail_open"


#: How the stat that led to a decision came about (``trigger``).
ATTEMPT = "attempt"  # process 0 about to join a round
REQUEST = "request"  # a sibling's request, between process 0's rounds
JOINED = "joined"  # process 0's look on joining, before its workers start
WATCH = "watch"  # the watch's looks while the workers run


class DecisionRecorder:
    """Records one launcher's decisions as events and metrics; never raises.

    The run id and node are read from ``inner`` when the first event is built (a
    wrapper that records nothing never asks).

    Attributes:
        unit: the launcher's allocation unit (``job_id``, ``task_id`` of every event).
        rank: the node's rank in the round it is in (``None`` outside one); the handler
            sets it when it joins a round and clears it when it leaves.
    """

    def __init__(self, inner: RendezvousHandler) -> None:
        self._inner = inner
        self.unit: AllocationUnit | None = None
        self.rank: int | None = None
        self._node: tuple[str, str, int, int | None] | None = None
        self._failing = False

    # -- decisions -----------------------------------------------------------------

    def installed(self, directory: str) -> None:
        """Process 0 installed the check."""
        self._event(EventName.INSTALLED, NodeState.INIT, directory=directory)

    def judged(self, decision: Decision, seconds: float, trigger: str) -> None:
        """One stat of the decision file: its duration; ``proceed`` or ``fail_open``.

        An unhealthy decision is recorded by :meth:`excluded` (with the marker after).
        """
        micros = round(seconds * 1e6)
        self._metric(MetricName.CHECK_DURATION.value, micros)
        if not decision.proceed:
            return
        if decision.failed_open:
            self.fail_open(
                FailOpenReason(decision.outcome.value),
                path=decision.path,
                check_us=micros,
                trigger=trigger,
                detail=decision.reason,
            )
        else:
            self._event(
                EventName.PROCEED,
                outcome=decision.outcome.value,
                path=decision.path,
                check_us=micros,
                trigger=trigger,
            )

    def fail_open(self, reason: FailOpenReason, **fields: FieldValue) -> None:
        """The unit goes on without a judgement, for ``reason``."""
        self._event(EventName.FAIL_OPEN, reason=reason.value, **fields)
        self._metric(f"{MetricName.FAIL_OPEN.value}.{reason.value}", 1)

    def wrapper_error(self, action: str, error: Exception) -> None:
        """The wrapper's own ``action`` failed with ``error`` and it failed open."""
        self.fail_open(
            FailOpenReason.WRAPPER_ERROR, action=action, error=f"{type(error).__name__}: {error}"
        )

    def excluded(self, exclusion: Exclusion) -> None:
        """The launcher is excluded (once per launcher).

        Process 0's stat before joining is the check itself: its exclusion has no ``when``.
        """
        when: When | None = exclusion.when
        if exclusion.reason is ExclusionReason.DECISION_FILE and when is When.BEFORE_JOINING:
            when = None
        self._event(
            EventName.EXCLUDED,
            NodeState.FAILED,
            by=exclusion.reason.value,
            path=exclusion.path,
            size=exclusion.size,
            when=None if when is None else when.token,
            marker=exclusion.marker,
        )
        self._metric(MetricName.EXCLUDED.value, 1)

    def marker_published(self, group: str) -> None:
        """Process 0 published its replacement group's marker."""
        self._event(EventName.MARKER_PUBLISHED, group=group)

    def verdict_published(self, verdict: str, covers: int, standing: bool, trigger: str) -> None:
        """Process 0 published a verdict for its siblings."""
        self._event(
            EventName.VERDICT_PUBLISHED,
            verdict=verdict,
            covers=covers,
            standing=standing,
            trigger=trigger,
        )

    def verdict_waited(self, verdict: str | None, request: int, seconds: float) -> None:
        """A sibling's wait for request ``request``: answered (``verdict``) or not."""
        self._metric(MetricName.VERDICT_WAIT.value, round(seconds * 1000))
        waited = f"{seconds:.3f}"
        if verdict is None:
            self.fail_open(FailOpenReason.NO_VERDICT, request=request, waited_s=waited)
        else:
            self._event(EventName.VERDICT_WAITED, verdict=verdict, request=request, waited_s=waited)

    def world_restart(self, aligned: bool, seconds: float) -> None:
        """The round's signal restarts the workers: ``aligned`` after ``seconds`` in the
        barrier."""
        self._event(EventName.WORLD_RESTART, aligned=aligned, waited_s=f"{seconds:.3f}")

    # -- recording -----------------------------------------------------------------

    def _event(
        self, name: EventName, state: NodeState = NodeState.RUNNING, /, **fields: FieldValue
    ) -> None:
        try:
            if isinstance(torch_events.get_logging_handler(EVENT_DESTINATION), logging.NullHandler):
                return
            run_id, hostname, pid, local_id = self._node_fields()
            unit = self.unit
            identity: dict[str, FieldValue] = (
                {} if unit is None else {"job_id": unit.job_id, "task_id": unit.task_id}
            )
            torch_events.record_rdzv_event(
                RdzvEvent(
                    name=name.value,
                    run_id=run_id,
                    message=format_fields(identity | fields),
                    hostname=hostname,
                    pid=pid,
                    node_state=state,
                    rank=self.rank,
                    local_id=local_id,
                )
            )
        except Exception as error:  # recording never raises into torchrun, but signals pass
            if stops_the_launcher(error):
                raise
            self._recording_failed(f"event {name.value}", error)

    def _metric(self, name: str, value: int) -> None:
        try:
            torch_metrics.put_metric(name, value, METRIC_GROUP)
        except Exception as error:  # recording never raises into torchrun, but signals pass
            if stops_the_launcher(error):
                raise
            self._recording_failed(f"metric {METRIC_GROUP}.{name}", error)

    def _node_fields(self) -> tuple[str, str, int, int | None]:
        """``(run_id, hostname, pid, local_id)``, read once, as torch's dynamic handler
        records them (its private ``_this_node``); else this host and process."""
        if self._node is None:
            node = getattr(self._inner, "_this_node", None)
            if node is not None:
                hostname, pid, local_id = str(node.addr), int(node.pid), node.local_id
            else:
                hostname, pid, local_id = socket.getfqdn(), os.getpid(), None
            self._node = (self._inner.get_run_id(), hostname, pid, local_id)
        return self._node

    def _recording_failed(self, what: str, error: Exception) -> None:
        level = logging.DEBUG if self._failing else logging.WARNING
        self._failing = True
        log.log(
            level,
            "Segment health check could not record %s (%s: %s); the decision stands "
            "(further recording errors are logged at DEBUG)",
            what,
            type(error).__name__,
            error,
        )
