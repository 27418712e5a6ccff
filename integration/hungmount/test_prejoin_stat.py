"""Process 0's stat before joining has a bound of its own, on a real slow and a real
hanging FUSE mount (:func:`harness.services.fuse.slow_mount`), with the watch on: the agent
restarts the launcher while a look of the watch is in its stat.

An in-process launcher alone in a world of one (:mod:`harness.rendezvous`): a real
dynamic handler on a real TCPStore, wrapped by the package's handler.
"""

from __future__ import annotations

import time

import pytest

from harness.rendezvous import ARRAY, Join, watched
from harness.services.fuse import HungMount
from harness.services.stathelpers import helper_pids
from harness.telemetry import captured
from harness.waits import wait_until
from nvrx_seghealth._errors import ExclusionReason, UnhealthyNodeException

#: Seconds each request to the slow mount takes: a missing file's stat takes one, a
#: present file's two (lookup and getattr), 8 s, within the default 10 s bound.
SLOW = 4.0
#: Seconds each request takes on the mount that starts to hang, until it does.
QUICK = 0.2
#: Seconds after which every request that arrived before the mount hung has answered.
SETTLE = 5 * QUICK


@pytest.mark.parametrize("slow_mount", [SLOW], indirect=True)
def test_a_restart_judges_a_slow_filesystem_whatever_the_watch_is_stating(
    slow_mount: HungMount, tcp_store
) -> None:
    """A decision is written while the watch's stat is in flight (it began before the
    decision), and the agent restarts the launcher at once. The stat before joining
    does not wait for the look: its own 8 s fit in its 10 s, and the unit is excluded.
    (Queued behind the look, it had about 4 s less and failed open.)"""
    alone = watched(tcp_store, str(slow_mount.path), 0, nodes=(1, 1))
    alone.next_rendezvous()
    wait_until(lambda: slow_mount.waiting() > 0)  # a look of the watch in its stat
    assert slow_mount.backing is not None
    (slow_mount.backing / f"segment_health_check.{ARRAY}.0").write_text("drained")
    restart = Join(alone).wait(60)
    assert isinstance(restart.error, UnhealthyNodeException)
    assert restart.error.reason is ExclusionReason.DECISION_FILE
    assert not restart.error.after_joining  # the stat before joining excluded it


@pytest.mark.parametrize("slow_mount", [QUICK], indirect=True)
def test_a_restart_does_not_wait_out_the_watchs_stat_on_a_mount_that_hangs(
    slow_mount: HungMount, tcp_store
) -> None:
    """The mount starts to hang while the watch's look is between two stats; its next
    stat hangs, and the agent restarts the launcher. The stat before joining is sent at
    once, from a helper of its own (two stat helpers are in the filesystem: the kernel
    holds the second lookup of the name behind the first), instead of waiting in line
    for the look's bound to run out; it fails open on its own bound."""
    alone = watched(tcp_store, str(slow_mount.path), 0, nodes=(1, 1))
    alone.next_rendezvous()
    with captured() as seen:
        slow_mount.hang()
        time.sleep(SETTLE)  # from now on, a request waiting is one that hangs
        wait_until(lambda: slow_mount.waiting() > 0)  # the look's stat hangs (10 s bound)
        restart = Join(alone)
        wait_until(lambda: len(helper_pids()) > 1)  # the restart's own stat, sent
        restart.wait(60)
        assert restart.error is None and restart.result.world_size == 1  # fail open
        alone.shutdown()
    attempts = [f for f in seen.fields("fail_open") if f.get("trigger") == "attempt"]
    assert [f["reason"] for f in attempts] == ["unreadable"]
