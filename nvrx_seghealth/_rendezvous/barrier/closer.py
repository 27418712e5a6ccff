"""Deciding a round: the one launcher that reads every slot and writes every rank.

The closer of round ``r`` (its arrival 1, or a waiter that took over from a dead one)
runs :func:`close`. Each of its waits ends:

* Round ``r - 1``'s world ending (``<r-1>/over``): set by a member that joins again, or
  by this closer on finding a member's heartbeat stale. It looks once per keep-alive
  interval, one ``multi_get`` of the members' heartbeats; the world may run for days.
* ``<r>/min``: set by arrival ``min_nodes``; past ``join_timeout`` the round is decided
  ``timeout`` for the slots taken so far: those raise torch's ``RendezvousTimeoutError``,
  later arrivals go on to the next round.
* ``<r>/full``: at most ``last_call_timeout``, then the round closes with who is there.
* The slots: each is written right after its number is taken; a slot still empty after
  ``dead_after`` belongs to a dead joiner and is left out.

``<r>/done`` is written by compare-and-set, so ``set_closed`` and a closer that took
over never both decide a round.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from torch.distributed.elastic.rendezvous import RendezvousClosedError, RendezvousTimeoutError

from ..waits import wait_for
from . import keys
from .heartbeat import is_stale

if TYPE_CHECKING:
    from torch.distributed import Store

__all__ = ["Outcome", "close", "formed_a_world", "outcome"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Outcome:
    """A decided round: slots ``1..slots`` were ranked by ``closer``, ``world`` of them
    are members."""

    slots: int
    world: int
    closer: str


def formed_a_world(done: str) -> bool:
    """Whether the decision ``done`` formed a world (not closed, not timed out)."""
    return done != keys.DONE_CLOSED and not done.startswith(keys.DONE_TIMEOUT)


def outcome(done: bytes, run_id: str, slot: int) -> Outcome:
    """The decision ``done`` holds, for the launcher of ``slot``.

    A round that timed out names the slots it had: a later arrival gets an outcome
    without it (``slots`` below its own) and goes on to the next round.

    Raises:
        RendezvousClosedError: the rendezvous was closed instead.
        RendezvousTimeoutError: too few launchers came within ``join_timeout``.
    """
    text = done.decode("ascii")
    if text == keys.DONE_CLOSED:
        raise RendezvousClosedError(f"the rendezvous '{run_id}' is closed")
    if text.startswith(keys.DONE_TIMEOUT):
        taken = int(text.split()[1])
        if slot <= taken:
            raise RendezvousTimeoutError(
                f"the rendezvous '{run_id}' did not get enough launchers within its join "
                "timeout; start more launchers or raise join_timeout"
            )
        return Outcome(taken, 0, "")
    slots, world, closer = text.split(" ", 2)
    return Outcome(int(slots), int(world), closer)


def _decide(store: Store, rnd: keys.Round, value: str, run_id: str) -> Outcome:
    """Write ``value`` to ``<r>/done`` unless something was decided first, and send later
    joiners to the next round; the decision, for the closer (an arrival of the round)."""
    decided = store.compare_set(rnd.done, "", value)
    if decided != keys.DONE_CLOSED.encode():
        store.compare_set(keys.ROUND, str(rnd.number), str(rnd.number + 1))
    return outcome(decided, run_id, slot=0)


def _time_out(store: Store, rnd: keys.Round, run_id: str) -> Outcome:
    """Decide ``rnd`` timed out for the slots taken so far."""
    taken = store.add(rnd.arrivals, 0)
    return _decide(store, rnd, f"{keys.DONE_TIMEOUT} {taken}", run_id)


def _watch_world(
    store: Store, waits: Store, prev: keys.Round, interval: float, dead_after: float
) -> None:
    """Return once round ``prev``'s world has ended (if it had one)."""
    if not store.check([prev.done]):
        return
    done = store.get(prev.done).decode("ascii")
    if not formed_a_world(done):
        return
    members: list[str] | None = None
    while not wait_for(waits, [prev.over], interval):
        if members is None:
            closer = done.split(" ", 2)[2]
            members = store.get(prev.members(closer)).decode("ascii").split("\n")
        beats = store.multi_get([keys.heartbeat(node) for node in members])
        now = time.time()
        dead = [node for node, beat in zip(members, beats) if is_stale(beat, now, dead_after)]
        if dead:
            log.warning("barrier rendezvous: round %d's member %s is dead", prev.number, dead[0])
            store.compare_set(prev.over, "", f"dead {dead[0]}")
            return


def _live_slots(
    store: Store, waits: Store, rnd: keys.Round, count: int, dead_after: float
) -> list[tuple[int, str]]:
    """The slots ``1..count`` whose launcher is alive, with its node, in arrival order."""
    slot_keys = [rnd.slot(i) for i in range(1, count + 1)]
    if wait_for(waits, slot_keys, dead_after):
        present = list(range(1, count + 1))
    else:
        present = [i for i, key in enumerate(slot_keys, 1) if store.check([key])]
    nodes = [v.decode("ascii") for v in store.multi_get([rnd.slot(i) for i in present])]
    beats = store.multi_get([keys.heartbeat(node) for node in nodes])
    now = time.time()
    return [
        (i, node)
        for i, node, beat in zip(present, nodes, beats)
        if not is_stale(beat, now, dead_after)
    ]


def close(
    store: Store,
    waits: Store,
    rnd: keys.Round,
    node: str,
    *,
    run_id: str,
    min_nodes: int,
    max_nodes: int,
    join_timeout: float,
    last_call_timeout: float,
    interval: float,
    dead_after: float,
) -> Outcome:
    """Decide round ``rnd`` as ``node`` (see the module documentation); the decision.
    ``waits``: the same store through the client that blocks in waits.

    Raises:
        RendezvousClosedError, RendezvousTimeoutError: as :func:`outcome`.
    """
    if rnd.number > 0:
        _watch_world(store, waits, keys.Round(rnd.number - 1), interval, dead_after)
    deadline = time.monotonic() + join_timeout
    if not wait_for(waits, [rnd.min], join_timeout):
        return _time_out(store, rnd, run_id)
    if store.check([keys.CLOSED]):
        return _decide(store, rnd, keys.DONE_CLOSED, run_id)
    wait_for(waits, [rnd.full], last_call_timeout)
    while True:
        count = store.add(rnd.arrivals, 0)
        live = _live_slots(store, waits, rnd, count, dead_after)
        missing = min_nodes - len(live)
        if missing <= 0:
            break
        # joiners died: wait for as many more arrivals as the round still needs
        if not wait_for(waits, [rnd.slot(count + missing)], deadline - time.monotonic()):
            return _time_out(store, rnd, run_id)
    members = live[:max_nodes]
    rank_of = {slot: rank for rank, (slot, _) in enumerate(members)}
    # Store.multi_set is not in torch's stubs
    store.multi_set(  # type: ignore[attr-defined]
        [rnd.rank(node, i) for i in range(1, count + 1)],
        [str(rank_of.get(i, -1)) for i in range(1, count + 1)],
    )
    store.set(rnd.members(node), "\n".join(member for _, member in members))
    return _decide(store, rnd, f"{count} {len(members)} {node}", run_id)
