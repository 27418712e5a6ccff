"""torch's dynamic-rendezvous state, read without trusting its private shape.

torch's ``DynamicRendezvousHandler`` keeps one state per run in its backend: the c10d
backend in the rendezvous store, the etcd backends (``etcd-v2``, ``etcd-v3``) in one
etcd key. Each backend's
``get_state()`` (public API) returns that state as the bytes of a pickled
``_RendezvousState``, a private class whose attributes (``round``, ``complete``,
``closed``, ``participants``, ``wait_list``, ``redundancy_list``) any torch release may
change. The harness reads it to learn a worker's round and who waits where. The
``barrier`` rendezvous keeps no such state: :func:`read_barrier` reads the same facts
from its keys (``nvrx_seghealth._rendezvous.barrier.keys``).

This module is the one place that unpickles it. :func:`decode` turns the bytes into a
:class:`RendezvousSnapshot` and never raises: a fact it cannot read (the bytes do not
unpickle, an attribute is missing or of another type) is ``None``, "unknown", and
:attr:`RendezvousSnapshot.problem` says why. Reaching the backend is another matter: a
store or etcd that does not answer raises as torch's backend does.

Importing this module needs only the standard library; :func:`read_store`,
:func:`read_barrier`, :func:`read_endpoint` and :func:`etcd_rendezvous` import torch.
"""

from __future__ import annotations

import datetime
import pickle
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from .._rendezvous import registry

__all__ = [
    "RendezvousSnapshot",
    "decode",
    "etcd_rendezvous",
    "read_barrier",
    "read_endpoint",
    "read_store",
]


@dataclass(frozen=True)
class RendezvousSnapshot:
    """What one read of a run's rendezvous state showed; ``None`` is "unknown".

    Nodes are named by the PID of the process whose handler joined (torch's agent),
    one entry per node, in order: handlers of one process repeat its PID.

    Attributes:
        round: the current round (0-based).
        complete: whether the current round has completed.
        closed: whether the rendezvous is closed.
        participants: the nodes of the current round.
        waiting: the wait list: nodes that make a running round re-form.
        spares: the redundancy list: nodes beyond the maximum, waiting without making
            anyone restart.
        problem: why some fact is unknown (for a log line); ``None`` when all are known.
    """

    round: int | None = None
    complete: bool | None = None
    closed: bool | None = None
    participants: tuple[int, ...] | None = None
    waiting: tuple[int, ...] | None = None
    spares: tuple[int, ...] | None = None
    problem: str | None = None


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _bool(value: object) -> bool | None:
    return value if isinstance(value, bool) else None


def _pids(nodes: object) -> tuple[int, ...] | None:
    """The PIDs of ``nodes`` (a collection of torch's node descriptions; a dict's keys),
    one per node, sorted."""
    if not isinstance(nodes, Iterable) or isinstance(nodes, (str, bytes)):
        return None
    pids = [getattr(node, "pid", None) for node in nodes]
    known = [pid for pid in map(_int, pids) if pid is not None]
    return tuple(sorted(known)) if len(known) == len(pids) else None


#: Each snapshot fact, the state attribute it comes from, and how it is read.
_FACTS: tuple[tuple[str, str, Callable[[object], Any]], ...] = (
    ("round", "round", _int),
    ("complete", "complete", _bool),
    ("closed", "closed", _bool),
    ("participants", "participants", _pids),
    ("waiting", "wait_list", _pids),
    ("spares", "redundancy_list", _pids),
)


def decode(raw: bytes | None) -> RendezvousSnapshot:
    """The snapshot of ``raw``, the state bytes of a backend's ``get_state()``.

    ``None`` (no state stored: no node has joined yet) and bytes that do not unpickle
    give a snapshot with every fact unknown. Never raises.
    """
    if raw is None:
        return RendezvousSnapshot(problem="no rendezvous state is stored")
    try:
        state = pickle.loads(raw)
    except Exception as error:  # noqa: BLE001  (whatever the bytes hold, the answer is "unknown")
        return RendezvousSnapshot(problem=f"the state does not unpickle: {error!r}")
    facts = {name: read(getattr(state, attribute, None)) for name, attribute, read in _FACTS}
    unread = [attribute for name, attribute, _ in _FACTS if facts[name] is None]
    problem = None
    if unread:
        problem = f"{type(state).__name__} has no readable {', '.join(unread)}"
    return RendezvousSnapshot(**facts, problem=problem)


def read_store(store: Any, run_id: str) -> RendezvousSnapshot:
    """The snapshot of run ``run_id`` in the c10d rendezvous ``store`` (a torch ``Store``),
    read through torch's own c10d backend."""
    from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import (
        C10dRendezvousBackend,
    )

    state = C10dRendezvousBackend(store, run_id).get_state()
    return decode(None if state is None else state[0])


def _barrier_pid(node: str) -> int | None:
    """The process id in a barrier launcher's name (``<addr>_<pid>_<tag>``), or ``None``."""
    parts = node.rsplit("_", 2)
    return int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else None


def _barrier_pids(nodes: list[str]) -> tuple[int, ...] | None:
    pids = [_barrier_pid(node) for node in nodes]
    known = [pid for pid in pids if pid is not None]
    return tuple(sorted(known)) if len(known) == len(pids) else None


def read_barrier(store: Any, run_id: str) -> RendezvousSnapshot:
    """The snapshot of run ``run_id`` of the barrier rendezvous in ``store`` (a torch
    ``Store``), read from its keys.

    ``round`` is the latest round that formed a world (its members run it; the next
    round is not decided before that world ends), ``complete`` whether one did. The
    launchers that arrived in the round after it wait: as ``spares`` when it filled
    (``<r>/full``), else on the ``waiting`` list. Before any world, the round being
    formed is ``round`` and its arrivals wait.
    """
    # torch's rendezvous package first: it loads the ``barrier`` entry point as it starts,
    # and that entry point imports the handler this package would be importing
    import torch.distributed.elastic.rendezvous  # noqa: F401
    from torch.distributed import PrefixStore

    from .._rendezvous.barrier import keys
    from .._rendezvous.barrier.closer import formed_a_world

    barrier = PrefixStore(keys.prefix(run_id), store)
    closed = bool(barrier.check([keys.CLOSED]))
    if not barrier.check([keys.ROUND]):
        return RendezvousSnapshot(closed=closed, problem="no barrier round is stored")
    number = int(barrier.get(keys.ROUND))
    world: int | None = None
    done = ""
    for candidate in range(number, -1, -1):
        rnd = keys.Round(candidate)
        if barrier.check([rnd.done]):
            done = barrier.get(rnd.done).decode("ascii")
            if formed_a_world(done):
                world = candidate
                break

    def arrivals(rnd: keys.Round) -> list[str]:
        count = int(barrier.add(rnd.arrivals, 0))
        slots = [rnd.slot(i) for i in range(1, count + 1)]
        present = [slot for slot in slots if barrier.check([slot])]
        return [value.decode("ascii") for value in barrier.multi_get(present)] if present else []

    if world is None:
        waiting = _barrier_pids(arrivals(keys.Round(number)))
        return RendezvousSnapshot(number, False, closed, (), waiting, ())
    current = keys.Round(world)
    closer = done.split(" ", 2)[2]
    members = _barrier_pids(barrier.get(current.members(closer)).decode("ascii").split("\n"))
    after = _barrier_pids(arrivals(keys.Round(world + 1)))
    full = bool(barrier.check([current.full]))
    unnamed = members is None or after is None
    return RendezvousSnapshot(
        world,
        True,
        closed,
        members,
        () if full else after,
        after if full else (),
        "a barrier launcher's name holds no process id" if unnamed else None,
    )


def etcd_rendezvous(
    backend: str, endpoint: str, run_id: str, read_timeout: float = 60.0
) -> tuple[Any, Any]:
    """The rendezvous backend and store of run ``run_id`` in the etcd at ``endpoint``
    (one member or a comma-separated list), built by the backend's own creator
    (:func:`~.._rendezvous.registry.create`), so the keys are theirs and not a copy.

    Raises:
        ValueError: ``backend`` is not an inner backend that lives in an etcd.
    """
    from torch.distributed.elastic.rendezvous import RendezvousParameters

    if backend not in registry.etcd_names():
        raise ValueError(f"{backend!r} is not one of the etcd backends {registry.etcd_names()}")
    params = RendezvousParameters(
        backend, endpoint, run_id, 1, 1, read_timeout=max(1, int(read_timeout))
    )
    return registry.create(params)


def read_endpoint(
    backend: str, endpoint: str, run_id: str, timeout: datetime.timedelta
) -> RendezvousSnapshot:
    """The snapshot of run ``run_id`` of the rendezvous ``backend`` at ``endpoint``.

    ``c10d`` and ``barrier``: the TCPStore at ``HOST:PORT``. ``etcd-v2`` and
    ``etcd-v3``: the etcd at ``endpoint``, through :func:`etcd_rendezvous`.

    Raises:
        ValueError: ``backend`` is none of them.
    """
    if backend in ("c10d", "barrier"):
        from torch.distributed import TCPStore

        host, port = endpoint.rsplit(":", 1)
        store = TCPStore(host, int(port), is_master=False, timeout=timeout)
        return read_store(store, run_id) if backend == "c10d" else read_barrier(store, run_id)
    if backend in registry.etcd_names():
        rendezvous = etcd_rendezvous(backend, endpoint, run_id, timeout.total_seconds())[0]
        try:
            state = rendezvous.get_state()
        finally:
            close = getattr(rendezvous, "close", None)  # torch's etcd-v2 backend has none
            if close is not None:
                close()
        return decode(None if state is None else state[0])
    raise ValueError(f"no rendezvous state reader for backend {backend!r}")
