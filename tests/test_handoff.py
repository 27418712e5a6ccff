"""The request/verdict hand-off between process 0 and its siblings, on real stores.

``integration/etcd/test_handoff_on_etcd.py`` runs the same tests on torch's EtcdStore
against a real etcd (through its own ``markers`` fixture).
"""

from __future__ import annotations

import threading
import time

import pytest
import torch.distributed as dist

from nvrx_seghealth.allocation import InvalidIdentityError
from nvrx_seghealth.handoff import EVERY_REQUEST, Verdict, VerdictHandoff
from nvrx_seghealth.markers import ReplacementGroupMarkers

from .support import tcp_client


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
    assert process_zero.requested() == 0
    assert [sibling.request(), other.request(), sibling.request()] == [1, 2, 3]
    assert process_zero.requested() == 3


def test_a_verdict_covering_the_request_is_taken_at_once(markers):
    process_zero, sibling = handoff(markers), handoff(markers)
    request = sibling.request()
    process_zero.answer(process_zero.requested(), Verdict.HEALTHY)
    started = time.monotonic()
    assert sibling.wait(request, 10) is Verdict.HEALTHY
    assert time.monotonic() - started < 1


def test_a_verdict_older_than_the_request_is_never_taken(markers):
    """Process 0 answered request 1; a sibling's request 2 waits for a new answer."""
    process_zero, sibling = handoff(markers), handoff(markers)
    first = sibling.request()
    process_zero.answer(process_zero.requested(), Verdict.HEALTHY)
    assert sibling.wait(first, 0) is Verdict.HEALTHY
    second = sibling.request()
    assert sibling.wait(second, 0.3) is None  # the healthy answer covers request 1 only

    def answer():
        process_zero.answer(process_zero.requested(), Verdict.EXCLUDED)

    timer = threading.Timer(0.5, answer)
    timer.start()
    started = time.monotonic()
    assert sibling.wait(second, 20) is Verdict.EXCLUDED
    assert 0.4 < time.monotonic() - started < 5
    timer.join()


def test_an_answer_read_before_a_request_does_not_cover_it(markers):
    """The number is read before the stat: a request made after it stays uncovered."""
    process_zero, sibling = handoff(markers), handoff(markers)
    covered = process_zero.requested()  # process 0 reads, then stats ...
    request = sibling.request()  # ... while the sibling asks
    process_zero.answer(covered, Verdict.HEALTHY)
    assert sibling.wait(request, 0.2) is None
    process_zero.answer(process_zero.requested(), Verdict.UNCHECKED)
    assert sibling.wait(request, 0.2) is Verdict.UNCHECKED


def test_one_answer_covers_every_earlier_request(markers):
    process_zero = handoff(markers)
    siblings = [handoff(markers) for _ in range(3)]
    requests = [s.request() for s in siblings]
    process_zero.answer(process_zero.requested(), Verdict.UNCHECKED)
    assert [s.wait(r, 0) for s, r in zip(siblings, requests)] == [Verdict.UNCHECKED] * 3


def test_an_exclusion_answers_every_request_past_and_future(markers):
    process_zero, sibling = handoff(markers), handoff(markers)
    early = sibling.request()
    process_zero.answer(EVERY_REQUEST, Verdict.EXCLUDED)
    assert sibling.wait(early, 0) is Verdict.EXCLUDED
    assert sibling.wait(sibling.request(), 0) is Verdict.EXCLUDED


def test_a_new_process_zero_instance_answers_correctly(markers):
    """A launcher that builds its handler anew starts from the value in the store."""
    sibling = handoff(markers)
    handoff(markers).answer(sibling.request(), Verdict.UNCHECKED)
    request = sibling.request()
    handoff(markers).answer(request, Verdict.HEALTHY)  # another instance, same task
    assert sibling.wait(request, 0) is Verdict.HEALTHY
    assert sibling.wait(request + 1, 0) is None


def test_no_verdict_returns_none_after_the_bound(markers):
    sibling = handoff(markers)
    request = sibling.request()
    started = time.monotonic()
    assert sibling.wait(request, 0.5) is None
    assert 0.5 <= time.monotonic() - started < 3


def test_groups_and_lives_of_a_task_do_not_mix(markers):
    handoff(markers, "3", "0").answer(5, Verdict.HEALTHY)
    assert handoff(markers, "4", "0").wait(1, 0.2) is None
    assert handoff(markers, "3", "1").wait(1, 0.2) is None  # requeued: a new life
    assert handoff(markers, "3", "1").requested() == 0
    assert handoff(markers, "3", "0").wait(1, 0.2) is Verdict.HEALTHY


def test_ids_are_validated():
    markers = ReplacementGroupMarkers(dist.HashStore(), "run", "50")
    for group, restart_count in (("3/..", "0"), ("3", "x"), ("", "0")):
        with pytest.raises(InvalidIdentityError):
            VerdictHandoff(markers, group, restart_count)


def test_many_siblings_wait_on_one_tcp_store(tcp_store):
    results = []

    def sibling():
        markers = ReplacementGroupMarkers(tcp_client(tcp_store), "run", "50")
        view = VerdictHandoff(markers, "3", "0")
        results.append(view.wait(view.request(), 30))

    siblings = [threading.Thread(target=sibling) for _ in range(16)]
    for thread in siblings:
        thread.start()
    process_zero = handoff(ReplacementGroupMarkers(tcp_store, "run", "50"))
    deadline = time.monotonic() + 30
    while process_zero.requested() < 16 and time.monotonic() < deadline:
        time.sleep(0.05)
    process_zero.answer(process_zero.requested(), Verdict.HEALTHY)
    for thread in siblings:
        thread.join(timeout=60)
    assert results == [Verdict.HEALTHY] * 16
