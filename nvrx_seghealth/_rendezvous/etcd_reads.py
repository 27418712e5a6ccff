"""torch's etcd-v2 store, reading only the keys asked for: :class:`OneKeyEtcdStore`.

torch's ``EtcdStore`` answers ``check`` and ``get`` by reading its whole store directory,
which holds every key of every run and never expires: 1.1 MB at 5,000 keys
(BENCHMARKS.md, row 4). The watch looks once a second per launcher. The rules:

* ``check`` and ``get`` are one etcd ``GET`` of each key asked for, whatever else the
  directory holds. Writes are torch's own.
* The backend gives this store to the etcd-v2 rendezvous, so every store it hands out
  uses it: the round's ``PrefixStore``, whose prefix only the C++ side knows, too.
* :meth:`OneKeyEtcdStore.read_counter` reads an ``add`` counter without writing it;
  torch's ``add(key, 0)`` costs two raft proposals.
* Reads are etcd's default reads, as torch's own are: never behind a write made through
  the same member, possibly behind one made through another.
"""

from __future__ import annotations

from base64 import b64decode, b64encode

import etcd  # python-etcd: the backend imports this module only for etcd-v2, after checking
from torch.distributed import Store
from torch.distributed.elastic.rendezvous.etcd_store import EtcdStore
from typing_extensions import Self

__all__ = ["OneKeyEtcdStore"]


class OneKeyEtcdStore(EtcdStore):
    """torch's ``EtcdStore`` whose reads cost one etcd ``GET`` per key asked for.

    Args:
        etcd_client: the python-etcd client.
        etcd_store_prefix: the etcd directory of the store (torch's etcd-v2 backend:
            ``/torch/elastic/store``).
        timeout: how long ``get`` waits for a key not yet set (the store's default
            when ``None``).
    """

    @classmethod
    def of(cls, store: Store) -> Self:
        """The same store (client, directory and timeout) with one-key reads.

        Raises:
            TypeError: ``store`` is not torch's ``EtcdStore``.
        """
        if not isinstance(store, EtcdStore):
            raise TypeError(f"one-key reads need torch's EtcdStore, not {type(store).__name__}")
        timeout = store.timeout  # type: ignore[attr-defined]  # (not in torch's stub)
        return cls(store.client, store.prefix, timeout)

    def check(self, keys: list[str]) -> bool:
        """Whether every key in ``keys`` is set now (one ``GET`` per key, until one is not)."""
        return all(self._read(key) is not None for key in keys)

    def get(self, key: str) -> bytes:
        """The value of ``key``: one ``GET`` when it is set; otherwise torch's wait for it,
        at most the store's timeout.

        Raises:
            LookupError: ``key`` was not set within the timeout.
        """
        value = self._read(key)
        return super().get(key) if value is None else value

    def read_counter(self, key: str) -> int:
        """The value of the ``add`` counter ``key`` (``0`` when never added to); one
        ``GET``, nothing written."""
        value = self._read(key)
        return 0 if value is None else int(value)

    def _read(self, key: str) -> bytes | None:
        """The value of ``key``, ``None`` when it is not set: one ``GET`` of that key."""
        try:
            node = self.client.get(self.prefix + b64encode(key.encode()).decode())
        except etcd.EtcdKeyNotFound:
            return None
        return b64decode(node.value)
