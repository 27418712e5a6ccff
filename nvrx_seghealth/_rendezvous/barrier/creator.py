"""torchrun's door to the barrier rendezvous: settings from ``--rdzv-conf``, the store from
``--rdzv-endpoint``, the handler (the ``torchrun.handlers`` entry point ``barrier``).

* The keys are torch's dynamic rendezvous' own: ``join_timeout`` (600 s),
  ``last_call_timeout`` (30 s), ``keep_alive_interval`` (5 s), ``keep_alive_max_attempt``
  (3), ``read_timeout``, ``is_host``, ``local_addr``. A job moves from ``c10d`` to
  ``barrier`` by its backend's name alone.
* Each setting is checked once here; a bad one is a :class:`ConfigurationError` naming it,
  before any store is opened.
* The store (``store``): ``tcp``, the default, is c10d's TCPStore at ``HOST:PORT``,
  served by the launcher on that host or by ``nvrx-seghealth store-host``
  (``is_host=false``), made the way torch's ``c10d`` backend makes it. ``etcd-v3`` is the
  etcd-v3 backend's store, every member of ``--rdzv-endpoint`` an endpoint, with that
  backend's keys (:mod:`..etcd_v3.settings`): scale and a store that outlives a member.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..._errors import ConfigurationError

if TYPE_CHECKING:
    from torch.distributed import Store
    from torch.distributed.elastic.rendezvous import RendezvousHandler, RendezvousParameters

    from .handler import BarrierRendezvousHandler, BarrierSettings

__all__ = ["STORES", "create_handler", "entry_point", "inner", "settings_from"]

#: The ``store`` key's values: the store each names.
STORES = ("tcp", "etcd-v3")

#: Each numeric key, its default and its least value.
_NUMBERS: dict[str, tuple[int, int]] = {
    "join_timeout": (600, 1),
    "last_call_timeout": (30, 0),
    "keep_alive_interval": (5, 1),
    "keep_alive_max_attempt": (3, 1),
}


def _number(params: RendezvousParameters, key: str) -> int:
    default, least = _NUMBERS[key]
    try:
        value = params.get_as_int(key, default)
    except ValueError:
        value = None
    if value is None or value < least:
        raise ConfigurationError(
            f"rdzv-conf {key} must be a whole number of at least {least}, got "
            f"{params.get(key)!r}; fix it in --rdzv-conf",
            setting=f"rdzv-conf {key}",
        )
    return value


def settings_from(params: RendezvousParameters) -> BarrierSettings:
    """The barrier settings ``params`` give (torch checked ``--nnodes`` already).

    Raises:
        ConfigurationError: a key's value is not a number in its range.
    """
    from .handler import BarrierSettings

    return BarrierSettings(
        run_id=params.run_id,
        min_nodes=params.min_nodes,
        max_nodes=params.max_nodes,
        join_timeout=_number(params, "join_timeout"),
        last_call_timeout=_number(params, "last_call_timeout"),
        keep_alive_interval=_number(params, "keep_alive_interval"),
        keep_alive_max_attempt=_number(params, "keep_alive_max_attempt"),
        local_addr=params.local_addr,
    )


def _store_kind(params: RendezvousParameters) -> str:
    kind = str(params.get("store", "tcp")).strip().lower()
    if kind not in STORES:
        raise ConfigurationError(
            f"rdzv-conf store={params.get('store')!r} is not one of {', '.join(STORES)}; "
            "fix it in --rdzv-conf",
            setting="rdzv-conf store",
        )
    return kind


def _open_store(params: RendezvousParameters, kind: str) -> Store:
    if kind == "etcd-v3":
        from ..etcd_v3 import create_backend

        return create_backend(params)[1]
    from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import _create_tcp_store

    return _create_tcp_store(params)


def create_handler(params: RendezvousParameters) -> BarrierRendezvousHandler:
    """The barrier handler for ``params`` (the creator torch calls).

    Raises:
        ConfigurationError: a key's value is invalid (named), before any store is opened.
    """
    from .handler import BarrierRendezvousHandler

    settings = settings_from(params)
    return BarrierRendezvousHandler(_open_store(params, _store_kind(params)), settings)


def inner(params: RendezvousParameters) -> tuple[BarrierRendezvousHandler, Store]:
    """The handler and the store it runs on, for ``segment-health``'s
    ``inner_backend=barrier`` (the check's markers live in that store)."""
    handler = create_handler(params)
    return handler, handler.store


def entry_point() -> Callable[[RendezvousParameters], RendezvousHandler]:
    """The ``torchrun.handlers`` entry point ``barrier``: returns :func:`create_handler`."""
    return create_handler
