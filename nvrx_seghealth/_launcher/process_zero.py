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

from torch.distributed.elastic.rendezvous import RendezvousHandler
from torch.distributed.elastic.rendezvous.dynamic_rendezvous import DynamicRendezvousHandler

from .._decision.decision_file import Decision
from .._decision.unit import AllocationUnit
from .._errors import Exclusion, ExclusionReason, When
from .._logfmt import format_fields
from .._settings.check_settings import CheckSettings
from .check import SegmentHealthCheck
from .coordinator import Coordinator
from .events import ATTEMPT, JOINED, REQUEST, WATCH, DecisionRecorder
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
    the responder thread. The watch's looks stat without it and take it only to act on
    what they found: a look waiting for a hung mount holds neither the agent's next
    ``next_rendezvous()`` nor the launcher's exit.

    The stat before joining has a bound of its own. It does not wait for a look in
    flight: it goes at once to a helper process of its own
    (:mod:`.._decision.helperprocess`). The kernel may hold it behind the look's lookup
    of the same name; its bound then counts from the look's answer. So a slow
    filesystem is judged, and a hung one costs this stat's own bound, not the rest of
    the look's. Nor does it take the look's result: that stat began before the agent
    restarted this launcher, maybe before the decision behind the restart was written.
    Only a stat that begins after the restart is sure to see that decision.
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
        self._in_rendezvous = False  # the standing answer holds
        self._attempt_verdict = Verdict.UNCHECKED
        self._covered = 0  # the highest request number answered
        self._responder: PeriodicThread | None = None
        self._watch: PeriodicThread | None = None
        self._watched: WorldSignal | None = None  # the round the watch looks for
        self._looks_failing = (
            False  # the looks on joining and after fail open: warned once a streak
        )

    def _decide(self) -> None:
        """Stop the watch; stat; exclude, or stand on this attempt's verdict."""
        with self._lock:
            self._stop_watch()
            self._in_rendezvous = True
            verdict = self._judge(ATTEMPT)
            # a failure it warned of is the streak the look on joining continues
            self._looks_failing = verdict is Verdict.UNCHECKED
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
            self._in_rendezvous = False
            if self.exclusion is None:
                self._publish(Answer(self._attempt_verdict, self._covered), trigger=None)

    def joined(self, rank: int, world: WorldSignal | None, *, look: bool = True) -> None:
        """Look once now (``look``), before the workers start; with the watch on, then
        start the watch, a look every ``watch_interval`` seconds.

        The stat this launcher joined on may be old: a spare waits in the rendezvous,
        beyond the maximum, for hours, and is admitted on the stat it made before it
        began to wait. So it judges again now (one stat, with the watch or without),
        as a sibling looks at its marker here.

        Raises:
            UnhealthyNodeException: the unit is excluded by this look, or was since
                the inner rendezvous returned (a fresh stat for a sibling's request):
                the handler then leaves the round and tells ``world``, with the watch
                on or off, which restarts the other members before their workers have
                trained.
        """
        super().joined(rank, world, look=look)
        if self._stopped:
            return
        if look:
            self._look(None)
        with self._lock:
            if (
                world is not None
                and self._settings.watch_enabled
                and self.exclusion is None
                and not self._stopped
            ):
                self._watched = world
                self._watch = PeriodicThread(
                    self._watch_look, self._settings.watch_interval, name="nvrx-seghealth-watch"
                )
        if self.exclusion is not None:
            raise self.exclusion

    def warn_if_the_world_cannot_shrink(self, inner: RendezvousHandler) -> None:
        """With the watch on and a rendezvous whose smallest world is its largest (torch's
        dynamic handler, ``min_nodes == max_nodes``), warn once: an exclusion during
        training re-forms the job only with a spare launcher waiting in the rendezvous;
        without one, the others wait for a replacement until the join timeout."""
        if not self._settings.watch_enabled or not isinstance(inner, DynamicRendezvousHandler):
            return
        settings = inner.settings
        if settings.min_nodes != settings.max_nodes:
            return
        log.warning(
            "Segment health check's watch is on and the world cannot shrink (its minimum "
            "number of nodes is its maximum): a unit excluded while it trains re-forms the "
            "job only with a spare launcher waiting in the rendezvous; without one, the "
            "others wait for a replacement until the join timeout, then the job fails. Give "
            "--nnodes a smaller minimum, or start spare tasks; %s",
            format_fields(
                {
                    "min_nodes": settings.min_nodes,
                    "max_nodes": settings.max_nodes,
                    "join_timeout_s": f"{settings.timeout.join.total_seconds():g}",
                }
            ),
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
        """While the workers run (watch thread): look once (:meth:`_look`)."""
        world = self._watched
        if world is not None:
            self._look(world)
        return True

    def _look(self, world: WorldSignal | None) -> None:
        """Stat once, without the lock; exclude the unit now if the decision says so.

        ``world``: the round the watch looks for; ``None``: the look on joining,
        before the watch starts (with the watch off, the only one). What the stat found
        is acted on under the lock, and only while that is still so: a look that
        returns after the agent restarted the launcher, or after it stopped, is dropped
        (the next stat decides).

        A look that finds nothing is not a decision: nothing is recorded or logged. A
        run of looks that fail open is warned once, and its end once.
        """
        if self.exclusion is not None:
            return
        looker, trigger = (
            ("Segment health check's watch", WATCH)
            if world is not None
            else ("Segment health check's look on joining", JOINED)
        )
        started = time.monotonic()
        decision = self.fail_open(
            "evaluate",
            f"evaluate the decision file ({trigger})",
            lambda: self.check.evaluate(warn=False),
            streak="the decision file readable on joining",
        )
        if decision is None:
            return
        seconds = time.monotonic() - started
        with self._lock:
            if self._watched is not world or self.exclusion is not None or self._stopped:
                return
            if decision.failed_open:
                if not self._looks_failing:
                    self._looks_failing = True
                    self._events.judged(decision, seconds, trigger)
                    log.warning(
                        "%s cannot judge %s (%s); training goes on (fail open); warned "
                        "once until a look succeeds",
                        looker,
                        decision.path,
                        decision.reason,
                    )
                return
            if self._looks_failing:
                self._looks_failing = False
                log.info("%s judges %s again", looker, decision.path)
            if decision.proceed:
                return
            self._events.judged(decision, seconds, trigger)
            self._unhealthy(decision, trigger, When.AFTER_JOINING)

    def _answer_requests(self) -> bool:
        """Between attempts (responder thread): answer new requests.

        Returns ``False`` when the look for requests failed (the responder backs off).
        """
        with self._lock:
            handoff = self.handoff
            if self.exclusion is not None or self._in_rendezvous or handoff is None:
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
            self._unhealthy(decision, trigger, When.BEFORE_JOINING)
            return Verdict.EXCLUDED
        return Verdict.UNCHECKED if decision.failed_open else Verdict.HEALTHY

    def _unhealthy(self, decision: Decision, trigger: str, when: When) -> None:
        """The decision excludes the unit ``when`` (lock held): exclude it, then publish
        its marker and the final answer.

        While the watch runs, the unit is a member of a world that trains, whichever stat
        found the decision: the exclusion is then :attr:`~.._errors.When.DURING_TRAINING`,
        and the world's signal gets it too (:meth:`.WorldSignal.exclude`).
        """
        world = self._watched
        # Logged before the marker goes out: once siblings see it, srun may end this
        # launcher at any moment.
        exclusion = self.exclude(
            Exclusion(
                ExclusionReason.DECISION_FILE,
                When.DURING_TRAINING if world is not None else when,
                f"decision file {decision.path} is non-empty ({decision.size} bytes)",
                path=decision.path,
                size=decision.size,
            )
        )
        self._publish_marker(decision)
        self._publish(Answer(Verdict.EXCLUDED, EVERY_REQUEST, standing=True), trigger=trigger)
        if world is not None:
            world.exclude(exclusion)

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

    def _publish_marker(self, decision: Decision) -> None:
        """Mark the unit's replacement group unhealthy (an array task with a store)."""
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
