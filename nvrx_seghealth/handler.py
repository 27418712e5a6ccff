"""``SegmentHealthRendezvousHandler``: keeps an excluded allocation unit out of the rendezvous.

The wrapper sits around any torch ``RendezvousHandler`` (c10d, etcd-v2, a launcher's
own) and adds, in ``next_rendezvous()``:

1. Process 0 of the unit (``SLURM_PROCID=0``) stats the decision artifact. A non-empty
   regular file excludes the unit: for an array task the replacement-group marker is
   published in the rendezvous store, then :class:`UnhealthyNodeException` is raised.
   A regular job has no replacement group; process 0 only raises, and
   ``srun --kill-on-bad-exit=1`` ends the step.
2. The hand-off (:mod:`.handoff`, array tasks): every other launcher of the task asks
   process 0 for a verdict and waits, at most ``handoff_timeout`` seconds, for one that
   covers its request before it may join. Process 0 answers at each of its own
   attempts and, between them, from a thread that looks for requests every
   :data:`RESPONDER_INTERVAL` seconds, so a sibling that restarts alone is answered
   while process 0's workers run. An exclusion is answered for every request, so
   the task's siblings refuse at once, without joining. Without a verdict in time a
   sibling joins anyway (one WARNING): a missing process 0 never holds the job.
3. A launcher of an array task that has no verdict (no hand-off, or none in time)
   looks at its group's marker and raises without joining when it is there. This is
   how the unit leaves a rendezvous whose host knows nothing of groups.
4. Otherwise the inner handler's ``next_rendezvous()`` runs.
5. Right after it returns, a launcher without a verdict looks at its marker again: it
   may have waited inside the rendezvous while process 0 published. Marked: raise, so
   at most one more round is needed.

Do no harm: only an exclusion leaves the wrapper as an exception. Any failure of its
own work (the check, a marker, the hand-off) is one WARNING and the launcher goes on
as plain torchrun would (fail open); the inner handler's own errors pass through
unchanged.

Each decision is recorded once as a TorchElastic rendezvous event and metrics
(:mod:`.events`): installed, proceed, fail open, excluded, marker and verdict
published, verdict waited for. The responder's looks record nothing unless they
answer a request.

Once excluded, the handler stays excluded: later ``next_rendezvous()`` calls raise
again. On the way out it stops the inner handler's keep-alive and, for torch's
dynamic handler, leaves the round it was a participant of (what torch itself does at
the start of every ``next_rendezvous()``), so the others need not wait for its
heartbeat to expire. ``shutdown()`` / ``set_closed()`` do **not** close the shared
rendezvous: torch's ``launch_agent`` calls ``shutdown()`` after any failure, and a
dynamic handler's ``shutdown()`` closes the rendezvous for every node; delegating it
would end the whole job because one unit left.
"""

from __future__ import annotations

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
from torch.distributed.elastic.rendezvous import (
    RendezvousClosedError,
    RendezvousHandler,
    RendezvousInfo,
)

from .allocation import AllocationUnit, InvalidIdentityError
from .artifact import Decision, require_absolute_directory
from .check import SegmentHealthCheck, install_check, unit_from_env
from .durations import (
    DEFAULT_STAT_TIMEOUT,
    HANDOFF_TIMEOUT,
    STAT_TIMEOUT,
    default_handoff_timeout,
    validate_seconds,
)
from .errors import ExclusionReason, UnhealthyNodeException
from .events import ATTEMPT, REQUEST, DecisionRecorder, ExcludedBy
from .handoff import EVERY_REQUEST, Answer, Verdict, VerdictHandoff
from .logfmt import format_fields
from .markers import ReplacementGroupMarkers

__all__ = ["RESPONDER_INTERVAL", "SegmentHealthRendezvousHandler"]

log = logging.getLogger(__name__)

#: Seconds between two looks of process 0 for a sibling's verdict request. It bounds
#: what the hand-off adds to a sibling's restart; each look is one store ``add``.
RESPONDER_INTERVAL = 0.2

_T = TypeVar("_T")


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
        stat_timeout: seconds one ``stat`` of the artifact may take (see
            :mod:`.durations` for the range).
        backend: the name ``get_backend()`` reports (default: the inner handler's).
            A registered backend must report the name it was registered under.
        handoff_timeout: seconds a sibling waits for process 0's verdict before it
            joins without one; ``None``: ``stat_timeout`` plus
            :data:`~.durations.HANDOFF_MARGIN` (30 s with the defaults); ``0``: no
            hand-off.

    Raises:
        ValueError: ``directory`` is not absolute, or a timeout is out of range
            (:class:`~.errors.ConfigurationError`).
    """

    def __init__(
        self,
        inner: RendezvousHandler,
        *,
        store: Store | None,
        directory: str | None,
        environ: Mapping[str, str] | None = None,
        stat_timeout: float = DEFAULT_STAT_TIMEOUT,
        backend: str | None = None,
        handoff_timeout: float | None = None,
    ) -> None:
        self._inner = inner
        self._backend = backend or inner.get_backend()
        stat_timeout = validate_seconds(STAT_TIMEOUT, stat_timeout)
        self._handoff_timeout = (
            default_handoff_timeout(stat_timeout)
            if handoff_timeout is None
            else validate_seconds(HANDOFF_TIMEOUT, handoff_timeout)
        )
        self._unit: AllocationUnit | None = None
        self._check: SegmentHealthCheck | None = None
        self._markers: ReplacementGroupMarkers | None = None
        self._handoff: VerdictHandoff | None = None
        self._exclusion: UnhealthyNodeException | None = None
        self._left = False
        self._joined = False  # a round of the inner rendezvous was joined
        # Process 0: the lock orders stat, marker and verdict between the agent's
        # thread and the responder; the rest is what the responder answers with.
        self._lock = threading.Lock()
        self._joining = False
        self._attempt_verdict = Verdict.UNCHECKED
        self._covered = 0  # the highest request number answered
        self._responder: _Responder | None = None
        self._responder_failing = False
        self._events = DecisionRecorder(inner)
        if not directory:
            return
        require_absolute_directory(directory)
        self._unit = self._events.unit = unit_from_env(environ)
        self._check = install_check(directory, self._unit, stat_timeout=stat_timeout)
        if self._check is not None:
            self._events.installed(directory)
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
        try:
            return self._next_rendezvous()
        except UnhealthyNodeException:
            self._leave_inner()
            raise

    def _next_rendezvous(self) -> RendezvousInfo:
        if self._exclusion is not None:
            raise self._exclusion
        # Process 0 joins on its own stat; a sibling on process 0's verdict, when it
        # has one. Without either, the marker is looked at before and after joining.
        judged = False
        self._events.rank = None
        if self._check is not None:
            self._judge_attempt(self._check)
            judged = True
        elif self._handoff is not None:
            judged = self._await_verdict(self._handoff)
        if not judged:
            self._refuse_if_marked("before joining")
        try:
            info = self._inner.next_rendezvous()
        except RendezvousClosedError:
            if not self._joined:  # torch says only "closed"; say why that happens
                log.error(
                    "Rendezvous run_id=%s is already closed before this launcher joined "
                    "it: the job it belongs to has ended, or an earlier run with the same "
                    "--rdzv-id has in the same store; give every run a new --rdzv-id",
                    self._inner.get_run_id(),
                )
            raise
        finally:
            if self._check is not None:
                self._settle()
        self._joined = True
        self._events.rank = info.rank
        if not judged:
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
            self._leave_inner()
            log.info(
                "Segment health check: excluded unit leaves the shared rendezvous open "
                "for the other units"
            )
            return False
        self._stop_responder()
        return self._inner.shutdown()

    # -- process 0 ---------------------------------------------------------------

    def _judge_attempt(self, check: SegmentHealthCheck) -> None:
        """Process 0, before joining: stat; exclude, or stand on this attempt's verdict."""
        with self._lock:
            self._joining = True
            verdict = self._judge(check, ATTEMPT)
            if self._exclusion is None:
                self._attempt_verdict = verdict
                self._publish(Answer(verdict, self._covered, standing=True), trigger=ATTEMPT)
        if self._exclusion is not None:
            raise self._exclusion
        if self._handoff is not None and self._responder is None:
            self._responder = _Responder(self._answer_requests)

    def _settle(self) -> None:
        """Process 0, out of the rendezvous: the answer covers the requests made so far.

        Requests made while the answer stood were answered by it at once; requests
        from now on get a fresh stat from the responder.
        """
        with self._lock:
            self._joining = False
            if self._exclusion is None and self._handoff is not None:
                self._publish(Answer(self._attempt_verdict, self._covered), trigger=None)

    def _answer_requests(self) -> None:
        """Process 0, between attempts (responder thread): answer new requests."""
        with self._lock:
            handoff, check = self._handoff, self._check
            if self._exclusion is not None or self._joining or handoff is None or check is None:
                return
            try:
                requested, _ = handoff.read()
            except Exception as error:  # noqa: BLE001  (fail open; one WARNING per streak)
                if not self._responder_failing:
                    self._responder_failing = True
                    self._warn("read-requests", "look for the siblings' verdict requests", error)
                return
            if self._responder_failing:
                self._responder_failing = False
                log.info("Segment health check: verdict requests readable again")
            if requested > self._covered:  # read before the stat: it covers them all
                verdict = self._judge(check, REQUEST)
                if self._exclusion is None:
                    self._publish(Answer(verdict, requested), covered=requested, trigger=REQUEST)

    def _judge(self, check: SegmentHealthCheck, trigger: str) -> Verdict:
        """Stat once; on exclusion publish the marker and the final answer (lock held).

        ``trigger`` (:data:`~.events.ATTEMPT` or :data:`~.events.REQUEST`) is recorded
        with the decision.
        """
        started = time.monotonic()
        decision = self._fail_open("evaluate", "evaluate the decision file", check.evaluate)
        if decision is None:
            return Verdict.UNCHECKED
        self._events.judged(decision, time.monotonic() - started, trigger)
        if not decision.proceed:
            self._exclude_by_decision(decision)
            self._publish(Answer(Verdict.EXCLUDED, EVERY_REQUEST, standing=True), trigger=trigger)
            return Verdict.EXCLUDED
        return Verdict.UNCHECKED if decision.failed_open else Verdict.HEALTHY

    def _publish(self, answer: Answer, *, trigger: str | None, covered: int | None = None) -> None:
        """Publish process 0's answer (lock held) and remember the requests answered.

        Those are ``covered`` when given. A standing answer, and the one that settles
        it, answer every request made up to their own store call: a request made
        while the answer stood read it at once. A verdict published on a ``trigger``
        is recorded; ``None``: the settling answer, which repeats the attempt's.
        """
        if self._handoff is None:
            return
        try:
            requested = self._handoff.publish(answer)
        except Exception as error:  # noqa: BLE001  (fail open: do no harm)
            self._warn(
                "publish-verdict",
                f"publish process 0's answer ({answer.verdict and answer.verdict.value}); "
                f"the task's other launchers join after {self._handoff_timeout:g} s without it",
                error,
            )
            return
        self._covered = max(self._covered, requested if covered is None else covered)
        if trigger is not None and answer.verdict is not None:
            self._events.verdict_published(
                answer.verdict.value, self._covered, answer.standing, trigger
            )

    def _exclude_by_decision(self, decision: Decision) -> None:
        unit = self._unit
        assert unit is not None  # a check is only installed for a known unit
        # Logged before the marker goes out: once siblings see it, srun may end this
        # launcher at any moment.
        self._exclude(
            f"allocation unit job_id={unit.job_id} task_id={unit.task_id} is excluded: "
            f"decision file {decision.path} is non-empty ({decision.size} bytes)",
            ExcludedBy.DECISION_FILE,
            path=decision.path,
            size=decision.size,
        )
        if self._markers is not None:
            detail = (
                f"{decision.path} ({decision.size} bytes) host={socket.gethostname()} "
                f"pid={os.getpid()} "
                f"at={datetime.datetime.now(datetime.timezone.utc).isoformat()}"
            )
            published = self._fail_open(
                "publish-marker",
                "publish the unhealthy marker; the task's other launchers are stopped only by srun",
                self._markers.publish,
                unit.task_id,
                detail,
            )
            if published:
                self._events.marker_published(unit.task_id)

    # -- the other launchers of an array task ------------------------------------

    def _await_verdict(self, handoff: VerdictHandoff) -> bool:
        """Sibling: ask process 0 for a verdict and wait for it.

        Returns whether a verdict admitted this launcher (``False``: none came, fail
        open). Raises when the verdict is an exclusion.
        """
        unit = self._unit
        assert unit is not None  # a hand-off exists only for a known array unit
        started = time.monotonic()
        asked = self._fail_open(
            "request-verdict", "ask process 0 for a verdict; joining without one", handoff.request
        )
        if asked is None:
            return False
        request, answer = asked
        verdict = (
            answer.verdict
            if answer.covers(request)  # process 0 stands in the rendezvous: at once
            else self._fail_open(
                "await-verdict",
                "read process 0's verdict; joining without one",
                handoff.wait,
                request,
                self._handoff_timeout,
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
                self._handoff_timeout,
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
            self._refuse_if_marked("before joining")  # the marker names the decision
            raise self._exclude(
                f"allocation unit job_id={unit.job_id} task_id={unit.task_id} is excluded "
                f"(before joining): its process 0 gave the verdict {verdict.value!r}",
                ExcludedBy.VERDICT,
                when="before-joining",
            )
        return True

    def _refuse_if_marked(self, when: str) -> None:
        unit, markers = self._unit, self._markers
        if markers is None or unit is None or unit.replacement_group is None:
            return
        detail = self._fail_open(
            "read-marker", "read the marker; proceeding", markers.detail, unit.replacement_group
        )
        if detail is not None:
            raise self._exclude(
                f"allocation unit job_id={unit.job_id} task_id={unit.task_id} is excluded "
                f"({when}): its process 0 marked the replacement group unhealthy: {detail}",
                ExcludedBy.MARKER,
                when=when.replace(" ", "-"),
                marker=detail,
            )

    # -- shared ------------------------------------------------------------------

    def _fail_open(
        self, token: str, action: str, call: Callable[..., _T], *args: object
    ) -> _T | None:
        """Run ``call(*args)``; on any error :meth:`_warn` and return None.

        Every piece of the wrapper's own work goes through here (or :meth:`_warn`):
        nothing but an exclusion may leave the wrapper as an error.
        """
        try:
            return call(*args)
        except Exception as error:  # noqa: BLE001  (fail open: do no harm)
            self._warn(token, action, error)
            return None

    def _warn(self, token: str, action: str, error: Exception) -> None:
        """One WARNING naming ``action``; recorded as a fail-open of action ``token``."""
        self._events.wrapper_error(token, error)
        unit = self._unit
        where = f" of array task {unit.job_id}_{unit.task_id}" if unit and unit.is_array else ""
        log.warning(
            "Segment health check could not %s%s (%s: %s) (fail open)",
            action,
            where,
            type(error).__name__,
            error,
        )

    def _exclude(
        self,
        message: str,
        by: ExcludedBy,
        *,
        path: str | None = None,
        size: int | None = None,
        when: str | None = None,
        marker: str | None = None,
    ) -> UnhealthyNodeException:
        """Record the exclusion (logged and recorded the first time) and return the
        exception to raise."""
        unit = self._unit
        assert unit is not None
        if self._exclusion is None:
            self._exclusion = UnhealthyNodeException(
                message,
                job_id=unit.job_id,
                task_id=unit.task_id,
                reason=ExclusionReason(by.value),
                after_joining=when == "after-joining",
                path=path,
                size=size,
            )
            log.error(
                "Segment health check: excluded %s: %s",
                format_fields(self._exclusion.fields()),
                message,
            )
            self._events.excluded(by, path=path, size=size, when=when, marker=marker)
        return self._exclusion

    def _stop_responder(self) -> None:
        if self._responder is not None:
            self._responder.stop()
            self._responder = None

    def _leave_inner(self) -> None:
        """Once excluded: stop answering, stop the inner keep-alive, leave the round."""
        if self._left:
            return
        self._left = True
        self._stop_responder()
        self._fail_open(
            "leave-rendezvous", "leave the inner rendezvous", _leave_dynamic_rendezvous, self._inner
        )


def _leave_dynamic_rendezvous(inner: RendezvousHandler) -> None:
    """Stop a dynamic handler's keep-alive and leave its round, without closing it.

    torch's ``DynamicRendezvousHandler`` has no public way to do this; the calls are
    the ones its own ``next_rendezvous()`` starts with. Other handlers are left alone.
    """
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import (
        DynamicRendezvousHandler,
        _RendezvousExitOp,
    )

    if not isinstance(inner, DynamicRendezvousHandler):
        return
    inner._stop_heartbeats()
    deadline = inner._get_deadline(inner._settings.timeout.close)
    inner._op_executor.run(_RendezvousExitOp(), deadline)


class _Responder:
    """A daemon thread calling ``answer()`` every :data:`RESPONDER_INTERVAL` seconds.

    It holds its handler weakly (as torch's keep-alive timer does): a handler that is
    no longer used stops its responder with it.
    """

    def __init__(self, answer: Callable[[], None]) -> None:
        self._stopped = threading.Event()
        self._answer = weakref.WeakMethod(answer)
        threading.Thread(target=self._run, name="nvrx-seghealth-verdicts", daemon=True).start()

    def _run(self) -> None:
        while not self._stopped.wait(RESPONDER_INTERVAL):
            answer = self._answer()
            if answer is None:
                return
            answer()
            del answer

    def stop(self) -> None:
        self._stopped.set()
