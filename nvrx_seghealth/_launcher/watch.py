"""The round's signal: a member that leaves the world restarts it, aligned.

One :class:`WorldSignal` per launcher with the check on and per joined round. It lives in
the round's own store (``RendezvousInfo.store``), which has a fresh prefix every round.

* Each member tells the round its watch interval as it joins (:meth:`Member.joined`).
  It writes nothing more while the world trains.
* A launcher whose unit the watch excludes sets :data:`EXCLUDED_KEY` once every member
  told an interval above 0. Otherwise it warns once, and its unit trains on.
* The launcher holding rank 0 reads every member's interval once, :data:`MEMBERS_TIMEOUT`
  after the round formed, and warns of a world where some watch and some do not.
* A launcher that leaves a round it is a member of sets that key, whatever the intervals.
* Every member looks for the key in its agent's ``num_nodes_waiting()``, at most once a
  :data:`LOOK_INTERVAL`: one store ``check``.
* A member that finds it waits in a barrier until every member arrived, at most
  :data:`ALIGN_TIMEOUT` seconds. Then it reports a waiting node, and its agent restarts.
* Every store call goes through the launcher's :class:`~.failopen.FailOpen`: a failing
  store restarts nobody.

Why the barrier, and why every member must watch: docs/watch.md. Why a member that leaves
as it joins tells the round: docs/concepts.md.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass

from torch.distributed import Store
from torch.distributed.elastic.rendezvous import RendezvousInfo

from .._errors import UnhealthyNodeException, When
from .._logfmt import FieldValue, format_fields, parse_fields
from .events import DecisionRecorder, FailOpenReason
from .failopen import FailOpen

__all__ = [
    "ALIGN_POLL",
    "ALIGN_TIMEOUT",
    "ARRIVED_KEY",
    "EXCLUDED_KEY",
    "LOOK_INTERVAL",
    "MEMBERS_TIMEOUT",
    "MEMBER_KEY",
    "RESTART_KEY",
    "Member",
    "WorldSignal",
]

log = logging.getLogger(__name__)

#: Set (to the excluded unit's tokens) by the launcher that excluded its unit.
EXCLUDED_KEY = "nvrx-seghealth/watch/excluded"
#: How many members of the round have reached the barrier.
ARRIVED_KEY = "nvrx-seghealth/watch/arrived"
#: Set by the last member to reach the barrier.
RESTART_KEY = "nvrx-seghealth/watch/restart"
#: Followed by a member's rank: what that member told the round as it joined (logfmt:
#: ``job_id``, ``task_id``, ``procid`` when known, ``host``, ``watch_interval``).
MEMBER_KEY = "nvrx-seghealth/watch/member/"
#: Seconds between two looks of one launcher for :data:`EXCLUDED_KEY`: one store call
#: a second per launcher, whatever the agent's ``--monitor-interval``.
LOOK_INTERVAL = 1.0
#: The longest a launcher waits for the other members before it restarts anyway: a
#: member may be gone (its agent failed) or look late (a long ``--monitor-interval``);
#: every live member arrives within :data:`LOOK_INTERVAL` plus its monitor interval.
ALIGN_TIMEOUT = 10.0
#: The longest the launcher whose unit the watch excludes waits for members
#: that have not told their watch interval: each tells it as it joins, before its
#: workers start, so a member silent that long has no watch (or its store call failed).
MEMBERS_TIMEOUT = 10.0
#: Seconds between two looks for :data:`RESTART_KEY` in the barrier, and for the
#: members' intervals (a ``sleep`` between them, so a signal stops the launcher at once).
ALIGN_POLL = 0.25


@dataclass(frozen=True)
class Member:
    """What a launcher with the check on needs to be a member of the rounds it joins.

    Attributes:
        watch_interval: the launcher's ``watch_interval`` in seconds; ``0``: no watch.
        fail_open: runs every store call.
        events: records the restart; its unit names the launcher to the others.
    """

    watch_interval: float
    fail_open: FailOpen
    events: DecisionRecorder

    @property
    def watches(self) -> bool:
        """Whether the launcher has the watch."""
        return self.watch_interval > 0

    def joined(self, info: RendezvousInfo) -> WorldSignal:
        """Tell the round ``info`` this launcher's watch interval (one ``set``); the
        round's signal, with the watch on or off."""
        unit = self.events.unit
        told: dict[str, FieldValue] = {}
        if unit is not None:
            told |= {"job_id": unit.job_id, "task_id": unit.task_id, "procid": unit.procid}
        told |= {"host": socket.gethostname(), "watch_interval": f"{self.watch_interval:g}"}
        self.fail_open(
            "tell-watch",
            "tell the round this launcher's watch interval",
            info.store.set,
            f"{MEMBER_KEY}{info.rank}",
            format_fields(told),
        )
        return WorldSignal(
            info.store, info.world_size, self.fail_open, self.events, audits=info.rank == 0
        )


class WorldSignal:
    """One launcher's view of one joined round's exclusions; see the module documentation.

    Args:
        store: the round's store (``RendezvousInfo.store``).
        world_size: the number of launchers in the round (``RendezvousInfo.world_size``).
        fail_open: runs every store call.
        events: records the restart.
        audits: read the members' watch intervals once, :data:`MEMBERS_TIMEOUT` from now,
            and warn of a mixed world (the launcher holding rank 0).
    """

    def __init__(
        self,
        store: Store,
        world_size: int,
        fail_open: FailOpen,
        events: DecisionRecorder,
        *,
        audits: bool = False,
    ) -> None:
        self._store = store
        self._world_size = world_size
        self._fail_open = fail_open
        self._events = events
        self._next_look = 0.0  # the first look is due at once
        self._restart = False
        # Set by the thread whose look excludes the unit; read by the agent's.
        self._excluded: UnhealthyNodeException | None = None
        self._members_judged = False  # for that exclusion (the agent's thread)
        self._audit_at = time.monotonic() + MEMBERS_TIMEOUT if audits else None

    def exclude(self, exclusion: UnhealthyNodeException) -> None:
        """This launcher's unit, a member of the round, is excluded while it trains.

        The round is told at the agent's next ``num_nodes_waiting()``
        (:meth:`restart_due`), if every member watches. The calling thread (process 0's
        watch or responder, holding its lock) makes no store call here.
        """
        self._excluded = exclusion

    def leave(self, exclusion: UnhealthyNodeException, when: When) -> None:
        """This launcher's unit is excluded ``when`` and it leaves the round now: the world
        is told, and the launcher counts itself in the barrier (unless it already passed
        it)."""
        if self._restart:
            return
        self._restart = True
        self._tell(exclusion, when)
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
        if self._audit_at is not None and time.monotonic() >= self._audit_at:
            self._audit_at = None
            self._warn_if_mixed()
        excluded = self._excluded
        if excluded is not None and not self._members_judged:
            self._members_judged = True
            if self._every_member_watches():
                self._tell(excluded, When.DURING_TRAINING)
                self._next_look = 0.0
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
        told = self._fail_open(
            "watch-world", "read who was excluded", self._store.get, EXCLUDED_KEY
        )
        tokens = {} if told is None else parse_fields(told.decode(errors="replace"))
        when = When.parse(tokens.get("when"))
        log.info(
            "Segment health check: a unit of the current world was excluded%s; restarting "
            "this launcher's workers %s (waited %.1f s); %s",
            "" if when is None else f" {when.phrase}",
            "with every member of the world"
            if aligned
            else "without the members that did not come",
            waited,
            format_fields(tokens),
        )
        self._events.world_restart(aligned, waited)
        return True

    def _tell(self, exclusion: UnhealthyNodeException, when: When) -> None:
        """Set :data:`EXCLUDED_KEY` to the tokens of the ``nvrx_seghealth.excluded`` event:
        ``when``, ``by``, and the unit's ``job_id``, ``task_id``, with ``path`` for a
        decision file. Not ``reason``: a member's log would then read as its own
        exclusion (:mod:`.._demo.logtokens`)."""
        tokens: dict[str, FieldValue] = {
            "when": when.token,
            "by": exclusion.reason.value,
            "job_id": exclusion.job_id,
            "task_id": exclusion.task_id,
            "path": exclusion.path,
        }
        self._fail_open(
            "signal-world",
            "tell the current world of the exclusion; it restarts only on its own failures",
            self._store.set,
            EXCLUDED_KEY,
            format_fields(tokens),
        )

    def _every_member_watches(self) -> bool:
        """Whether every member told an interval above 0, waiting at most
        :data:`MEMBERS_TIMEOUT` for members not yet told. If not: one WARNING and one
        ``fail_open`` event naming the first member without the watch. ``False`` too when
        the store fails (its own WARNING): the world trains on, as without the watch."""
        keys = [f"{MEMBER_KEY}{rank}" for rank in range(self._world_size)]
        deadline = time.monotonic() + MEMBERS_TIMEOUT
        while True:
            everyone = self._fail_open(
                "read-members", "read the members' watch intervals", self._store.check, keys
            )
            if everyone is None:
                return False
            if everyone or time.monotonic() >= deadline:
                break
            time.sleep(ALIGN_POLL)
        members = self._fail_open(
            "read-members", "read the members' watch intervals", self._read, keys, everyone
        )
        if members is None:
            return False
        without = [(rank, told) for rank, told in enumerate(members) if not _watches(told)]
        if not without:
            return True
        tokens = self._without_watch("without_watch", without)
        log.warning(
            "Segment health check: not every member of the current world has the watch, "
            "and a restart would fail their workers; this launcher's unit, excluded during "
            "training, trains on and leaves at its next restart, as without the watch. Give "
            "every launcher the same segment_health_check_watch_interval; %s",
            format_fields(tokens),
        )
        self._events.fail_open(FailOpenReason.MIXED_WATCH, **tokens)
        return False

    def _warn_if_mixed(self) -> None:
        """One WARNING when some members told an interval above 0 and some did not: an
        exclusion by the watch would then not restart the world (:meth:`_every_member_watches`)."""
        keys = [f"{MEMBER_KEY}{rank}" for rank in range(self._world_size)]
        everyone = self._fail_open(
            "read-members", "read the members' watch intervals", self._store.check, keys
        )
        members = (
            None
            if everyone is None
            else self._fail_open(
                "read-members", "read the members' watch intervals", self._read, keys, everyone
            )
        )
        if members is None:
            return
        without = [(rank, told) for rank, told in enumerate(members) if not _watches(told)]
        if not without or len(without) == len(members):
            return
        tokens = self._without_watch("not_watching", without)
        log.warning(
            "Segment health check: not every member of this world has the watch: a unit "
            "the watch excludes will train on until its next restart. Give every launcher "
            "the same segment_health_check_watch_interval; %s",
            format_fields(tokens),
        )

    def _without_watch(
        self, count: str, without: list[tuple[int, dict[str, str] | None]]
    ) -> dict[str, FieldValue]:
        """The tokens that name the members without the watch: ``count`` of them, the
        world's size, and what the first of them told (``member_*``)."""
        rank, told = without[0]
        tokens: dict[str, FieldValue] = {
            count: len(without),
            "world_size": self._world_size,
            "member_rank": rank,
        }
        return tokens | {
            f"member_{key}": value for key, value in (told or {"watch_interval": "unknown"}).items()
        }

    def _read(self, keys: list[str], everyone: bool) -> list[dict[str, str] | None]:
        """What each member told, by rank; ``None`` for one that told nothing."""
        present = keys if everyone else [key for key in keys if self._store.check([key])]
        values = dict(zip(present, self._store.multi_get(present))) if present else {}
        return [
            parse_fields(values[key].decode(errors="replace")) if key in values else None
            for key in keys
        ]

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


def _watches(told: Mapping[str, str] | None) -> bool:
    """Whether a member that told ``told`` (``None``: nothing) has the watch."""
    try:
        return told is not None and float(told.get("watch_interval", "0")) > 0
    except ValueError:
        return False
