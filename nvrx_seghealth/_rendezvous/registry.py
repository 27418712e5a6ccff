"""The inner backends: one table that the settings, the backend, the demo and every
message read.

Each row names a rendezvous the ``segment-health`` backend can run inside, as torch's
``registry.py`` names its defaults in one place. A new backend is one row here and its
module in this folder. The rules:

* Readers ask this module each time (:func:`names`, :func:`etcd_names`, :func:`create`),
  never a copy made at import: a row added at run time is seen everywhere.
* A row names its creator as ``module:function``, loaded when a launcher creates it, as an
  entry point is: the table imports neither torch nor a client, so the settings read it.
* A creator takes torch's ``RendezvousParameters`` and returns torch's rendezvous backend,
  or a handler of its own, and the store it shares (the check's markers live there).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

__all__ = ["INNER_BACKENDS", "INNER_BACKEND_KEY", "InnerBackend", "create", "etcd_names", "names"]

#: The ``--rdzv-conf`` key that names the inner backend.
INNER_BACKEND_KEY = "inner_backend"


@dataclass(frozen=True)
class InnerBackend:
    """One rendezvous the wrapper can run inside.

    Attributes:
        name: the ``inner_backend`` value (and torch's backend name where it has one).
        in_etcd: its state and store live in an etcd that the job runs (the endpoint is
            its members), not in a TCPStore at ``HOST:PORT``.
        creator: ``module:function`` of its creator (see the module documentation).
    """

    name: str
    in_etcd: bool
    creator: str


#: Every inner backend by name, the default first.
INNER_BACKENDS: dict[str, InnerBackend] = {
    row.name: row
    for row in (
        InnerBackend("c10d", False, "nvrx_seghealth._rendezvous.creators:c10d"),
        InnerBackend("etcd-v2", True, "nvrx_seghealth._rendezvous.creators:etcd_v2"),
        InnerBackend("etcd-v3", True, "nvrx_seghealth._rendezvous.creators:etcd_v3"),
        InnerBackend("barrier", False, "nvrx_seghealth._rendezvous.barrier.creator:inner"),
    )
}


def names() -> tuple[str, ...]:
    """The inner backends' names, the default first."""
    return tuple(INNER_BACKENDS)


def etcd_names() -> tuple[str, ...]:
    """The names of the inner backends that live in an etcd."""
    return tuple(name for name, row in INNER_BACKENDS.items() if row.in_etcd)


def create(params: Any) -> tuple[Any, Any]:
    """torch's rendezvous backend and its store for ``params`` (torch's
    ``RendezvousParameters``; ``params.backend`` names the row).

    Raises:
        KeyError: no row has that name (the settings refused it before).
        ConfigurationError: the creator's own refusal (a client missing, a bad setting).
    """
    module, _, function = INNER_BACKENDS[params.backend].creator.partition(":")
    creator = getattr(importlib.import_module(module), function)
    backend, store = creator(params)
    return backend, store
