"""Process 0 with the watch on: its look right after joining, its looks outside the lock,
a hung stat's diagnostic, and the warning for a world that cannot shrink.

Real dynamic handlers on a real TCPStore, each launcher on its own thread, as in
``test_watch.py``. Two faults cannot be made real in a unit test and are injected: a
stat that does not answer (the stat helper stopped with SIGSTOP, as
``tests/decision/test_boundedstat.py`` does; ``integration/hungmount/`` mounts a real
hung filesystem) and, where the look must block while the helper still serves process
0's own stat, a look whose evaluation waits on an event.
"""

from __future__ import annotations

import logging
import os
import signal
import threading

import pytest

from harness.rendezvous import (
    ARRAY,
    RUN,
    WATCH,
    Join,
    Monitor,
    coordinator_of,
    dynamic_handler,
    excluded,
    join_all,
    our_records,
    tcp_client,
    watched,
)
from harness.services.stathelpers import only_helper
from harness.slurmenv import slurm_env
from harness.telemetry import captured
from harness.waits import wait_until
from nvrx_seghealth import SegmentHealthRendezvousHandler, publish_decision
from nvrx_seghealth._demo.rendezvous_state import read_store
from nvrx_seghealth._errors import ExclusionReason, UnhealthyNodeException
from nvrx_seghealth._launcher import watch
from nvrx_seghealth._launcher.events import parse_fields
from nvrx_seghealth._launcher.process_zero import ProcessZero

pytestmark = pytest.mark.usefixtures("release_handlers")


@pytest.fixture
def own_bootstrap_stores(monkeypatch):
    """Workers host their own bootstrap store, as the backend sets it for a store outside
    the launchers: a spare that joins a later round as rank 1 otherwise waits for an
    address that rank 0, which kept its rank, never publishes again (pytorch#135712)."""
    monkeypatch.setenv("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")


def spares(master):
    """How many nodes wait in the rendezvous' redundancy list (beyond the maximum)."""
    return len(read_store(tcp_client(master), RUN).spares or ())


@pytest.mark.usefixtures("own_bootstrap_stores")
def test_a_spare_marked_while_it_waits_never_trains(tcp_store, shc):
    """Tasks 0 and 1 train, spare task 2 waits beyond the maximum and is marked there;
    then task 1 is marked. The training world restarts once; the spare, admitted to the
    next round on the stat it made before it waited, judges again right after joining:
    it never gets a rendezvous result (its agent never starts workers), and it tells
    that round, whose other member restarts at once, released by the count."""
    handlers = [watched(tcp_store, shc, task, nodes=(2, 2)) for task in (0, 1, 2)]
    with captured() as seen:
        trained = join_all(handlers[:2])
        assert [j.error for j in trained] == [None, None]
        spare = Join(handlers[2])
        wait_until(lambda: spares(tcp_store) == 1)
        publish_decision(shc, str(ARRAY), "2", "drained while waiting")
        publish_decision(shc, str(ARRAY), "1", "drained during training")
        monitors = [Monitor(h) for h in handlers[:2]]
        for monitor in monitors:
            monitor.thread.join(60)
            assert monitor.restarted
        zero, one = join_all(handlers[:2])
        assert isinstance(one.error, UnhealthyNodeException)
        spare.wait()
        assert spare.result is None  # never a rendezvous result: no workers
        assert isinstance(spare.error, UnhealthyNodeException)
        assert spare.error.reason is ExclusionReason.DECISION_FILE
        assert spare.error.after_joining
        assert zero.error is None and zero.result.world_size == 2  # the round with the spare
        monitor = Monitor(handlers[0])
        monitor.thread.join(60)
        assert monitor.restarted
        assert zero.result.store.add(watch.ARRIVED_KEY, 0) == 2  # the spare counted itself
    by_task = {f["task_id"]: f["when"] for f in seen.fields("excluded")}
    assert by_task == {"1": "during-training", "2": "after-joining"}
    # the world that trained restarted once (both members); the spare's round was told
    # at joining, so task 0 restarted it without waiting for the spare
    restarts = [(e["task_id"], e["aligned"]) for e in seen.fields("world_restart")]
    assert sorted(restarts) == [("0", "true"), ("0", "true"), ("1", "true")]


def test_an_exclusion_between_the_rendezvous_and_the_watch_tells_the_world(tcp_store, shc):
    """Process 0 of task 0 is out of the inner rendezvous but its watch has not started
    when a sibling's request gets a fresh stat that excludes the unit: the round it just
    joined is told (its other member restarts), and it does not return to its agent."""
    zero = watched(tcp_store, shc, 0, nodes=(2, 2))
    one = watched(tcp_store, shc, 1, nodes=(2, 2))
    process_zero = coordinator_of(zero)
    assert process_zero is not None  # task 0's process 0, with a directory
    out_of_rendezvous = process_zero.out_of_rendezvous

    def in_the_window():  # the window held open until the responder excluded the unit
        out_of_rendezvous()
        publish_decision(shc, str(ARRAY), "0", "drained")
        asking = Join(watched(tcp_store, shc, 0, nodes=(2, 2), procid=1))
        wait_until(lambda: process_zero.exclusion is not None)
        asking.wait()
        assert isinstance(asking.error, UnhealthyNodeException)  # refused by the verdict

    process_zero.out_of_rendezvous = in_the_window  # type: ignore[method-assign]  # injected
    joined_zero, joined_one = join_all([zero, one])
    assert isinstance(joined_zero.error, UnhealthyNodeException)
    assert joined_one.error is None
    monitor = Monitor(one)
    monitor.thread.join(60)
    assert monitor.restarted
    assert joined_one.result.store.add(watch.ARRIVED_KEY, 0) == 2


def test_a_look_waiting_for_its_stat_holds_neither_a_restart_nor_the_exit(tcp_store, shc):
    """The watch's look is in its stat (injected: its evaluation waits) when the agent
    restarts the launcher, and when it shuts down: neither waits for the look. What the
    look finds once it returns belongs to a round that is over and is dropped."""
    alone = watched(tcp_store, shc, 0, nodes=(1, 1))
    alone.next_rendezvous()
    process_zero = coordinator_of(alone)
    assert isinstance(process_zero, ProcessZero)  # with a directory
    check = process_zero.check
    real, entered, release = check.evaluate, threading.Event(), threading.Event()
    looking = []

    def evaluate(*, warn=True):
        if not warn and not entered.is_set():  # the watch's next look waits
            looking.append(threading.current_thread())
            entered.set()
            release.wait(120)
        return real(warn=warn)

    check.evaluate = evaluate  # type: ignore[method-assign]  # injected
    try:
        wait_until(entered.is_set)
        restart = Join(alone).wait(30)  # the agent restarts it: not held by the look
        assert restart.error is None
        stopping = threading.Thread(target=alone.shutdown, daemon=True)
        stopping.start()
        stopping.join(30)
        assert not stopping.is_alive()
        assert not release.is_set()  # all of it while the look waited
        publish_decision(shc, str(ARRAY), "0", "drained")  # the look will find it
    finally:
        release.set()
    looking[0].join(30)
    assert not looking[0].is_alive()
    assert not excluded(alone)


@pytest.mark.usefixtures("own_bootstrap_stores")
def test_without_the_watch_a_spare_marked_while_it_waits_never_trains(tcp_store, shc):
    """The watch off, a world of one or two: tasks 0 and 1 train, spare task 2 waits
    beyond the maximum and is marked there, then task 1 is marked and its worker fails.
    The spare, admitted to the next round on the stat it made before it waited, judges
    again right after joining, as with the watch: it never gets a rendezvous result, and
    it tells that round. Task 0 restarts at once, a membership change, and the next
    round forms without the spare. Before, task 0 was told nothing: its agent started
    workers for a rank that never came."""
    handlers = [watched(tcp_store, shc, task, watch_interval=0, nodes=(1, 2)) for task in (0, 1, 2)]
    with captured() as seen:
        assert [j.error for j in join_all(handlers[:2])] == [None, None]
        spare = Join(handlers[2])
        wait_until(lambda: spares(tcp_store) == 1)
        publish_decision(shc, str(ARRAY), "2", "drained while waiting")
        publish_decision(shc, str(ARRAY), "1", "drained during training")
        zero, one = join_all(handlers[:2])  # task 1's worker failed: both agents restart
        assert zero.error is None and isinstance(one.error, UnhealthyNodeException)
        spare.wait()
        assert spare.result is None  # never a rendezvous result: no workers
        assert isinstance(spare.error, UnhealthyNodeException)
        assert spare.error.reason is ExclusionReason.DECISION_FILE
        assert spare.error.after_joining
        assert zero.result.world_size == 2  # the round with the spare
        monitor = Monitor(handlers[0])
        monitor.thread.join(60)
        assert monitor.restarted
        assert zero.result.store.add(watch.ARRIVED_KEY, 0) == 2  # the spare counted itself
        again = Join(handlers[0]).wait()
        assert again.error is None and again.result.world_size == 1
    by_task = {f["task_id"]: f["when"] for f in seen.fields("excluded") if "when" in f}
    assert by_task == {"2": "after-joining"}
    assert {f["task_id"] for f in seen.fields("excluded")} == {"1", "2"}
    assert [(e["task_id"], e["aligned"]) for e in seen.fields("world_restart")] == [("0", "true")]


def test_a_stat_that_does_not_answer_is_reported_with_the_decision_file(tcp_store, shc, caplog):
    """The watch's fail-open names the file whose stat hangs, not only its directory."""
    caplog.set_level(logging.INFO, logger="nvrx_seghealth")
    store = tcp_client(tcp_store)
    alone = SegmentHealthRendezvousHandler(
        dynamic_handler(store, 1, 1),
        store=store,
        directory=shc,
        environ=slurm_env(task=0),
        stat_timeout=0.5,
        watch_interval=WATCH,
    )
    with captured() as seen:
        alone.next_rendezvous()
        helper = only_helper()
        os.kill(helper, signal.SIGSTOP)
        try:
            wait_until(lambda: seen.fields("fail_open"))
        finally:
            os.kill(helper, signal.SIGCONT)
    (failed,) = seen.fields("fail_open")
    assert failed["reason"] == "unreadable" and failed["trigger"] == "watch"
    assert f"segment_health_check.{ARRAY}.0" in failed["detail"]
    assert not excluded(alone)


@pytest.mark.parametrize(
    "nodes,watch_interval,warned", [((2, 2), WATCH, 1), ((1, 2), WATCH, 0), ((2, 2), 0, 0)]
)
def test_a_watch_in_a_world_that_cannot_shrink_is_warned_once(
    tcp_store, shc, caplog, nodes, watch_interval, warned
):
    """min_nodes == max_nodes: an exclusion during training leaves the others waiting for
    a spare until the join timeout; said once, by process 0, when the handler is made."""
    caplog.set_level(logging.INFO, logger="nvrx_seghealth")
    watched(tcp_store, shc, 0, nodes=nodes, watch_interval=watch_interval)
    watched(tcp_store, shc, 0, nodes=nodes, watch_interval=watch_interval, procid=1)
    fixed = [
        parse_fields(m)
        for m in our_records(caplog, logging.WARNING)
        if parse_fields(m).get("min_nodes")
    ]
    assert len(fixed) == warned
    if warned:
        assert (fixed[0]["min_nodes"], fixed[0]["max_nodes"], fixed[0]["join_timeout_s"]) == (
            "2",
            "2",
            "30",
        )
