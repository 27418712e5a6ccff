"""The request/verdict hand-off's protocol tests, for any store that has ``add``:
:class:`HandoffTests`, a base class in the way of urllib3's ``dummyserver/testcase.py``.

A test module subclasses it once per kind of store and defines a ``markers`` fixture: the
:class:`~nvrx_seghealth._launcher.markers.ReplacementGroupMarkers` of a fresh run in that
store. ``tests/launcher/test_handoff.py`` runs them on torch's own stores,
``integration/etcd/test_handoff_on_etcd.py`` on torch's EtcdStore against a real etcd.
"""

from __future__ import annotations

import threading
import time

from nvrx_seghealth._launcher.handoff import EVERY_REQUEST, Answer, Verdict, VerdictHandoff
from nvrx_seghealth._launcher.markers import ReplacementGroupMarkers

from .waits import AT_ONCE_BOUND

__all__ = ["HandoffTests", "handoff"]


def handoff(
    markers: ReplacementGroupMarkers, group: str = "3", restart_count: str = "0"
) -> VerdictHandoff:
    """The hand-off of ``group`` in life ``restart_count``, as one launcher sees it."""
    return VerdictHandoff(markers, group, restart_count)


class HandoffTests:
    """The protocol between process 0 and its siblings; a subclass provides ``markers``."""

    def test_requests_are_numbered_and_process_zero_reads_the_highest(self, markers):
        process_zero, sibling, other = handoff(markers), handoff(markers), handoff(markers)
        assert process_zero.read() == (0, Answer(None))
        assert [sibling.request()[0], other.request()[0], sibling.request()[0]] == [1, 2, 3]
        assert process_zero.read()[0] == 3

    def test_a_verdict_covering_the_request_is_taken_at_once(self, markers):
        process_zero, sibling = handoff(markers), handoff(markers)
        request, answer = sibling.request()
        assert not answer.covers(request)
        assert process_zero.publish(Answer(Verdict.HEALTHY, process_zero.read()[0])) == 1
        started = time.monotonic()
        assert sibling.wait(request, AT_ONCE_BOUND) is Verdict.HEALTHY
        assert time.monotonic() - started < AT_ONCE_BOUND / 2

    def test_a_verdict_older_than_the_request_is_never_taken(self, markers):
        """Process 0 answered request 1; a sibling's request 2 waits for a new answer."""
        process_zero, sibling = handoff(markers), handoff(markers)
        first, _ = sibling.request()
        process_zero.publish(Answer(Verdict.HEALTHY, process_zero.read()[0]))
        assert sibling.wait(first, 0) is Verdict.HEALTHY
        second, answer = sibling.request()
        assert answer == Answer(Verdict.HEALTHY, 1) and not answer.covers(second)
        assert sibling.wait(second, 0.3) is None

        def answer_again():
            process_zero.publish(Answer(Verdict.UNCHECKED, process_zero.read()[0]))

        timer = threading.Timer(0.5, answer_again)
        timer.start()
        started = time.monotonic()
        assert sibling.wait(second, AT_ONCE_BOUND) is Verdict.UNCHECKED
        assert 0.4 < time.monotonic() - started < AT_ONCE_BOUND / 2
        timer.join()

    def test_an_answer_read_before_a_request_does_not_cover_it(self, markers):
        """The number is read before the stat: a request made after it stays uncovered."""
        process_zero, sibling = handoff(markers), handoff(markers)
        covered, _ = process_zero.read()  # process 0 reads, then stats ...
        request, _ = sibling.request()  # ... while the sibling asks
        assert process_zero.publish(Answer(Verdict.HEALTHY, covered)) == 1
        assert sibling.wait(request, 0.2) is None
        process_zero.publish(Answer(Verdict.UNCHECKED, process_zero.read()[0]))
        assert sibling.wait(request, 0.2) is Verdict.UNCHECKED

    def test_a_standing_answer_covers_every_request_made_while_it_stands(self, markers):
        """Process 0 is inside the rendezvous: a request is answered by its own store call."""
        process_zero, sibling = handoff(markers), handoff(markers)
        process_zero.publish(Answer(Verdict.UNCHECKED, 0, standing=True))
        for _ in range(3):
            request, answer = sibling.request()
            assert answer.covers(request) and answer.verdict is Verdict.UNCHECKED
        assert process_zero.publish(Answer(Verdict.UNCHECKED, 0)) == 3  # settled
        request, answer = sibling.request()
        assert not answer.covers(request)

    def test_an_exclusion_stands_for_every_request_past_and_future(self, markers):
        process_zero, sibling = handoff(markers), handoff(markers)
        early, _ = sibling.request()
        process_zero.publish(Answer(Verdict.EXCLUDED, EVERY_REQUEST, standing=True))
        assert sibling.wait(early, 0) is Verdict.EXCLUDED
        request, answer = sibling.request()
        assert answer.covers(request) and answer.verdict is Verdict.EXCLUDED

    def test_a_new_process_zero_instance_answers_correctly(self, markers):
        """A launcher that builds its handler anew starts from the value in the store."""
        sibling = handoff(markers)
        handoff(markers).publish(Answer(Verdict.UNCHECKED, sibling.request()[0]))
        request, _ = sibling.request()
        handoff(markers).publish(Answer(Verdict.HEALTHY, request))  # another instance
        assert handoff(markers).read() == (2, Answer(Verdict.HEALTHY, 2))
        assert sibling.wait(request, 0) is Verdict.HEALTHY
        assert sibling.wait(request + 1, 0) is None

    def test_one_answer_covers_every_earlier_request(self, markers):
        process_zero = handoff(markers)
        siblings = [handoff(markers) for _ in range(3)]
        requests = [s.request()[0] for s in siblings]
        process_zero.publish(Answer(Verdict.UNCHECKED, process_zero.read()[0]))
        assert [s.wait(r, 0) for s, r in zip(siblings, requests)] == [Verdict.UNCHECKED] * 3

    def test_process_zero_sets_the_key_of_each_request_it_answers(self, markers):
        """A sibling blocks on its request's key; an answer sets the keys it covers, a
        standing one those of every request made so far, once each."""
        process_zero, sibling = handoff(markers), handoff(markers)
        requests = [sibling.request()[0] for _ in range(3)]

        def answered() -> list[bool]:
            return [markers.store.check([sibling.answered_key(n)]) for n in requests]

        process_zero.publish(Answer(Verdict.HEALTHY, 2))
        assert answered() == [True, True, False]
        process_zero.publish(Answer(Verdict.UNCHECKED, 2, standing=True))
        assert answered() == [True, True, True]
        assert sibling.wait(requests[2], AT_ONCE_BOUND) is Verdict.UNCHECKED

    def test_no_verdict_returns_none_after_the_bound(self, markers):
        sibling = handoff(markers)
        request, _ = sibling.request()
        started = time.monotonic()
        assert sibling.wait(request, 0.5) is None
        assert 0.5 <= time.monotonic() - started < AT_ONCE_BOUND / 2  # not a wait beyond it

    def test_groups_and_lives_of_a_task_do_not_mix(self, markers):
        handoff(markers, "3", "0").publish(Answer(Verdict.HEALTHY, 5))
        assert handoff(markers, "4", "0").wait(1, 0.2) is None
        assert handoff(markers, "3", "1").wait(1, 0.2) is None  # requeued: a new life
        assert handoff(markers, "3", "1").read() == (0, Answer(None))
        assert handoff(markers, "3", "0").wait(1, 0.2) is Verdict.HEALTHY
