"""The request/verdict hand-off between process 0 and its siblings, on real stores.

``integration/etcd/test_handoff_on_etcd.py`` runs the same tests on torch's EtcdStore
against a real etcd (through its own ``markers`` fixture).
"""

from __future__ import annotations

import threading
import time

import pytest
import torch.distributed as dist

from harness.rendezvous import tcp_client
from nvrx_seghealth._decision.unit import AllocationUnit, InvalidIdentityError
from nvrx_seghealth._launcher.handoff import EVERY_REQUEST, Answer, Verdict, VerdictHandoff
from nvrx_seghealth._launcher.markers import ReplacementGroupMarkers


@pytest.fixture(params=["hash", "file", "tcp", "prefix"])
def markers(request, tcp_store, tmp_path):
    store = {
        "hash": lambda: dist.HashStore(),
        "file": lambda: dist.FileStore(str(tmp_path / "store"), 1),
        "tcp": lambda: tcp_store,
        "prefix": lambda: dist.PrefixStore("torch.rendezvous.run", tcp_store),
    }[request.param]()
    return ReplacementGroupMarkers(store, "run", "50")


def handoff(markers, group="3", restart_count="0"):
    return VerdictHandoff(markers, group, restart_count)


def test_requests_are_numbered_and_process_zero_reads_the_highest(markers):
    process_zero, sibling, other = handoff(markers), handoff(markers), handoff(markers)
    assert process_zero.read() == (0, Answer(None))
    assert [sibling.request()[0], other.request()[0], sibling.request()[0]] == [1, 2, 3]
    assert process_zero.read()[0] == 3


def test_a_verdict_covering_the_request_is_taken_at_once(markers):
    process_zero, sibling = handoff(markers), handoff(markers)
    request, answer = sibling.request()
    assert not answer.covers(request)
    assert process_zero.publish(Answer(Verdict.HEALTHY, process_zero.read()[0])) == 1
    started = time.monotonic()
    assert sibling.wait(request, 10) is Verdict.HEALTHY
    assert time.monotonic() - started < 1


def test_a_verdict_older_than_the_request_is_never_taken(markers):
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
    assert sibling.wait(second, 20) is Verdict.UNCHECKED
    assert 0.4 < time.monotonic() - started < 5
    timer.join()


def test_an_answer_read_before_a_request_does_not_cover_it(markers):
    """The number is read before the stat: a request made after it stays uncovered."""
    process_zero, sibling = handoff(markers), handoff(markers)
    covered, _ = process_zero.read()  # process 0 reads, then stats ...
    request, _ = sibling.request()  # ... while the sibling asks
    assert process_zero.publish(Answer(Verdict.HEALTHY, covered)) == 1
    assert sibling.wait(request, 0.2) is None
    process_zero.publish(Answer(Verdict.UNCHECKED, process_zero.read()[0]))
    assert sibling.wait(request, 0.2) is Verdict.UNCHECKED


def test_a_standing_answer_covers_every_request_made_while_it_stands(markers):
    """Process 0 is inside the rendezvous: a request is answered by its own store call."""
    process_zero, sibling = handoff(markers), handoff(markers)
    process_zero.publish(Answer(Verdict.UNCHECKED, 0, standing=True))
    for _ in range(3):
        request, answer = sibling.request()
        assert answer.covers(request) and answer.verdict is Verdict.UNCHECKED
    assert process_zero.publish(Answer(Verdict.UNCHECKED, 0)) == 3  # settled
    request, answer = sibling.request()
    assert not answer.covers(request)


def test_an_exclusion_stands_for_every_request_past_and_future(markers):
    process_zero, sibling = handoff(markers), handoff(markers)
    early, _ = sibling.request()
    process_zero.publish(Answer(Verdict.EXCLUDED, EVERY_REQUEST, standing=True))
    assert sibling.wait(early, 0) is Verdict.EXCLUDED
    request, answer = sibling.request()
    assert answer.covers(request) and answer.verdict is Verdict.EXCLUDED


def test_a_new_process_zero_instance_answers_correctly(markers):
    """A launcher that builds its handler anew starts from the value in the store."""
    sibling = handoff(markers)
    handoff(markers).publish(Answer(Verdict.UNCHECKED, sibling.request()[0]))
    request, _ = sibling.request()
    handoff(markers).publish(Answer(Verdict.HEALTHY, request))  # another instance
    assert handoff(markers).read() == (2, Answer(Verdict.HEALTHY, 2))
    assert sibling.wait(request, 0) is Verdict.HEALTHY
    assert sibling.wait(request + 1, 0) is None


def test_one_answer_covers_every_earlier_request(markers):
    process_zero = handoff(markers)
    siblings = [handoff(markers) for _ in range(3)]
    requests = [s.request()[0] for s in siblings]
    process_zero.publish(Answer(Verdict.UNCHECKED, process_zero.read()[0]))
    assert [s.wait(r, 0) for s, r in zip(siblings, requests)] == [Verdict.UNCHECKED] * 3


def test_no_verdict_returns_none_after_the_bound(markers):
    sibling = handoff(markers)
    request, _ = sibling.request()
    started = time.monotonic()
    assert sibling.wait(request, 0.5) is None
    assert 0.5 <= time.monotonic() - started < 3


def test_groups_and_lives_of_a_task_do_not_mix(markers):
    handoff(markers, "3", "0").publish(Answer(Verdict.HEALTHY, 5))
    assert handoff(markers, "4", "0").wait(1, 0.2) is None
    assert handoff(markers, "3", "1").wait(1, 0.2) is None  # requeued: a new life
    assert handoff(markers, "3", "1").read() == (0, Answer(None))
    assert handoff(markers, "3", "0").wait(1, 0.2) is Verdict.HEALTHY


def test_ids_are_validated_where_they_enter_the_unit():
    """The hand-off takes the unit's ids as they are; a hostile one never reaches it."""
    for task_id, restart_count in (("3/..", "0"), ("3", "x"), ("", "0")):
        with pytest.raises(InvalidIdentityError):
            AllocationUnit("50", task_id, is_array=True, restart_count=restart_count)


def test_many_siblings_wait_on_one_tcp_store(tcp_store):
    results = []

    def sibling():
        markers = ReplacementGroupMarkers(tcp_client(tcp_store), "run", "50")
        view = VerdictHandoff(markers, "3", "0")
        results.append(view.wait(view.request()[0], 30))

    siblings = [threading.Thread(target=sibling) for _ in range(16)]
    for thread in siblings:
        thread.start()
    process_zero = handoff(ReplacementGroupMarkers(tcp_store, "run", "50"))
    deadline = time.monotonic() + 30
    while process_zero.read()[0] < 16 and time.monotonic() < deadline:
        time.sleep(0.05)
    process_zero.publish(Answer(Verdict.HEALTHY, process_zero.read()[0]))
    for thread in siblings:
        thread.join(timeout=60)
    assert results == [Verdict.HEALTHY] * 16
