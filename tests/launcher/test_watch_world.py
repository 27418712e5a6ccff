"""The watch in a world whose members differ: what each launcher tells the round as it
joins, and what the launcher that excludes its unit during training does with it.

Real dynamic handlers on a real TCPStore, each launcher on its own thread, as in
``test_watch.py``; :class:`harness.rendezvous.Monitor` plays each agent's monitor loop.
"""

from __future__ import annotations

import logging
import time

import pytest

from harness.rendezvous import (
    ARRAY,
    WATCH,
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
from harness.telemetry import captured
from harness.waits import wait_until
from nvrx_seghealth import publish_decision
from nvrx_seghealth._demo.logtokens import exclusion
from nvrx_seghealth._errors import ExclusionReason, UnhealthyNodeException
from nvrx_seghealth._launcher import watch
from nvrx_seghealth._launcher.events import parse_fields

pytestmark = pytest.mark.usefixtures("release_handlers")

#: The tokens of the line each member logs when the watch restarts its workers.
EXCLUSION_TOKENS = {"when", "by", "job_id", "task_id", "path"}


def mixed_world_warnings(caplog):
    """The fields of each WARNING that the watch did not restart a mixed world."""
    return [
        fields
        for fields in map(parse_fields, our_records(caplog, logging.WARNING))
        if "without_watch" in fields
    ]


def restart_lines(caplog):
    """Each member's line that the watch restarts its workers."""
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.INFO
        and r.name.endswith(".watch")
        and "restarting this launcher's workers" in r.getMessage()
    ]


def test_a_member_without_the_watch_keeps_the_world_training(tcp_store, shc, caplog):
    """The review's mixed world: task 0 runs without the watch, task 1 with it. Task 1
    is marked while the world trains: its process 0 excludes it, but no launcher
    restarts its workers (task 0's agent would see them fail); one WARNING names task 0
    and its setting. The unit leaves at the next restart, as without the watch, and a
    spare takes its place."""
    caplog.set_level(logging.INFO, logger="nvrx_seghealth")
    zero = watched(tcp_store, shc, 0, watch_interval=0, nodes=(2, 2))
    one = watched(tcp_store, shc, 1, nodes=(2, 2))
    first = join_all([zero, one])
    assert [j.error for j in first] == [None, None]
    rank_of_zero = first[0].result.rank
    monitors = [Monitor(zero), Monitor(one)]
    with captured() as seen:
        publish_decision(shc, str(ARRAY), "1", "drained during training")
        wait_until(lambda: monitors[1].restarted or mixed_world_warnings(caplog), timeout=60)
        # Before: task 1 waited 10 s for task 0 in the barrier, then restarted alone.
        assert not monitors[1].restarted
        time.sleep(3 * watch.LOOK_INTERVAL)  # looks that find no signal
    for monitor in monitors:
        monitor.stop()
        assert monitor.asked and not monitor.restarted
    assert excluded(one)
    (warning,) = mixed_world_warnings(caplog)
    assert warning["without_watch"] == "1" and warning["world_size"] == "2"
    assert warning["member_rank"] == str(rank_of_zero)
    assert (warning["member_task_id"], warning["member_watch_interval"]) == ("0", "0")
    (fell_back,) = [f for f in seen.fields("fail_open") if f["reason"] == "mixed-watch"]
    assert fell_back["task_id"] == "1" and fell_back["member_task_id"] == "0"
    assert seen.values("fail_open.mixed-watch") == [1]
    assert seen.fields("world_restart") == []
    # The next restart (e.g. a worker failure): task 1 is refused, the spare joins.
    spare = watched(tcp_store, shc, 2, nodes=(2, 2))
    again = join_all([zero, one, spare])
    assert isinstance(again[1].error, UnhealthyNodeException)
    assert again[1].error.reason is ExclusionReason.DECISION_FILE
    assert [again[0].result.world_size, again[2].result.world_size] == [2, 2]


def test_a_member_that_tells_nothing_has_no_watch(tcp_store, shc, caplog, monkeypatch):
    """A member that never tells its watch interval (plain c10d, the check off, another
    release of the package) counts as one without the watch once the excluding launcher
    waited :data:`~nvrx_seghealth._launcher.watch.MEMBERS_TIMEOUT` for it."""
    monkeypatch.setattr(watch, "MEMBERS_TIMEOUT", 1.0)
    caplog.set_level(logging.INFO, logger="nvrx_seghealth")
    # Built first, this launcher holds rank 0 (torch ranks nodes in the order this process
    # made them) and serves the workers' store; under a plain rank 0 it would wait out
    # the store's 30 s timeout for a port nobody publishes, then fail open.
    one = watched(tcp_store, shc, 1, nodes=(2, 2))
    plain = dynamic_handler(tcp_client(tcp_store), 2, 2)
    first = join_all([plain, one])
    assert [j.error for j in first] == [None, None]
    assert first[1].result.rank == 0
    monitors = [Monitor(plain), Monitor(one)]
    publish_decision(shc, str(ARRAY), "1", "drained during training")
    wait_until(lambda: monitors[1].restarted or mixed_world_warnings(caplog), timeout=60)
    time.sleep(2 * watch.LOOK_INTERVAL)
    for monitor in monitors:
        monitor.stop()
        assert not monitor.restarted
    (warning,) = mixed_world_warnings(caplog)
    assert warning["member_rank"] == str(first[0].result.rank)
    assert warning["member_watch_interval"] == "unknown"


def test_different_intervals_on_different_launchers_restart_the_world_together(
    tcp_store, shc, caplog
):
    """Every member has the watch, each with its own interval: the world restarts
    together as with one interval. The interval sets only how soon each process 0 sees
    its own decision; the signal and the barrier do not depend on it."""
    caplog.set_level(logging.INFO, logger="nvrx_seghealth")
    handlers = [
        watched(tcp_store, shc, task, watch_interval=interval, nodes=(3, 3))
        for task, interval in ((0, 3600), (1, WATCH), (2, 2))
    ]
    assert [j.error for j in join_all(handlers)] == [None, None, None]
    monitors = [Monitor(h) for h in handlers]
    publish_decision(shc, str(ARRAY), "1", "drained during training")
    for monitor in monitors:
        monitor.thread.join(60)
        assert monitor.restarted
    assert mixed_world_warnings(caplog) == []
    lines = [parse_fields(line) for line in restart_lines(caplog)]
    assert len(lines) == 3
    assert {(f["when"], f["task_id"]) for f in lines} == {("during-training", "1")}
    assert all(set(f) == EXCLUSION_TOKENS for f in lines)


def test_the_restart_line_says_when_the_unit_was_excluded_with_the_same_tokens(
    tcp_store, shc, caplog
):
    """Task 2's process 0 waits in the rendezvous while its decision is written; it is
    excluded right after joining. The members that restart say so (``when=after-joining``)
    with the tokens a restart for an exclusion during training carries, none of which
    reads as their own exclusion."""
    caplog.set_level(logging.INFO, logger="nvrx_seghealth")
    late = watched(tcp_store, shc, 2, nodes=(3, 3))
    waiting = Join(late)
    wait_until(lambda: participants(tcp_store) == 1)
    publish_decision(shc, str(ARRAY), "2", "drained while waiting")
    others = [watched(tcp_store, shc, task, nodes=(3, 3)) for task in (0, 1)]
    assert [j.error for j in join_all(others)] == [None, None]
    waiting.wait()
    assert isinstance(waiting.error, UnhealthyNodeException) and waiting.error.after_joining
    monitors = [Monitor(h) for h in others]
    for monitor in monitors:
        monitor.thread.join(60)
        assert monitor.restarted
    lines = [parse_fields(line) for line in restart_lines(caplog)]
    assert len(lines) == 2
    assert {(f["when"], f["by"], f["task_id"]) for f in lines} == {
        ("after-joining", "decision-file", "2")
    }
    assert all(set(f) == EXCLUSION_TOKENS for f in lines)
    # a member's log does not read as its own exclusion (the demo's report reads it)
    assert exclusion("\n".join(restart_lines(caplog))) is None


def test_a_mixed_world_is_warned_as_it_forms_before_any_exclusion(
    tcp_store, shc, caplog, monkeypatch
):
    """Task 0 without the watch, task 1 with it, no unit marked: the launcher holding
    rank 0 reads every member's interval once, soon after the round formed, and warns
    with the token ``not_watching``; nobody restarts. Before, the world learnt of it only
    at the first exclusion."""
    monkeypatch.setattr(watch, "MEMBERS_TIMEOUT", 0.5)
    caplog.set_level(logging.INFO, logger="nvrx_seghealth")
    zero = watched(tcp_store, shc, 0, watch_interval=0, nodes=(2, 2))
    one = watched(tcp_store, shc, 1, nodes=(2, 2))
    first = join_all([zero, one])
    assert [j.error for j in first] == [None, None]
    monitors = [Monitor(zero), Monitor(one)]

    def early() -> list[dict[str, str]]:
        fields = map(parse_fields, our_records(caplog, logging.WARNING))
        return [f for f in fields if "not_watching" in f]

    wait_until(lambda: early(), timeout=60)
    for monitor in monitors:
        monitor.stop()
        assert not monitor.restarted
    (warning,) = early()
    assert (warning["not_watching"], warning["world_size"]) == ("1", "2")
    assert (warning["member_task_id"], warning["member_watch_interval"]) == ("0", "0")
    assert not mixed_world_warnings(caplog)  # no exclusion: no fall-back
