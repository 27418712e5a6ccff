"""The barrier rendezvous' keys: one place that names every key and its writer.

All keys live under ``barrier/<run_id>/`` of the rendezvous store. Values are ASCII.

* ``closed`` (any launcher, ``set_closed``): the rendezvous is closed for good.
* ``round`` (an ``add`` counter; the closer moves it on): the round joiners start at.
* ``hb/<node>`` (that launcher only): the wall clock of its last heartbeat.
* Per round ``r``, under ``<r>/``:

  * ``n`` (an ``add`` counter, every joiner once): the arrivals, each one's slot number.
  * ``slot/<i>`` (arrival ``i``): its node. ``min`` / ``full`` (arrival ``min_nodes`` /
    ``max_nodes``): enough arrivals to close / no need to wait longer.
  * ``closer`` (compare-and-set): the node deciding the round.
  * ``<closer>/rank/<i>`` (that closer, one ``multi_set``): slot ``i``'s rank, -1 if not
    a member. Under the closer's name: a closer taken for dead but still running cannot
    overwrite the ranks of the decision that won.
  * ``<closer>/members`` (that closer): the members' nodes in rank order, one a line.
  * ``done`` (compare-and-set, once): ``"<slots> <world> <closer>"``, ``closed``, or
    ``"timeout <slots>"``. A decision other than ``closed`` moves ``round`` on.
  * ``over`` (a member leaving or rejoining, the next closer, ``set_closed``): why the
    round's world ended.
"""

from __future__ import annotations

__all__ = ["CLOSED", "DONE_CLOSED", "DONE_TIMEOUT", "ROUND", "Round", "heartbeat", "prefix"]

CLOSED = "closed"
ROUND = "round"
DONE_CLOSED = "closed"
DONE_TIMEOUT = "timeout"


def prefix(run_id: str) -> str:
    """The namespace of one rendezvous in the store (a ``PrefixStore`` adds the ``/``)."""
    return f"barrier/{run_id}"


def heartbeat(node: str) -> str:
    """A launcher's heartbeat key."""
    return f"hb/{node}"


class Round:
    """The keys of round ``number``."""

    def __init__(self, number: int) -> None:
        self.number = number
        base = f"{number}/"
        self.arrivals = base + "n"
        self.min = base + "min"
        self.full = base + "full"
        self.closer = base + "closer"
        self.done = base + "done"
        self.over = base + "over"
        self._base = base

    def slot(self, i: int) -> str:
        """Arrival ``i``'s node (1-based)."""
        return f"{self._base}slot/{i}"

    def rank(self, closer: str, i: int) -> str:
        """Arrival ``i``'s rank, as ``closer`` decided it."""
        return f"{self._base}{closer}/rank/{i}"

    def members(self, closer: str) -> str:
        """The members' nodes, as ``closer`` decided them."""
        return f"{self._base}{closer}/members"
