"""The workers' bootstrap store: the launcher holding rank 0 serves a new one every round.

torch's two bootstraps fail this package's jobs. Shared, a survivor of the rank-0 unit's
exclusion dials a master that left (pytorch#135712). Not shared, rank 0's worker binds a
port its agent chose and closed, and another socket may take it first. The rules:

* torch's handler gets ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`` and builds each round
  afresh; this module serves the workers.
* Each round, rank 0's launcher starts a new TCPStore on a port the kernel binds for it,
  holds it until its next round, and publishes it in the round's own store. When it
  cannot, it publishes torch's own port there, which its worker binds: no member waits.
* Only public API and the round's store are used, so every inner backend behaves alike.
* :func:`serve_workers` decides once, when the handler is built. A user's ``1`` is served
  the same way; another value is kept, with a WARNING.
* The ``barrier`` handler builds each round afresh already, and its rank 0 hands the
  workers a port it closed: it is served too, whatever the variable says.
* Any other handler is left as it is.

The story: docs/reference/backend.md, "The workers' bootstrap store".
"""

from __future__ import annotations

import datetime
import logging
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the backend imports this module while torch imports its entry point
    from torch.distributed import Store, TCPStore
    from torch.distributed.elastic.rendezvous import RendezvousHandler, RendezvousInfo

    from .failopen import FailOpen

__all__ = [
    "CHECK_OFF",
    "EXCLUSIONS",
    "OUTSIDE_STORE",
    "SHARED_STORE_ENV",
    "WORKERS_PORT_KEY",
    "WorkersStore",
    "serve_workers",
]

log = logging.getLogger(__name__)

#: torch's switch between sharing the agent's store with the workers (unset, ``0``) or not.
SHARED_STORE_ENV = "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"

#: The key of the round's store where the launcher holding rank 0 publishes the port of the
#: workers' bootstrap store.
WORKERS_PORT_KEY = "nvrx-seghealth/workers-store-port"

#: How long starting the workers' store may take: its own client connects to the launcher's
#: address (a connection can stall 5 s on a busy node), well within the 60 s that the
#: other launchers wait for the port in the round's store.
SERVE_TIMEOUT = datetime.timedelta(seconds=30)

#: Why, with the check on: what an exclusion does to workers that share the store.
EXCLUSIONS = (
    "units can be excluded: once the unit holding rank 0 leaves, or a spare joins a new "
    "world, workers that bootstrap from torch's shared store wait for an address that "
    "never comes and the job fails"
)
#: Why, with the check off on the ``segment-health`` backend.
CHECK_OFF = (
    "the segment-health backend serves it with the check off too, so that the launchers "
    "of one world bootstrap alike whichever of them has a decision directory"
)
#: Why, with a store outside the launchers (``is_host=false``).
OUTSIDE_STORE = (
    "the store is outside the launchers (is_host=false): restarted workers would read "
    "the previous attempt's addresses and fail to connect"
)


class WorkersStore:
    """Gives each round's workers a bootstrap store that the launcher holding rank 0 serves.

    Args:
        fail_open: runs each step; a step that fails leaves the round to torch's own
            bootstrap (the rank-0 worker binds the port torch chose).
    """

    def __init__(self, fail_open: FailOpen) -> None:
        self._fail_open = fail_open
        self._server: TCPStore | None = None
        self._launcher_serves = True

    @property
    def use_agent_store(self) -> bool:
        """Whether this launcher's workers bootstrap from a launcher's store: ``False`` only
        in a round where this launcher holds rank 0 and could not serve one."""
        return self._launcher_serves

    def serve(self, info: RendezvousInfo) -> RendezvousInfo:
        """``info`` of a round just joined, with the bootstrap address of that round's store.

        Rank 0 starts the store and publishes its port; the others wait for it in the
        round's store, as torch's own bootstrap waits for rank 0's address.
        """
        self._server = None  # the previous round's store; that round's workers were stopped
        bootstrap = info.bootstrap_store_info
        if bootstrap is None:  # not torch's dynamic handler
            return info
        if info.rank == 0:
            port = self._serve_as_rank_zero(info.store, bootstrap.master_addr)
            if port is None:  # say so at once: the others stop waiting for a served port
                self._fail_open(
                    "publish-workers-store",
                    "publish torch's own workers' port",
                    _publish,
                    info.store,
                    bootstrap.master_port,
                )
        else:
            self._launcher_serves = True
            port = self._fail_open(
                "read-workers-store", "read the workers' store port", _published_port, info.store
            )
        if port is None:  # fail open: torch's own port, which the rank-0 worker binds
            port = bootstrap.master_port
        from torch.distributed.elastic.rendezvous import RendezvousInfo, RendezvousStoreInfo

        return RendezvousInfo(
            info.store,
            info.rank,
            info.world_size,
            RendezvousStoreInfo(bootstrap.master_addr, port),
        )

    def _serve_as_rank_zero(self, store: Store, addr: str) -> int | None:
        """Start the round's store and publish its port; ``None`` when either failed
        (the rank-0 worker then hosts on torch's port)."""
        server = self._fail_open(
            "serve-workers-store", "start the workers' bootstrap store", _new_server, addr
        )
        published = server is not None and self._fail_open(
            "publish-workers-store", "publish the workers' store port", _publish, store, server.port
        )
        if server is None or not published:
            self._launcher_serves = False
            return None
        self._server = server
        self._launcher_serves = True
        return int(server.port)


def _new_server(addr: str) -> TCPStore:
    """A TCPStore served here on a port the kernel picks and keeps bound for it; its own
    client's connection to ``addr`` is bounded by :data:`SERVE_TIMEOUT`."""
    from torch.distributed import TCPStore

    return TCPStore(addr, 0, is_master=True, wait_for_workers=False, timeout=SERVE_TIMEOUT)


def _publish(store: Store, port: int) -> bool:
    """Publish the workers' ``port`` in the round's ``store``, and see it there (a
    TCPStore's ``set`` does not wait for an answer)."""
    store.set(WORKERS_PORT_KEY, str(port))
    if not store.check([WORKERS_PORT_KEY]):
        raise RuntimeError(f"{WORKERS_PORT_KEY} is not in the round's store after it was set")
    return True


def _published_port(store: Store) -> int:
    """The port that the launcher holding rank 0 published in the round's ``store``."""
    value = store.get(WORKERS_PORT_KEY).decode()
    port = int(value)
    if not 0 < port < 65536:
        raise ValueError(f"{WORKERS_PORT_KEY}={value!r} is not a port")
    return port


def serve_workers(inner: RendezvousHandler, why: str) -> WorkersStore | None:
    """The :class:`WorkersStore` for a launcher around ``inner``, or ``None`` to leave
    torch's bootstrap as it is (neither torch's dynamic handler nor the barrier handler,
    or the user's variable is not ``1`` for torch's handler).

    For torch's handler, unless set, ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`` is set in
    this process, so that it builds each round afresh. ``why`` (:data:`EXCLUSIONS`,
    :data:`OUTSIDE_STORE`) is logged: at INFO when the store is served, at WARNING when
    the user's value turns torch's sharing on. A value the user set is never changed.
    """
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import DynamicRendezvousHandler

    from .._rendezvous.barrier import BarrierRendezvousHandler

    if isinstance(inner, BarrierRendezvousHandler):
        log.info(
            "The launcher holding rank 0 serves its workers a new bootstrap store each "
            "round, on a port it holds (the barrier rendezvous' rank 0 hands them a port "
            "it closed, which another socket may take first)"
        )
        return _workers_store(inner)
    if not isinstance(inner, DynamicRendezvousHandler):
        return None
    value = os.environ.get(SHARED_STORE_ENV)
    if value is not None and value != "1":
        log.warning(
            "%s=%s makes the workers bootstrap from the store of the launcher holding rank 0, "
            "and %s (pytorch#135712); unset it, or set it to 1",
            SHARED_STORE_ENV,
            value,
            why,
        )
        return None
    os.environ[SHARED_STORE_ENV] = "1"
    log.info(
        "The launcher holding rank 0 serves its workers a new bootstrap store each round, "
        "on a port it holds (%s=1 for torch's handler: %s; pytorch#135712)",
        SHARED_STORE_ENV,
        why,
    )
    return _workers_store(inner)


def _workers_store(inner: RendezvousHandler) -> WorkersStore:
    from .events import DecisionRecorder
    from .failopen import FailOpen

    return WorkersStore(FailOpen(DecisionRecorder(inner)))
