"""A torchrun rendezvous whose store work per launcher does not grow with the world.

torch's dynamic rendezvous compare-and-sets one record of every node on each join and
keep-alive. Here each launcher claims a numbered slot, writes its own keys only, and
blocks on one key until the round is decided. One launcher per round, the closer, reads
every slot with one ``multi_get`` and writes every rank with one ``multi_set``.

The protocol, in the store's ``barrier/<run_id>/`` namespace (:mod:`.keys`):

* A joiner reads ``round``, takes slot ``i`` with ``add(<r>/n, 1)`` and writes
  ``<r>/slot/<i>`` (its node). Arrival ``min_nodes`` sets ``<r>/min``; arrival
  ``max_nodes`` sets ``<r>/full``. Arrival 1 is the closer (``<r>/closer``).
* The closer waits for round ``r - 1``'s world to end (``<r-1>/over``), for ``<r>/min``
  within ``join_timeout``, then for ``<r>/full`` at most ``last_call_timeout``
  (:mod:`.closer`). It reads the slots and their heartbeats, ranks the first
  ``max_nodes`` live ones, writes the ranks and members under its name, then
  ``<r>/done``.
* Every other joiner blocks on ``<r>/done``, then reads its rank. A slot past the
  decided ones, or rank -1 (a spare, or found dead), joins round ``r + 1``.
* A member that joins again sets ``<r>/over``; so do the next closer, on finding a
  member's heartbeat stale, and ``set_closed``. ``num_nodes_waiting`` reads it.
* Heartbeats (:mod:`.heartbeat`): each launcher sets ``hb/<node>`` to its clock.

Why each wait ends: see :mod:`.handler` and :mod:`.closer`. Rules: torch and the error
base only, and the etcd-v3 store when a job asks for it; nothing here knows the check.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .handler import BarrierRendezvousHandler, BarrierSettings

__all__ = ["BarrierRendezvousHandler", "BarrierSettings"]


def __getattr__(name: str) -> Any:
    # loaded when first named: torch loads the entry point (creator.py) while it imports
    # its own rendezvous package, which the handler imports
    if name in __all__:
        from . import handler

        return getattr(handler, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
