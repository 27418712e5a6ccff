"""The verdict hand-off between process 0 and its siblings, on real stores."""

from __future__ import annotations

import threading
import time

import pytest
import torch.distributed as dist

from nvrx_seghealth.allocation import InvalidIdentityError
from nvrx_seghealth.handoff import (
    HANDOFF_MARGIN,
    Verdict,
    VerdictHandoff,
    default_handoff_timeout,
    validate_handoff_timeout,
)
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


def test_a_published_verdict_is_taken_at_once(markers):
    assert handoff(markers).publish(Verdict.HEALTHY) == 1
    started = time.monotonic()
    assert handoff(markers).take(10) == (1, Verdict.HEALTHY)
    assert time.monotonic() - started < 1


def test_a_sibling_ahead_waits_for_the_next_verdict(markers):
    publisher, sibling = handoff(markers), handoff(markers)
    publisher.publish(Verdict.HEALTHY)
    assert sibling.take(0) == (1, Verdict.HEALTHY)
    timer = threading.Timer(0.5, publisher.publish, args=(Verdict.EXCLUDED,))
    timer.start()
    started = time.monotonic()
    assert sibling.take(20) == (2, Verdict.EXCLUDED)  # not verdict 1 a second time
    assert 0.4 < time.monotonic() - started < 5
    timer.join()


def test_a_sibling_behind_takes_the_newest_verdict(markers):
    publisher, sibling = handoff(markers), handoff(markers)
    for verdict in (Verdict.HEALTHY, Verdict.UNCHECKED, Verdict.EXCLUDED):
        publisher.publish(verdict)
    assert sibling.take(0) == (3, Verdict.EXCLUDED)
    assert sibling.take(0) is None


def test_no_verdict_returns_none_after_the_bound(markers):
    started = time.monotonic()
    assert handoff(markers).take(0.5) is None
    assert 0.5 <= time.monotonic() - started < 3


def test_groups_and_lives_of_a_task_do_not_mix(markers):
    handoff(markers, "3", "0").publish(Verdict.HEALTHY)
    assert handoff(markers, "4", "0").take(0.2) is None
    assert handoff(markers, "3", "1").take(0.2) is None  # requeued: a new life
    assert handoff(markers, "3", "0").take(0.2) == (1, Verdict.HEALTHY)


def test_a_number_taken_but_not_yet_written_is_waited_for(markers):
    """Process 0 takes its number, then writes: a sibling in between keeps polling."""
    sibling = handoff(markers)
    markers.store.add(sibling.prefix + "count", 1)
    assert sibling.take(0.2) is None
    markers.store.set(sibling.prefix + "1", Verdict.HEALTHY.value)
    assert sibling.take(0.2) == (1, Verdict.HEALTHY)


def test_ids_are_validated():
    markers = ReplacementGroupMarkers(dist.HashStore(), "run", "50")
    for group, restart_count in (("3/..", "0"), ("3", "x"), ("", "0")):
        with pytest.raises(InvalidIdentityError):
            VerdictHandoff(markers, group, restart_count)


def test_the_bound_defaults_to_the_stat_bound_plus_a_margin():
    assert default_handoff_timeout(10) == 10 + HANDOFF_MARGIN == 30
    assert default_handoff_timeout(None) == 30
    assert validate_handoff_timeout(0) == 0.0
    for bad in (-0.1, float("nan"), float("inf"), "5"):
        with pytest.raises(ValueError, match=">= 0"):
            validate_handoff_timeout(bad)


def test_many_siblings_wait_on_one_tcp_store(tcp_store):
    results = []

    def sibling():
        markers = ReplacementGroupMarkers(tcp_client(tcp_store), "run", "50")
        results.append(VerdictHandoff(markers, "3", "0").take(30))

    siblings = [threading.Thread(target=sibling) for _ in range(16)]
    for thread in siblings:
        thread.start()
    time.sleep(0.5)
    handoff(ReplacementGroupMarkers(tcp_store, "run", "50")).publish(Verdict.HEALTHY)
    for thread in siblings:
        thread.join(timeout=60)
    assert results == [(1, Verdict.HEALTHY)] * 16
