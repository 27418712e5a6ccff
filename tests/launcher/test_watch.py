"""The watch: real dynamic handlers on a real TCPStore, each launcher on its own thread.

An agent's monitor loop is played by :class:`harness.rendezvous.Monitor`: it asks its
handler's ``num_nodes_waiting()`` every ``interval`` seconds, as torch's agent does while
its workers are healthy, until the answer is positive.
"""

from __future__ import annotations

import logging
import os
import time
from collections import Counter

import pytest
from torch.distributed.elastic.rendezvous import RendezvousInfo, RendezvousStoreInfo

from harness.rendezvous import (
    ARRAY,
    RUN,
    WATCH,
    CountingStore,
    Join,
    Monitor,
    dynamic_handler,
    excluded,
    join_all,
    our_records,
    participants,
    tcp_client,
    watched,
)
from harness.slurmenv import slurm_env
from harness.telemetry import captured
from harness.waits import wait_until
from nvrx_seghealth import ReplacementGroupMarkers, SegmentHealthRendezvousHandler, publish_decision
from nvrx_seghealth._errors import ConfigurationError, ExclusionReason, UnhealthyNodeException
from nvrx_seghealth._launcher import watch
from nvrx_seghealth._launcher.events import DecisionRecorder, parse_fields
from nvrx_seghealth._launcher.failopen import FailOpen

pytestmark = pytest.mark.usefixtures("release_handlers")


def test_a_decision_during_training_restarts_every_member_together(tcp_store, shc, caplog):
    """Task 1 is marked while the world of three trains: every launcher answers its
    agent ``1``, none before the one that looks late has reached the restart, and task
    1 then leaves; the other two form the next world without it."""
    caplog.set_level(logging.INFO, logger="nvrx_seghealth")
    handlers = [watched(tcp_store, shc, task, nodes=(2, 3)) for task in (0, 1, 2)]
    worlds = join_all(handlers)
    assert [j.error for j in worlds] == [None, None, None]
    late = 2.5  # task 2's agent looks this rarely (a long --monitor-interval)
    monitors = [Monitor(handlers[0]), Monitor(handlers[1]), Monitor(handlers[2], late)]
    time.sleep(3 * WATCH)
    assert not any(m.restarted for m in monitors)  # nothing marked: nobody restarts
    publish_decision(shc, str(ARRAY), "1", "drained during training")
    for monitor in monitors:
        monitor.thread.join(60)
        assert monitor.restarted
    late_asked = monitors[2].asked[-1][0]
    assert all(m.asked[-1][1] >= late_asked for m in monitors)  # nobody went first
    assert excluded(handlers[1])
    again = join_all(handlers)
    assert isinstance(again[1].error, UnhealthyNodeException)
    assert again[1].error.reason is ExclusionReason.DECISION_FILE
    assert again[1].error.after_joining
    assert {again[0].result.world_size, again[2].result.world_size} == {2}
    assert ReplacementGroupMarkers(tcp_store, RUN, str(ARRAY)).marked_groups() == ["1"]
    errors = [parse_fields(m) for m in our_records(caplog, logging.ERROR)]
    assert [(f["reason"], f["after_joining"], f["task_id"]) for f in errors] == [
        ("decision-file", "true", "1")
    ]


def test_a_world_formed_without_the_marked_unit_does_not_restart(tcp_store, shc):
    """A unit marked before it joins is refused before joining: the world that forms
    without it has nothing to restart for."""
    publish_decision(shc, str(ARRAY), "2", "drained before")
    handlers = [watched(tcp_store, shc, task) for task in (0, 1, 2)]
    outcomes = join_all(handlers)
    assert isinstance(outcomes[2].error, UnhealthyNodeException)
    monitors = [Monitor(h) for h in handlers[:2]]
    time.sleep(max(3 * WATCH, 2 * watch.LOOK_INTERVAL))
    for monitor in monitors:
        monitor.stop()
        assert monitor.asked and not monitor.restarted


@pytest.mark.parametrize("interval", [WATCH, 0], ids=["watch-on", "watch-off"])
def test_a_sibling_that_finds_its_marker_after_joining_restarts_the_world(tcp_store, shc, interval):
    """A sibling of task 1 (no hand-off) waits in the round when task 1's process 0 is
    refused and marks the group; it finds the marker once the round completes, and the
    members that stay restart at once: it counted itself out of the barrier. The same
    with the watch off: before, the members were not told and waited for its rank."""
    store = tcp_client(tcp_store)
    sibling = SegmentHealthRendezvousHandler(
        dynamic_handler(store, 3, 3),
        store=store,
        directory=shc,
        environ=slurm_env(task=1, procid=1),
        handoff_timeout=0,
        watch_interval=interval,
    )
    waiting = Join(sibling)
    wait_until(lambda: participants(tcp_store) == 1)
    publish_decision(shc, str(ARRAY), "1", "drained")
    with pytest.raises(UnhealthyNodeException):
        watched(tcp_store, shc, 1, watch_interval=interval).next_rendezvous()
    zero, two = (watched(tcp_store, shc, task, watch_interval=interval) for task in (0, 2))
    joined = join_all([zero, two])
    waiting.wait()
    assert isinstance(waiting.error, UnhealthyNodeException)
    assert waiting.error.after_joining
    assert [j.error for j in joined] == [None, None]
    monitors = [Monitor(zero), Monitor(two)]
    for monitor in monitors:
        monitor.thread.join(60)
        assert monitor.restarted
    # the two were released by the count, not by the timeout: the sibling counted itself
    assert joined[0].result.store.add(watch.ARRIVED_KEY, 0) == 3
    assert joined[0].result.store.check([watch.RESTART_KEY])


def test_the_watch_off_is_todays_handler(tcp_store, shc):
    """No watch: a decision during training restarts nobody; it is read before the
    next join."""
    handlers = [watched(tcp_store, shc, task, watch_interval=0) for task in (0, 1)]
    join_all(handlers)
    publish_decision(shc, str(ARRAY), "1", "drained during training")
    monitors = [Monitor(h) for h in handlers]
    time.sleep(2 * watch.LOOK_INTERVAL)
    for monitor in monitors:
        monitor.stop()
        assert monitor.asked and not monitor.restarted
    assert not excluded(handlers[1])


def recorder(master):
    return DecisionRecorder(dynamic_handler(tcp_client(master), 1, 1))


def test_one_look_a_second_for_the_world_signal(tcp_store):
    """However often the agent asks, the signal costs one store call a second."""
    store = CountingStore(tcp_client(tcp_store))
    events = recorder(tcp_store)
    signal = watch.WorldSignal(store, 2, FailOpen(events), events)
    assert not signal.restart_due()
    for _ in range(20):
        assert not signal.restart_due()
    assert store.calls == Counter(check=1)


def test_without_the_watch_a_member_looks_once_a_second_and_writes_nothing(tcp_store):
    """A launcher with the check on and the watch off is a member of each round it
    joins: one ``set`` as it joins, then, however often its agent asks, one ``check``
    a second, and no write while the world trains."""
    store = CountingStore(tcp_client(tcp_store))
    events = recorder(tcp_store)
    member = watch.Member(0.0, FailOpen(events), events)
    info = RendezvousInfo(store, 0, 2, RendezvousStoreInfo("127.0.0.1", 0))
    signal = member.joined(info)
    assert signal is not None
    for _ in range(20):
        assert not signal.restart_due()
    assert store.calls == Counter(set=1, check=1)


def test_a_failing_store_restarts_nobody_and_warns_once(tcp_store, caplog):
    class Broken:
        def __getattr__(self, name):
            def fail(*args):
                raise RuntimeError("store down")

            return fail

    events = recorder(tcp_store)
    # A store whose every call fails stands in for a torch Store.
    signal = watch.WorldSignal(Broken(), 2, FailOpen(events), events)  # type: ignore[arg-type]
    for _ in range(3):
        signal._next_look = 0.0  # every call is a look
        assert not signal.restart_due()
    warnings = [r for r in our_records(caplog, logging.WARNING) if "store down" in r]
    assert len(warnings) == 1


@pytest.mark.parametrize("value", [-1, "x", float("inf"), 3601, True, 0.1, "0.49"])
def test_a_bad_watch_interval_is_refused_before_any_rendezvous(tcp_store, shc, value):
    with pytest.raises(ConfigurationError) as refused:
        watched(tcp_store, shc, 0, watch_interval=value)
    assert refused.value.setting == "watch_interval"


def test_the_watch_records_decisions_not_looks(tcp_store, shc, caplog):
    """A look that finds nothing records nothing; a run of looks that fail open (the
    decision path is a directory, a real fault) is one WARNING and one ``fail_open``
    event; the decision that excludes is recorded once, ``when=during-training``."""
    caplog.set_level(logging.INFO, logger="nvrx_seghealth")
    with captured() as seen:
        alone = watched(tcp_store, shc, 0, nodes=(1, 1))
        alone.next_rendezvous()
        path = os.path.join(shc, f"segment_health_check.{ARRAY}.0")
        os.mkdir(path)  # each look now fails open: not a regular file

        def warned():
            return [
                r
                for r in caplog.records
                if r.levelno == logging.WARNING
                and r.name.endswith("zero")
                and "min_nodes" not in parse_fields(r.getMessage())  # a world of one: said once
            ]

        wait_until(lambda: len(warned()) == 1)
        time.sleep(4 * WATCH)  # about four more looks, the same streak
        os.rmdir(path)
        wait_until(
            lambda: any(
                r.levelno == logging.INFO for r in caplog.records if r.name.endswith("zero")
            )
        )
        time.sleep(2 * WATCH)  # looks that find nothing
        publish_decision(shc, str(ARRAY), "0", "drained")
        wait_until(lambda: excluded(alone))
        monitor = Monitor(alone)
        monitor.thread.join(30)
        assert monitor.restarted  # a world of one restarts without waiting
        with pytest.raises(UnhealthyNodeException):
            alone.next_rendezvous()
    assert len(warned()) == 1
    watch_events = [
        f for f in seen.fields("proceed") + seen.fields("fail_open") if f.get("trigger") == "watch"
    ]
    assert [(f.get("reason"), f["trigger"]) for f in watch_events] == [
        ("not-a-regular-file", "watch")
    ]
    assert [f["when"] for f in seen.fields("excluded")] == ["during-training"]
    assert [f["aligned"] for f in seen.fields("world_restart")] == ["true"]


def test_a_sibling_restarting_alone_gets_a_fresh_stat_that_restarts_the_world(tcp_store, shc):
    """Task 1's sibling restarts alone (its worker failed) after task 1 was marked:
    process 0's answer to its request comes from a fresh stat, which excludes task 1
    during training; the sibling is refused and counts itself out, and every other
    member restarts, released by the count."""
    zero = watched(tcp_store, shc, 0, watch_interval=3600, nodes=(3, 3))
    one = watched(tcp_store, shc, 1, watch_interval=3600, nodes=(3, 3))
    sibling = watched(tcp_store, shc, 1, watch_interval=3600, nodes=(3, 3), procid=1)
    worlds = join_all([zero, one, sibling])
    assert [j.error for j in worlds] == [None, None, None]
    publish_decision(shc, str(ARRAY), "1", "drained during training")
    with pytest.raises(UnhealthyNodeException) as refused:
        sibling.next_rendezvous()  # its agent restarts it alone
    assert refused.value.reason is ExclusionReason.MARKER  # the verdict names the marker
    monitors = [Monitor(zero), Monitor(one)]
    for monitor in monitors:
        monitor.thread.join(60)
        assert monitor.restarted
    assert worlds[0].result.store.add(watch.ARRIVED_KEY, 0) == 3
    with pytest.raises(UnhealthyNodeException) as during:
        one.next_rendezvous()
    assert during.value.after_joining  # excluded during training, by the fresh stat
