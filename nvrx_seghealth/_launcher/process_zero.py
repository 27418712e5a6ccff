"""Process 0's coordinator: judges the decision file and answers its siblings.

See :mod:`.coordinator` for the roles; :mod:`.handoff` for the protocol it answers.
"""

from __future__ import annotations

import datetime
import logging
import os
import socket
import threading
import time

from .._decision.artifact import Decision
from .._decision.unit import AllocationUnit
from .._errors import ExclusionReason
from .._logfmt import format_fields
from .._settings.check_settings import CheckSettings
from .check import SegmentHealthCheck
from .coordinator import Coordinator
from .events import ATTEMPT, REQUEST, WATCH, DecisionRecorder
from .handoff import EVERY_REQUEST, Answer, Verdict, VerdictHandoff
from .markers import ReplacementGroupMarkers
from .periodic import PeriodicThread
from .watch import WorldSignal

__all__ = ["RESPONDER_BACKOFF_LIMIT", "RESPONDER_INTERVAL", "ProcessZero"]

log = logging.getLogger(__name__)

#: Seconds between two looks of process 0 for a sibling's verdict request. It bounds
#: what the hand-off adds to a sibling's restart; each look is one store ``add``.
RESPONDER_INTERVAL = 0.2
#: The longest pause between two looks while they fail (a store that died between
#: rounds): each failed look doubles the pause up to this, so a dead store is asked
#: about as often as torch's own keep-alive asks it (every 5 s by default), and each
#: failed call's warning from torch's store client is printed no more often.
RESPONDER_BACKOFF_LIMIT = 5.0


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
        self._responder: PeriodicThread | None = None
        self._watch: PeriodicThread | None = None
        self._watched: WorldSignal | None = None  # the round the watch looks for
        self._watch_failing = False  # the watch's looks fail open: warned once a streak

    def _before_joining(self) -> None:
        """Stop the watch; stat; exclude, or stand on this attempt's verdict."""
        with self._lock:
            self._stop_watch()
            self._joining = True
            verdict = self._judge(ATTEMPT)
            if self.exclusion is None:
                self._attempt_verdict = verdict
                self._publish(Answer(verdict, self._covered, standing=True), trigger=ATTEMPT)
        if self.exclusion is not None:
            raise self.exclusion
        if self.handoff is not None and self._responder is None and not self._stopped:
            self._responder = PeriodicThread(
                self._answer_requests,
                RESPONDER_INTERVAL,
                name="nvrx-seghealth-verdicts",
                backoff_limit=RESPONDER_BACKOFF_LIMIT,
            )

    def out_of_rendezvous(self) -> None:
        """The answer covers the requests made so far.

        Requests made while the answer stood were answered by it at once; requests
        from now on get a fresh stat from the responder.
        """
        with self._lock:
            self._joining = False
            if self.exclusion is None:
                self._publish(Answer(self._attempt_verdict, self._covered), trigger=None)

    def after_joining(self, rank: int, world: WorldSignal | None) -> None:
        """Start the watch, when it is on: a look every ``watch_interval`` seconds."""
        super().after_joining(rank, world)
        if world is None or not self._settings.watch_enabled or self._stopped:
            return
        with self._lock:
            self._watched = world
            self._watch = PeriodicThread(
                self._watch_look, self._settings.watch_interval, name="nvrx-seghealth-watch"
            )

    def stop(self) -> None:
        super().stop()
        if self._responder is not None:
            self._responder.stop()
            self._responder = None
        with self._lock:
            self._stop_watch()

    def _stop_watch(self) -> None:
        """No look of the watch starts from now on (lock held)."""
        if self._watch is not None:
            self._watch.stop()
            self._watch = None
        self._watched = None

    def _watch_look(self) -> bool:
        """While the workers run (watch thread): stat once; exclude the unit now.

        A look that finds nothing is not a decision: nothing is recorded or logged. A
        run of looks that fail open is warned once, and its end once.
        """
        with self._lock:
            world = self._watched
            if world is None or self.exclusion is not None:
                return True
            started = time.monotonic()
            decision = self.fail_open(
                "evaluate",
                "evaluate the decision file during training",
                lambda: self.check.evaluate(warn=False),
                streak="the watch's decision file readable",
            )
            if decision is None:
                return True
            seconds = time.monotonic() - started
            if decision.failed_open:
                if not self._watch_failing:
                    self._watch_failing = True
                    self._events.judged(decision, seconds, WATCH)
                    log.warning(
                        "Segment health check's watch cannot judge %s (%s); training goes "
                        "on (fail open); warned once until a look succeeds",
                        decision.path,
                        decision.reason,
                    )
                return True
            if self._watch_failing:
                self._watch_failing = False
                log.info("Segment health check's watch judges %s again", decision.path)
            if decision.proceed:
                return True
            self._events.judged(decision, seconds, WATCH)
            self._exclude_now(decision, WATCH)
            return True

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
            self._exclude_now(decision, trigger)
            return Verdict.EXCLUDED
        return Verdict.UNCHECKED if decision.failed_open else Verdict.HEALTHY

    def _exclude_now(self, decision: Decision, trigger: str) -> None:
        """Exclude the unit, publish its marker and the final answer (lock held).

        While the watch runs, the unit is a member of the current world: the world is
        told too, whichever look found the decision (the watch's, or a fresh stat for a
        sibling's request).
        """
        world = self._watched
        self._exclude_by_decision(decision, during_training=world is not None)
        self._publish(Answer(Verdict.EXCLUDED, EVERY_REQUEST, standing=True), trigger=trigger)
        if world is not None:
            unit = self.unit
            world.exclude(
                format_fields(
                    {"job_id": unit.job_id, "task_id": unit.task_id, "path": decision.path}
                )
            )

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

    def _exclude_by_decision(self, decision: Decision, *, during_training: bool) -> None:
        unit = self.unit
        # Logged before the marker goes out: once siblings see it, srun may end this
        # launcher at any moment.
        self._exclude(
            f"allocation unit job_id={unit.job_id} task_id={unit.task_id} is excluded"
            f"{' during training' if during_training else ''}: decision file "
            f"{decision.path} is non-empty ({decision.size} bytes)",
            ExclusionReason.DECISION_FILE,
            after_joining=during_training,
            during_training=during_training,
            path=decision.path,
            size=decision.size,
        )
        group = self.group
        if self.markers is None or group is None:
            return
        detail = (
            f"{decision.path} ({decision.size} bytes) host={socket.gethostname()} "
            f"pid={os.getpid()} at={datetime.datetime.now(datetime.timezone.utc).isoformat()}"
        )
        published = self.fail_open(
            "publish-marker",
            "publish the unhealthy marker; the task's other launchers are stopped only by srun",
            self.markers.publish,
            group,
            detail,
        )
        if published:
            self._events.marker_published(group)
