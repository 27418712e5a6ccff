"""etcd-v3: torch's dynamic rendezvous on etcd's v3 API, every member an endpoint.

``torchrun --rdzv-backend=etcd-v3 --rdzv-endpoint=h1:2379,h2:2379,h3:2379`` finds this
backend through the ``torchrun.handlers`` entry point ``etcd-v3``: torch calls
:func:`entry_point`, which returns :func:`create_handler`, torch's
``DynamicRendezvousHandler`` over this room's backend and store. ``segment-health``
runs over it with ``inner_backend=etcd-v3`` (:func:`create_backend`).

The room, one concept per module:

- :mod:`.client`: etcd's JSON gateway (``/v3``) over the standard library, its calls;
  beneath it :mod:`.wire` (the JSON), :mod:`.errors` (:class:`~.errors.EtcdUnavailable`,
  transient, or :class:`~.errors.EtcdRefused`, cause and fix), :mod:`.transport` (the
  members in turn, TLS, tokens) and :mod:`.endpoints` (what a user names);
- :mod:`.settings` (the rdzv-conf keys), :mod:`.keys` (a run's keys), :mod:`.lease`
  (the run lease), :mod:`.backend` (torch's state), :mod:`.store` (torch's store).

Its rules: it imports nothing of the check (an import contract), only torch, the
standard library and the package's retry policy, errors and logfmt; each launcher has
one client and one :class:`~..retry.RetryPolicy`, whose timeout is ``read_timeout``.
This module imports torch only inside its functions: torch loads the entry point while
it imports its own rendezvous package.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch.distributed.elastic.rendezvous import RendezvousHandler, RendezvousParameters

    from .backend import EtcdV3Backend
    from .store import EtcdV3Store

__all__ = ["ATTEMPT_TIMEOUT", "create_backend", "create_handler", "entry_point", "is_transient"]

#: The longest one request to one member may take, in seconds (a hung member is left).
ATTEMPT_TIMEOUT = 10.0


def is_transient(error: Exception) -> bool:
    """Whether a call that failed with ``error`` may answer when run again."""
    from .errors import EtcdUnavailable

    return isinstance(error, EtcdUnavailable)


def create_backend(params: RendezvousParameters) -> tuple[EtcdV3Backend, EtcdV3Store]:
    """The backend and the store of one launcher for ``params``; nothing asked of etcd yet.

    Raises:
        ConfigurationError: a setting is invalid (named in the message).
    """
    from ..retry import RetryPolicy
    from .backend import EtcdV3Backend
    from .client import EtcdClient
    from .keys import RunKeys
    from .lease import RunLease
    from .settings import EtcdV3Settings
    from .store import EtcdV3Store

    settings = EtcdV3Settings.from_conf(params.endpoint, params.config, _environ())
    client = EtcdClient(
        settings.endpoints,
        attempt_timeout=min(settings.read_timeout, ATTEMPT_TIMEOUT),
        tls=settings.tls,
        protocol=settings.protocol,
        credentials=settings.credentials,
    )
    policy = RetryPolicy("etcd", settings.read_timeout, is_transient, lambda: client.member)
    keys = RunKeys(params.run_id)
    lease = RunLease(client, policy, keys.lease, settings.lease_ttl)
    return EtcdV3Backend(client, policy, keys, lease), EtcdV3Store(client, policy, keys, lease)


#: The etcd password taken out of this process's environment (:func:`_environ`).
_taken: dict[str, str] = {}


def _environ() -> dict[str, str]:
    """The environment, the etcd password taken out of ``os.environ`` for good: torchrun
    hands its environment to every training worker, which has no use for it."""
    from .settings import PASSWORD_ENV

    password = os.environ.pop(PASSWORD_ENV, None)
    if password is not None:
        _taken[PASSWORD_ENV] = password
    return {**os.environ, **_taken}


def create_handler(params: RendezvousParameters) -> RendezvousHandler:
    """torch's dynamic rendezvous handler over etcd v3 (the creator torch registers)."""
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import (
        create_handler as dynamic_handler,
    )

    backend, store = create_backend(params)
    return dynamic_handler(store, backend, params)


def entry_point() -> Callable[[RendezvousParameters], RendezvousHandler]:
    """The ``torchrun.handlers`` entry point ``etcd-v3``: returns :func:`create_handler`."""
    return create_handler
