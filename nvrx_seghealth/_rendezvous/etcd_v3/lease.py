"""The lease every key of a run rides: :class:`RunLease`.

etcd v3 has no time-to-live refreshed by writes (v2 had); a key lives until deleted or
until its lease expires. A run's keys ride one lease, so that nothing of a finished run
stays in etcd: ``lease_ttl`` seconds after its last launcher stops, etcd deletes them all.

- The first launcher to need it grants the lease and publishes its id under the run's
  ``lease`` key, guarded so that one launcher's lease wins; the others revoke theirs.
- Every launcher keeps it alive: a write that finds a third of the TTL gone since this
  launcher's last refresh refreshes it first. torch's keep-alive rewrites the state every
  few seconds while the world trains, so a live run never lets its lease lapse.
- A lease that expired anyway (every launcher stopped, or etcd lost it) is replaced on
  the next write; a write refused with ``lease-not-found`` runs once more on the new one.
- A grant whose answer was lost leaves a lease nobody uses; it expires after its TTL.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from functools import partial
from typing import TypeVar

from ..retry import RetryPolicy
from .client import EtcdClient
from .errors import EtcdRefused
from .wire import Compare, create_revision_is, get, mod_revision_is, put

__all__ = ["RunLease"]

_T = TypeVar("_T")


class RunLease:
    """The run's lease, as one launcher sees it; thread-safe.

    Args:
        client: the launcher's etcd client.
        policy: the retry policy of the launcher's calls to etcd.
        key: the key holding the lease's id (:attr:`.keys.RunKeys.lease`).
        ttl: the lease's time to live, in seconds (> 0).
    """

    def __init__(self, client: EtcdClient, policy: RetryPolicy, key: bytes, ttl: int) -> None:
        self._client = client
        self._policy = policy
        self._key = key
        self.ttl = ttl
        self._lock = threading.Lock()
        self._id = 0  # 0: not known yet, or found gone
        self._refreshed = 0.0

    def write(self, what: str, operation: Callable[[int], _T]) -> _T:
        """``operation(lease id)`` through the retry policy, on a live run lease.

        A write refused because the lease is gone runs once more on a new one.
        """
        lease = self.current()
        try:
            return self._policy.call(what, lambda: operation(lease))
        except EtcdRefused as refused:
            if refused.cause != "lease-not-found":
                raise
            self._forget(lease)
            lease = self.current()
            return self._policy.call(what, lambda: operation(lease))

    def current(self) -> int:
        """The run lease's id, found or granted on first use, refreshed when a third of
        its TTL has passed since this launcher last did."""
        with self._lock:
            now = time.monotonic()
            if self._id and now - self._refreshed < self.ttl / 3:
                return self._id
            if self._id and self._keep_alive(self._id):
                self._refreshed = now
                return self._id
            self._id = self._establish()
            self._refreshed = now
            return self._id

    def _forget(self, lease: int) -> None:
        with self._lock:
            if self._id == lease:
                self._id = 0

    def _keep_alive(self, lease: int) -> bool:
        """Whether ``lease`` is alive (its TTL is then renewed)."""
        return (
            self._policy.call("keep the run lease alive", lambda: self._client.keep_alive(lease))
            > 0
        )

    def _establish(self) -> int:
        """The id of the run's live lease, or of a new one this launcher published."""
        while True:
            found = self._policy.call("read the run lease", lambda: self._client.range(self._key))
            if found.kvs:
                published = found.kvs[0]
                if self._keep_alive(int(published.value)):
                    return int(published.value)
                guard = mod_revision_is(self._key, published.mod_revision)
            else:
                guard = create_revision_is(self._key, 0)
            granted = self._policy.call(
                "grant the run lease", partial(self._client.grant, self.ttl)
            )
            if self._publish(guard, granted):
                return granted
            self._policy.call("revoke a lease not used", partial(self._client.revoke, granted))

    def _publish(self, guard: Compare, granted: int) -> bool:
        """Whether ``granted`` became the run's lease (guarded by ``guard``)."""
        value = str(granted).encode()
        publish = partial(
            self._client.txn, [guard], [put(self._key, value, lease=granted)], [get(self._key)]
        )
        result = self._policy.call("publish the run lease", publish)
        if result.succeeded:
            return True
        current = result.ranges[0]
        # this launcher's publication that landed, its answer lost: the key holds its value
        return current is not None and bool(current.kvs) and current.kvs[0].value == value
