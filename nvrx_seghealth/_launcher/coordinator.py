"""What one launcher of a checked allocation unit does around each join.

:func:`coordinator_for` builds, once per launcher, the coordinator of its role in the
unit, from the validated :class:`~.._settings.check_settings.CheckSettings` and Slurm's environment:

* :class:`ProcessZero` (``SLURM_PROCID=0``): stats the decision file before each
  join. A non-empty regular file excludes the unit: for an array task the
  replacement-group marker is published and the hand-off answers every request with
  ``excluded``; then :class:`~.._errors.UnhealthyNodeException` is raised. Otherwise it
  answers its siblings' verdict requests (:mod:`.handoff`): at once while it stands
  in the rendezvous, and between its attempts from a thread that looks for requests
  every :data:`RESPONDER_INTERVAL` seconds, so a sibling that restarts alone is
  answered while process 0's workers run.
* :class:`Sibling` (the other launchers of an array task): asks process 0 for a
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
goes through one fail-open helper, :meth:`Coordinator.fail_open`. A failure is one
WARNING and a ``fail_open`` event, and the launcher goes on as plain torchrun would;
only an exclusion, and what stops the launcher (torch's ``SignalException``,
``KeyboardInterrupt``, ``SystemExit``: :mod:`.signals`), leave a coordinator as an
exception. Once excluded, it stays excluded; once stopped, it starts no more work of
its own. Each decision is recorded once as an event and metrics (:mod:`.events`).
"""

from __future__ import annotations

import abc
import datetime
import logging
import os
import socket
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from typing import TypeVar

from torch.distributed import Store

from .._decision.artifact import Decision
from .._decision.unit import AllocationUnit, InvalidIdentityError
from .._errors import ExclusionReason, UnhealthyNodeException
from .._logfmt import format_fields
from .._settings.check_settings import CheckSettings
from .check import SegmentHealthCheck, install_check, unit_from_env
from .events import ATTEMPT, REQUEST, DecisionRecorder
from .handoff import EVERY_REQUEST, Answer, Verdict, VerdictHandoff
from .markers import ReplacementGroupMarkers
from .signals import stops_the_launcher

__all__ = [
    "RESPONDER_BACKOFF_LIMIT",
    "RESPONDER_INTERVAL",
    "Coordinator",
    "ProcessZero",
    "Sibling",
    "coordinator_for",
]

log = logging.getLogger(__name__)

#: Seconds between two looks of process 0 for a sibling's verdict request. It bounds
#: what the hand-off adds to a sibling's restart; each look is one store ``add``.
RESPONDER_INTERVAL = 0.2
#: The longest pause between two looks while they fail (a store that died between
#: rounds): each failed look doubles the pause up to this, so a dead store is asked
#: about as often as torch's own keep-alive asks it (every 5 s by default), and each
#: failed call's warning from torch's store client is printed no more often.
RESPONDER_BACKOFF_LIMIT = 5.0

_T = TypeVar("_T")


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
    markers = _markers(store, run_id, unit) if unit.is_array else None
    handoff = (
        _handoff(markers, unit, environ)
        if markers is not None and settings.handoff_enabled
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
    markers: ReplacementGroupMarkers, unit: AllocationUnit, environ: Mapping[str, str] | None
) -> VerdictHandoff | None:
    restart_count = (os.environ if environ is None else environ).get("SLURM_RESTART_COUNT")
    try:
        return VerdictHandoff(markers, unit.task_id, restart_count or "0")
    except InvalidIdentityError as error:
        log.warning("Segment health check hand-off disabled: %s", error)
        return None


class Coordinator(abc.ABC):
    """One launcher's part in its unit's check; see the module documentation.

    The handler calls, for each ``next_rendezvous()``: :meth:`before_joining`, then the
    inner rendezvous, then :meth:`out_of_rendezvous` (whether it returned or raised),
    then :meth:`after_joining` with its result.

    Attributes:
        unit: the launcher's allocation unit.
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
        self.markers = markers
        self.handoff = handoff
        self.exclusion: UnhealthyNodeException | None = None
        self._events = events
        self._settings = settings
        self._failing: set[str] = set()  # actions whose failures are warned once a streak
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

    def after_joining(self, rank: int) -> None:
        """The launcher joined a round as ``rank``.

        Raises:
            UnhealthyNodeException: the unit is excluded.
        """
        self._events.rank = rank

    def stop(self) -> None:
        """Stop any work of the coordinator's own, for good (the launcher leaves)."""
        self._stopped = True

    @abc.abstractmethod
    def _before_joining(self) -> None: ...

    def fail_open(
        self,
        action: str,
        doing: str,
        call: Callable[..., _T],
        *args: object,
        streak: str | None = None,
    ) -> _T | None:
        """Run ``call(*args)``; on an error warn and return ``None`` (fail open).

        Every piece of the coordinator's own work goes through here: nothing but an
        exclusion may leave it as an error, except what stops the launcher, which
        passes through unchanged (:func:`~.signals.stops_the_launcher`, and every
        ``BaseException`` that is not an ``Exception``). A failure is one WARNING
        ("could not ``doing``") and a ``fail_open`` event whose ``action`` is
        ``action``. With ``streak`` (what is true again once ``call`` succeeds), only
        the first failure of a run of failures is warned, and the first success after
        it is one INFO.
        """
        try:
            result = call(*args)
        except Exception as error:  # fail open: do no harm (what stops the launcher passes)
            if stops_the_launcher(error):
                raise
            if streak is None or action not in self._failing:
                self._events.wrapper_error(action, error)
                where = (
                    f" of array task {self.unit.job_id}_{self.unit.task_id}"
                    if self.unit.is_array
                    else ""
                )
                log.warning(
                    "Segment health check could not %s%s (%s: %s) (fail open)",
                    doing,
                    where,
                    type(error).__name__,
                    error,
                )
            if streak is not None:
                self._failing.add(action)
            return None
        if streak is not None and action in self._failing:
            self._failing.discard(action)
            log.info("Segment health check: %s again", streak)
        return result

    def _exclude(
        self,
        message: str,
        reason: ExclusionReason,
        *,
        after_joining: bool = False,
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
            when = None if path is not None else _when(after_joining)
            self._events.excluded(reason, path=path, size=size, when=when, marker=marker)
        return self.exclusion

    def _refuse_if_marked(self, markers: ReplacementGroupMarkers, *, after_joining: bool) -> None:
        """Raise when the unit's group is marked unhealthy (array tasks only)."""
        detail = self.fail_open(
            "read-marker", "read the marker; proceeding", markers.detail, self.unit.task_id
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


class ProcessZero(Coordinator):
    """Process 0 of a unit: judges the decision file and answers its siblings.

    A lock orders the stat, the marker and the verdict between the agent's thread and
    the responder thread.
    """

    def __init__(
        self,
        unit: AllocationUnit,
        events: DecisionRecorder,
        settings: CheckSettings,
        check: SegmentHealthCheck,
        markers: ReplacementGroupMarkers | None,
        handoff: VerdictHandoff | None,
    ) -> None:
        super().__init__(unit, events, settings, markers, handoff)
        self.check = check
        self._lock = threading.Lock()
        self._joining = False  # inside the inner rendezvous: the standing answer holds
        self._attempt_verdict = Verdict.UNCHECKED
        self._covered = 0  # the highest request number answered
        self._responder: _Responder | None = None

    def _before_joining(self) -> None:
        """Stat; exclude, or stand on this attempt's verdict."""
        with self._lock:
            self._joining = True
            verdict = self._judge(ATTEMPT)
            if self.exclusion is None:
                self._attempt_verdict = verdict
                self._publish(Answer(verdict, self._covered, standing=True), trigger=ATTEMPT)
        if self.exclusion is not None:
            raise self.exclusion
        if self.handoff is not None and self._responder is None and not self._stopped:
            self._responder = _Responder(self._answer_requests)

    def out_of_rendezvous(self) -> None:
        """The answer covers the requests made so far.

        Requests made while the answer stood were answered by it at once; requests
        from now on get a fresh stat from the responder.
        """
        with self._lock:
            self._joining = False
            if self.exclusion is None:
                self._publish(Answer(self._attempt_verdict, self._covered), trigger=None)

    def stop(self) -> None:
        super().stop()
        if self._responder is not None:
            self._responder.stop()
            self._responder = None

    def _answer_requests(self) -> bool:
        """Between attempts (responder thread): answer new requests.

        Returns ``False`` when the look for requests failed (the responder backs off).
        """
        with self._lock:
            handoff = self.handoff
            if self.exclusion is not None or self._joining or handoff is None:
                return True
            read = self.fail_open(
                "read-requests",
                "look for the siblings' verdict requests",
                handoff.read,
                streak="verdict requests readable",
            )
            if read is None:
                return False
            requested, _ = read
            if requested > self._covered:  # read before the stat: it covers them all
                verdict = self._judge(REQUEST)
                if self.exclusion is None:
                    self._publish(Answer(verdict, requested), covered=requested, trigger=REQUEST)
            return True

    def _judge(self, trigger: str) -> Verdict:
        """Stat once; on exclusion publish the marker and the final answer (lock held).

        ``trigger`` (:data:`~.events.ATTEMPT` or :data:`~.events.REQUEST`) is recorded
        with the decision.
        """
        started = time.monotonic()
        decision = self.fail_open("evaluate", "evaluate the decision file", self.check.evaluate)
        if decision is None:
            return Verdict.UNCHECKED
        self._events.judged(decision, time.monotonic() - started, trigger)
        if not decision.proceed:
            self._exclude_by_decision(decision)
            self._publish(Answer(Verdict.EXCLUDED, EVERY_REQUEST, standing=True), trigger=trigger)
            return Verdict.EXCLUDED
        return Verdict.UNCHECKED if decision.failed_open else Verdict.HEALTHY

    def _publish(self, answer: Answer, *, trigger: str | None, covered: int | None = None) -> None:
        """Publish the answer (lock held) and remember the requests answered.

        Those are ``covered`` when given. A standing answer, and the one that settles
        it, answer every request made up to their own store call: a request made
        while the answer stood read it at once. A verdict published on a ``trigger``
        is recorded; ``None``: the settling answer, which repeats the attempt's.
        """
        if self.handoff is None:
            return
        requested = self.fail_open(
            "publish-verdict",
            f"publish process 0's answer ({answer.verdict and answer.verdict.value}); the "
            f"task's other launchers join after {self._settings.handoff_timeout:g} s without it",
            self.handoff.publish,
            answer,
        )
        if requested is None:
            return
        self._covered = max(self._covered, requested if covered is None else covered)
        if trigger is not None and answer.verdict is not None:
            self._events.verdict_published(
                answer.verdict.value, self._covered, answer.standing, trigger
            )

    def _exclude_by_decision(self, decision: Decision) -> None:
        unit = self.unit
        # Logged before the marker goes out: once siblings see it, srun may end this
        # launcher at any moment.
        self._exclude(
            f"allocation unit job_id={unit.job_id} task_id={unit.task_id} is excluded: "
            f"decision file {decision.path} is non-empty ({decision.size} bytes)",
            ExclusionReason.DECISION_FILE,
            path=decision.path,
            size=decision.size,
        )
        if self.markers is None:
            return
        detail = (
            f"{decision.path} ({decision.size} bytes) host={socket.gethostname()} "
            f"pid={os.getpid()} at={datetime.datetime.now(datetime.timezone.utc).isoformat()}"
        )
        published = self.fail_open(
            "publish-marker",
            "publish the unhealthy marker; the task's other launchers are stopped only by srun",
            self.markers.publish,
            unit.task_id,
            detail,
        )
        if published:
            self._events.marker_published(unit.task_id)


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

    def _before_joining(self) -> None:
        admitted = self.handoff is not None and self._await_verdict(self.handoff)
        if not admitted:
            self._refuse_if_marked(self.markers, after_joining=False)

    def after_joining(self, rank: int) -> None:
        """Look at the marker once more (see the module documentation)."""
        super().after_joining(rank)
        self._refuse_if_marked(self.markers, after_joining=True)

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
            self._refuse_if_marked(self.markers, after_joining=False)  # names the decision
            raise self._exclude(
                f"allocation unit job_id={unit.job_id} task_id={unit.task_id} is excluded "
                f"(before joining): its process 0 gave the verdict {verdict.value!r}",
                ExclusionReason.VERDICT,
            )
        return True


class _Responder:
    """A daemon thread calling ``answer()`` every :data:`RESPONDER_INTERVAL` seconds.

    ``answer()`` returns whether its look succeeded; after a failed one the pause
    doubles, up to :data:`RESPONDER_BACKOFF_LIMIT`, and the first success brings it
    back. It holds its coordinator weakly (as torch's keep-alive timer holds its
    handler): a coordinator that is no longer used stops its responder with it.
    """

    def __init__(self, answer: Callable[[], bool]) -> None:
        self._stopped = threading.Event()
        self._answer = weakref.WeakMethod(answer)
        threading.Thread(target=self._run, name="nvrx-seghealth-verdicts", daemon=True).start()

    def _run(self) -> None:
        pause = RESPONDER_INTERVAL
        while not self._stopped.wait(pause):
            answer = self._answer()
            if answer is None:
                return
            looked = answer()
            del answer
            pause = RESPONDER_INTERVAL if looked else min(2 * pause, RESPONDER_BACKOFF_LIMIT)

    def stop(self) -> None:
        self._stopped.set()
