"""When a node state counts: only after it has held for N consecutive passes.

A node that shows a watched state once (a slurmd restart, a network blip: ``*``) must
not exclude its task for the rest of the run. So each watched state has a number of
passes (:data:`DEFAULT_PASSES`; ``drain`` and ``fail`` are deliberate operator actions
and count at once):

* a node becomes *unavailable* once it has shown one state for that state's number of
  consecutive passes;
* it becomes available again only after it has shown none of the watched states for
  as many consecutive passes as the state that made it unavailable needs (its *hold*);
* a node that shows a watched state that has not counted yet is *pending*: its task's
  decision is neither published nor cleared while it is.

A failed pass is no information: it changes no count.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from .slurm import NodeState

__all__ = ["DEFAULT_PASSES", "Debouncer", "NodeRecord"]

#: Consecutive passes a state must hold before it counts (and, to clear, be gone).
DEFAULT_PASSES: dict[str, int] = {"drain": 1, "fail": 1, "down": 2, "no_respond": 3}


@dataclass
class NodeRecord:
    """What the passes so far say about one node.

    Attributes:
        streaks: watched state -> consecutive passes the node has shown it (up to now).
        unavailable: the node counts as unavailable.
        hold: clean passes needed before an unavailable node counts as available.
        clean: consecutive passes without any watched state, while unavailable.
        seen: the node as last seen in a state that counted (``n3 drng (disk errors)``).
    """

    streaks: dict[str, int] = field(default_factory=dict)
    unavailable: bool = False
    hold: int = 0
    clean: int = 0
    seen: str = ""


class Debouncer:
    """Counts consecutive passes per node and state; see the module documentation.

    Args:
        passes: watched state -> passes it must hold (each >= 1).
    """

    def __init__(self, passes: Mapping[str, int]) -> None:
        self.passes = dict(passes)
        self.records: dict[str, NodeRecord] = {}

    def observe(self, nodes: Iterable[NodeState]) -> None:
        """Count one successful pass that listed ``nodes`` (nodes not listed: no news)."""
        for node in nodes:
            inside = [name for name in self.passes if node.is_in(name)]
            record = self.records.get(node.node)
            if record is None:
                if not inside:
                    continue
                record = self.records[node.node] = NodeRecord()
            record.streaks = {name: record.streaks.get(name, 0) + 1 for name in inside}
            counted = [name for name in inside if record.streaks[name] >= self.passes[name]]
            if counted:
                record.unavailable = True
                record.hold = max([record.hold, *(self.passes[name] for name in counted)])
                record.clean = 0
                record.seen = node.describe()
            elif record.unavailable:
                record.clean = 0 if inside else record.clean + 1
                if record.clean >= record.hold:
                    record.unavailable = False
            if not record.unavailable:
                record.hold = record.clean = 0
                if not record.streaks:
                    del self.records[node.node]

    def unavailable(self) -> dict[str, str]:
        """Node -> how it was seen, for every node that counts as unavailable."""
        return {name: r.seen for name, r in self.records.items() if r.unavailable}

    def pending(self) -> set[str]:
        """Nodes in a watched state that has not counted (yet)."""
        return {name for name, r in self.records.items() if r.streaks and not r.unavailable}

    def to_json(self) -> dict[str, Any]:
        return {name: asdict(record) for name, record in sorted(self.records.items())}

    def load(self, data: Mapping[str, Any]) -> None:
        """Restore :meth:`to_json`'s output (states no longer watched are dropped)."""
        self.records = {}
        for name, fields in data.items():
            record = NodeRecord(**fields)
            record.streaks = {s: n for s, n in record.streaks.items() if s in self.passes}
            if record.streaks or record.unavailable:
                self.records[str(name)] = record
