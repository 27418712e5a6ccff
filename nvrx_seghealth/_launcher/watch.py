"""The watch's job-wide signal: an exclusion during training restarts the world, aligned.

With ``watch_interval`` set, process 0 of each unit re-checks its decision file while
its workers run (:class:`~.process_zero.ProcessZero`). A unit it excludes then is a
member of the current world, so every launcher of that world must restart its workers,
and all of them together. That part is :class:`WorldSignal`, one per launcher and
joined round, kept in the round's own store (``RendezvousInfo.store``, a fresh prefix
for every round of torch's c10d and etcd-v2 handlers):

* the launcher that excludes its unit during training sets :data:`EXCLUDED_KEY`;
* every launcher's ``num_nodes_waiting()`` looks for that key at most once every
  :data:`LOOK_INTERVAL` seconds (one store ``check``: on etcd-v2 one read of that key,
  :mod:`.etcd_reads`), so the whole job learns of the exclusion within about that plus
  one ``--monitor-interval``;
* a launcher that finds it aligns the restart before answering its agent: it counts
  itself in :data:`ARRIVED_KEY` and waits, at most :data:`ALIGN_TIMEOUT` seconds, until
  every member of the round has (the last one sets :data:`RESTART_KEY`); then it
  reports a waiting node, and its agent restarts its workers as a membership change.

Why the barrier: torch's agent looks at its workers before it asks
``num_nodes_waiting()``. Once one agent stops its workers, the others' collectives fail
(at once with gloo); an agent that learned of the exclusion a moment later would see a
worker failure instead of a membership change, spend a restart on it, or, with none left,
close the rendezvous for everyone. While a launcher waits in the barrier its agent looks
at nothing, and no agent stops its workers before every member is in the barrier.

A world formed without the excluded unit does not restart: the key lives in the round
the unit was a member of. A launcher that is excluded while a member of a round and
leaves it without reaching the barrier (a sibling that finds its marker right after
joining; a launcher whose agent restarted it alone and that is refused before joining
again) sets the key and counts itself.
Every store call goes through the launcher's :class:`~.failopen.FailOpen`: a failing
store restarts nobody (one WARNING a streak), and the job goes on as without the watch.
"""

from __future__ import annotations

import logging
import time

from torch.distributed import Store

from .events import DecisionRecorder
from .failopen import FailOpen

__all__ = [
    "ALIGN_POLL",
    "ALIGN_TIMEOUT",
    "ARRIVED_KEY",
    "EXCLUDED_KEY",
    "LOOK_INTERVAL",
    "RESTART_KEY",
    "WorldSignal",
]

log = logging.getLogger(__name__)

#: Set (to the excluded unit's fields) by the launcher that excluded its unit.
EXCLUDED_KEY = "nvrx-seghealth/watch/excluded"
#: How many members of the round have reached the barrier.
ARRIVED_KEY = "nvrx-seghealth/watch/arrived"
#: Set by the last member to reach the barrier.
RESTART_KEY = "nvrx-seghealth/watch/restart"
#: Seconds between two looks of one launcher for :data:`EXCLUDED_KEY`: one store call
#: a second per launcher, whatever the agent's ``--monitor-interval``.
LOOK_INTERVAL = 1.0
#: The longest a launcher waits for the other members before it restarts anyway: a
#: member may be gone (its agent failed) or look late (a long ``--monitor-interval``);
#: every live member arrives within :data:`LOOK_INTERVAL` plus its monitor interval.
ALIGN_TIMEOUT = 10.0
#: Seconds between two looks for :data:`RESTART_KEY` in the barrier (a ``sleep``
#: between them, so a signal stops the launcher at once).
ALIGN_POLL = 0.25


class WorldSignal:
    """One launcher's view of one joined round's exclusions; see the module documentation.

    Args:
        store: the round's store (``RendezvousInfo.store``).
        world_size: the number of launchers in the round (``RendezvousInfo.world_size``).
        fail_open: runs every store call.
        events: records the restart.
    """

    def __init__(
        self, store: Store, world_size: int, fail_open: FailOpen, events: DecisionRecorder
    ) -> None:
        self._store = store
        self._world_size = world_size
        self._fail_open = fail_open
        self._events = events
        self._next_look = 0.0  # the first look is due at once
        self._restart = False

    def exclude(self, fields: str) -> None:
        """This launcher's unit, a member of the round, is excluded (``fields``: who)."""
        self._fail_open(
            "signal-world",
            "tell the current world of the exclusion; it restarts only on its own failures",
            self._store.set,
            EXCLUDED_KEY,
            fields,
        )

    def leave(self, fields: str) -> None:
        """This launcher's unit is excluded and it leaves the round now: the world is told,
        and the launcher counts itself in the barrier (unless it already passed it)."""
        if self._restart:
            return
        self._restart = True
        self.exclude(fields)
        self._fail_open(
            "align-restart",
            "count this launcher out of the restart",
            self._store.add,
            ARRIVED_KEY,
            1,
        )

    def restart_due(self) -> bool:
        """Whether this launcher's workers must restart now (asked by
        ``num_nodes_waiting()``); aligns the restart first. Once due, stays due."""
        if self._restart:
            return True
        if time.monotonic() < self._next_look:
            return False
        seen = self._fail_open(
            "watch-world",
            "look for an exclusion in the current world",
            self._store.check,
            [EXCLUDED_KEY],
            streak="the current world's exclusions readable",
        )
        self._next_look = time.monotonic() + LOOK_INTERVAL
        if not seen:
            return False
        self._restart = True
        started = time.monotonic()
        aligned = self._align()
        waited = time.monotonic() - started
        fields = self._fail_open(
            "watch-world", "read who was excluded", self._store.get, EXCLUDED_KEY
        )
        who = "" if fields is None else fields.decode(errors="replace")
        log.info(
            "Segment health check: a unit of the current world was excluded during training "
            "(%s); restarting this launcher's workers %s (waited %.1f s)",
            who,
            "with every member of the world"
            if aligned
            else "without the members that did not come",
            waited,
        )
        self._events.world_restart(aligned, waited)
        return True

    def _align(self) -> bool:
        """Wait until every member has arrived; ``False``: not in time, or no store."""
        arrived = self._fail_open(
            "align-restart", "align the restart with the world", self._store.add, ARRIVED_KEY, 1
        )
        if arrived is None:
            return False
        if arrived >= self._world_size:
            self._fail_open(
                "align-restart", "release the world's restart", self._store.set, RESTART_KEY, "1"
            )
            return True
        deadline = time.monotonic() + ALIGN_TIMEOUT
        while (remaining := deadline - time.monotonic()) > 0:
            time.sleep(min(ALIGN_POLL, remaining))
            released = self._fail_open(
                "align-restart",
                "look for the world's restart",
                self._store.check,
                [RESTART_KEY],
                streak="the world's restart readable",
            )
            if released:
                return True
        log.warning(
            "Segment health check: not every member of the current world reached the "
            "restart within %g s (gone, or looking late); restarting this launcher's "
            "workers without them",
            ALIGN_TIMEOUT,
        )
        return False
