"""The creators the inner backends' table names (:mod:`.registry`): torch's rendezvous
backend and its store, from torch's ``RendezvousParameters``.

* ``c10d``: torch's own, over a TCPStore; a store outside the launchers is said at INFO.
* ``etcd-v2``: torch's own, through an etcd leader election (:mod:`.etcd_v2`), once
  python-etcd is there.
* ``etcd-v3``: this folder's (:mod:`.etcd_v3`).

torch is imported inside each function: the table is read without it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from .._errors import ConfigurationError
from .registry import INNER_BACKEND_KEY

if TYPE_CHECKING:
    from torch.distributed import Store
    from torch.distributed.elastic.rendezvous import RendezvousParameters
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import RendezvousBackend

__all__ = ["c10d", "etcd_v2", "etcd_v3", "store_outside"]

log = logging.getLogger(__name__)


def store_outside(params: RendezvousParameters) -> bool:
    """Whether the c10d store is served outside this launcher (``is_host=false``)."""
    return params.backend == "c10d" and not params.get_as_bool("is_host", True)


def c10d(params: RendezvousParameters) -> tuple[RendezvousBackend, Store]:
    from torch.distributed.elastic.rendezvous import c10d_rendezvous_backend

    if store_outside(params):
        # torch waits for the store without a word until its timeout (minutes)
        log.info(
            "Connecting to the rendezvous store at %s; with is_host=false it must already "
            "be served there (e.g. by nvrx-seghealth store-host)",
            params.endpoint,
        )
    return c10d_rendezvous_backend.create_backend(params)


def etcd_v2(params: RendezvousParameters) -> tuple[RendezvousBackend, Store]:
    try:
        import etcd  # noqa: F401  (python-etcd; torch silently stubs it when missing)
    except ImportError:
        raise ConfigurationError(
            "inner_backend=etcd-v2 needs the python-etcd client: pip install python-etcd "
            "(the package's etcd extra: pip install '.[etcd]' from a checkout)",
            setting=f"rdzv-conf {INNER_BACKEND_KEY}=etcd-v2",
        ) from None
    from torch.distributed.elastic.rendezvous import etcd_rendezvous_backend

    from .etcd_v2 import election_safe

    # Through an etcd leader election; the store reads one key, not torch's whole directory.
    return election_safe(*etcd_rendezvous_backend.create_backend(params))


def etcd_v3(params: RendezvousParameters) -> tuple[RendezvousBackend, Store]:
    from .etcd_v3 import create_backend

    return create_backend(params)
