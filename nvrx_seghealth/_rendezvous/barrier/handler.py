"""The barrier rendezvous handler: what torch's elastic agent calls, over any torch store.

A launcher's store work per round is a constant number of small operations: ``add`` for
its slot, ``set`` of its own keys, one blocking ``wait`` on ``<r>/done``, ``get`` of its
rank. The closer's reads and writes of every slot are in :mod:`.closer`.

Why a joiner's wait ends: the closer decides the round (:mod:`.closer`). A joiner waits
on ``<r>/done`` in chunks of ``dead_after`` seconds; after each it reads the closer's
heartbeat, and takes the closer's place by compare-and-set if it is stale. A spare of a
full world waits there while that world runs, as torch's redundancy list does.

The agent's other calls:

* ``num_nodes_waiting``: nonzero once the world ended (``<r>/over``), or when launchers
  wait for the next round and the world has room (``max_nodes`` not reached). One or
  two small reads, at most once a second however often the agent asks.
* ``set_closed``: ``closed``, then the open rounds decided ``closed`` and the last
  world ended, which wakes every wait. ``shutdown`` stops the heartbeat and closes.
* The round's store is ``torch.rendezvous.<run_id>.<round>/`` of the rendezvous store;
  rank 0 publishes a free port of its own for the workers (``use_agent_store`` is off).
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING

from torch.distributed import PrefixStore, TCPStore
from torch.distributed.elastic.rendezvous import (
    RendezvousClosedError,
    RendezvousGracefulExitError,
    RendezvousHandler,
    RendezvousInfo,
    RendezvousStoreInfo,
)

from ..waits import wait_for
from . import keys
from .closer import close, formed_a_world, outcome
from .heartbeat import Heartbeat, is_stale

if TYPE_CHECKING:
    from torch.distributed import Store

__all__ = ["BACKEND_NAME", "BarrierRendezvousHandler", "BarrierSettings"]

BACKEND_NAME = "barrier"
#: Seconds ``num_nodes_waiting`` answers from its last look: torchrun's agent asks every
#: 0.1 s (``--monitor-interval``); torch's c10d state is cached for 1 s the same way.
WAITING_CACHE = 1.0
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BarrierSettings:
    """A barrier rendezvous' settings, validated where they enter (:mod:`.creator`).

    Attributes:
        run_id: the job's rendezvous id.
        min_nodes, max_nodes: ``--nnodes MIN:MAX``.
        join_timeout: seconds a round may wait for ``min_nodes`` once it is open.
        last_call_timeout: seconds a round waits for ``max_nodes`` after ``min_nodes``.
        keep_alive_interval: seconds between heartbeats (and between a waiter's looks).
        keep_alive_max_attempt: heartbeats missed before a launcher counts as dead.
        local_addr: the address rank 0 publishes for the workers' store.
    """

    run_id: str
    min_nodes: int
    max_nodes: int
    join_timeout: float = 600.0
    last_call_timeout: float = 30.0
    keep_alive_interval: float = 5.0
    keep_alive_max_attempt: int = 3
    local_addr: str | None = None

    @property
    def dead_after(self) -> float:
        """Seconds without a heartbeat after which a launcher counts as dead."""
        return self.keep_alive_interval * self.keep_alive_max_attempt


def _second_client(store: Store) -> Store:
    """Another connection to ``store``'s server: a new TCPStore client (0.7 ms here), or
    ``clone`` for another kind of store (a TCPStore's took 250 ms here).

    ``timeout``, ``libuvBackend`` and ``clone`` are not in torch's stubs.
    """
    if isinstance(store, TCPStore):
        return TCPStore(
            store.host,
            store.port,
            is_master=False,
            timeout=store.timeout,  # type: ignore[attr-defined]
            use_libuv=store.libuvBackend,  # type: ignore[attr-defined]
        )
    return store.clone()  # type: ignore[attr-defined]


class BarrierRendezvousHandler(RendezvousHandler):
    """torch's ``RendezvousHandler`` over the barrier protocol (see the package)."""

    def __init__(self, store: Store, settings: BarrierSettings) -> None:
        self._base_store = store
        self._store = PrefixStore(keys.prefix(settings.run_id), store)
        self._settings = settings
        addr = settings.local_addr or socket.getfqdn()
        self._node = f"{addr}_{os.getpid()}_{uuid.uuid4().hex[:8]}"
        # The blocking waits have a client of their own: a wait that a signal left
        # behind holds it (``waits``), never the client of the heartbeat and of the
        # launcher's other calls. Held here too: a store written in Python (etcd-v3's)
        # is gone once only the PrefixStore's C++ half refers to it.
        self._wait_client = _second_client(store)
        self._waits = PrefixStore(keys.prefix(settings.run_id), self._wait_client)
        self._heartbeat = Heartbeat(self._store, self._node, settings.keep_alive_interval)
        # the thread refers to the heartbeat only: a handler nobody holds stops it
        weakref.finalize(self, self._heartbeat.halt)
        #: The round this launcher is a member of, and that round's world size.
        self._round: int | None = None
        self._world = 0
        #: ``num_nodes_waiting``'s last answer and when it was read (monotonic).
        self._waiting = (0, -WAITING_CACHE)

    @property
    def store(self) -> Store:
        """The rendezvous store this handler runs on (its rounds' stores are inside)."""
        return self._base_store

    @property
    def node(self) -> str:
        """This launcher's name in the store: ``<addr>_<pid>_<8 hex digits>``, its address
        and process id as torch names a node, unique in the run."""
        return self._node

    def get_backend(self) -> str:
        return BACKEND_NAME

    @property
    def use_agent_store(self) -> bool:
        return False

    def get_run_id(self) -> str:
        return self._settings.run_id

    def next_rendezvous(self) -> RendezvousInfo:
        """Join the next round and return once it is decided with this launcher in it.

        Raises:
            RendezvousClosedError: the rendezvous is closed.
            RendezvousGracefulExitError: it closed while this launcher waited as a spare
                behind a world (torch's agent then ends its run without an error).
            RendezvousTimeoutError: the round got too few launchers in ``join_timeout``.
        """
        store, settings = self._store, self._settings
        if self.is_closed():
            raise RendezvousClosedError(f"the rendezvous '{settings.run_id}' is closed")
        self._heartbeat.start()
        number = store.add(keys.ROUND, 0)
        left, self._round = self._round, None
        was_member = left is not None
        if left is not None:
            number = max(number, left + 1)
        while True:
            rnd = keys.Round(number)
            slot = self._arrive(rnd)
            if left is not None:
                # arrived first, so the next closer sees this launcher when it wakes; then
                # the world ends, and the others' num_nodes_waiting() says so
                store.compare_set(keys.Round(left).over, "", f"rejoined {self._node}")
                left = None
            try:
                decided = outcome(self._await_done(rnd, closer=slot == 1), settings.run_id, slot)
            except RendezvousClosedError:
                if was_member or not self._behind_a_world(number):
                    raise
                # a spare: the job ended without it, as torch's redundancy list ends
                raise RendezvousGracefulExitError(
                    f"the rendezvous '{settings.run_id}' is closed; this spare was not needed"
                ) from None
            if slot <= decided.slots:
                rank = int(store.get(rnd.rank(decided.closer, slot)))
                if rank >= 0:
                    break
            number += 1
        self._round, self._world = number, decided.world
        self._waiting = (0, -WAITING_CACHE)
        log.info(
            "barrier rendezvous '%s': round %d, rank %d of %d",
            settings.run_id,
            number,
            rank,
            decided.world,
        )
        round_store = PrefixStore(f"torch.rendezvous.{settings.run_id}.{number}", self._base_store)
        bootstrap = RendezvousStoreInfo.build(rank, round_store, local_addr=settings.local_addr)
        return RendezvousInfo(round_store, rank, decided.world, bootstrap)

    def _behind_a_world(self, number: int) -> bool:
        """Whether round ``number - 1`` formed a world (this launcher waited behind it)."""
        if number == 0 or not self._store.check([keys.Round(number - 1).done]):
            return False
        return formed_a_world(self._store.get(keys.Round(number - 1).done).decode("ascii"))

    def _arrive(self, rnd: keys.Round) -> int:
        """Take a slot in ``rnd`` and write this launcher's keys; the slot number."""
        store, settings = self._store, self._settings
        slot = store.add(rnd.arrivals, 1)
        store.set(rnd.slot(slot), self._node)
        if slot == settings.min_nodes:
            store.set(rnd.min, "1")
        if slot == settings.max_nodes:
            store.set(rnd.full, "1")
        return slot

    def _await_done(self, rnd: keys.Round, *, closer: bool) -> bytes:
        """``<r>/done``, deciding the round if this launcher is (or becomes) its closer."""
        store, settings = self._store, self._settings
        if closer and store.compare_set(rnd.closer, "", self._node) == self._node.encode():
            self._close(rnd)
        while not wait_for(self._waits, [rnd.done], settings.dead_after):
            holder = store.get(rnd.closer).decode("ascii") if store.check([rnd.closer]) else ""
            if holder:
                beat = store.get(keys.heartbeat(holder))
                if not is_stale(beat, time.time(), settings.dead_after):
                    continue
            if store.compare_set(rnd.closer, holder, self._node) == self._node.encode():
                log.warning(
                    "barrier rendezvous: round %d's closer is gone; deciding it", rnd.number
                )
                self._close(rnd)
        return store.get(rnd.done)

    def _close(self, rnd: keys.Round) -> None:
        settings = self._settings
        close(
            self._store,
            self._waits,
            rnd,
            self._node,
            run_id=settings.run_id,
            min_nodes=settings.min_nodes,
            max_nodes=settings.max_nodes,
            join_timeout=settings.join_timeout,
            last_call_timeout=settings.last_call_timeout,
            interval=settings.keep_alive_interval,
            dead_after=settings.dead_after,
        )

    def is_closed(self) -> bool:
        return bool(self._store.check([keys.CLOSED]))

    def set_closed(self) -> None:
        store = self._store
        store.set(keys.CLOSED, "1")
        number = store.add(keys.ROUND, 0)
        for rnd in (keys.Round(number), keys.Round(number + 1)):
            store.compare_set(rnd.done, "", keys.DONE_CLOSED)
            store.set(rnd.min, keys.DONE_CLOSED)
        for ended in range(max(number - 1, 0), number + 1):
            store.compare_set(keys.Round(ended).over, "", keys.DONE_CLOSED)

    def num_nodes_waiting(self) -> int:
        """See torch's handler; read from the store at most once per :data:`WAITING_CACHE`."""
        if self._round is None:
            return 0
        answer, read = self._waiting
        if time.monotonic() - read < WAITING_CACHE:
            return answer
        answer = self._count_waiting()
        self._waiting = (answer, time.monotonic())
        return answer

    def _count_waiting(self) -> int:
        assert self._round is not None
        store = self._store
        waiting = keys.Round(self._round + 1).arrivals
        if store.check([keys.Round(self._round).over]):
            return max(1, store.add(waiting, 0))
        if self._world < self._settings.max_nodes:
            return int(store.add(waiting, 0))
        return 0

    def shutdown(self) -> bool:
        """Stop the heartbeat and close the rendezvous (as torch's handler does)."""
        self._heartbeat.stop()
        try:
            self.set_closed()
        except Exception as error:  # noqa: BLE001  (the store may be gone already)
            log.warning("barrier rendezvous '%s' not closed: %s", self._settings.run_id, error)
            return False
        return True
