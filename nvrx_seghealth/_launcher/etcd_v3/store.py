"""torch's ``Store`` in etcd v3, with TCPStore's semantics: :class:`EtcdV3Store`.

torchrun's agents meet in this store each round (``MASTER_ADDR``, the role infos, the
assigned ranks, the exit barrier), through the ``PrefixStore`` the handler wraps it in;
the check keeps its markers here. Its rules:

- every key is the run's ``store/<key>`` (:mod:`.keys`) and rides the run lease;
- ``get``, ``wait`` and ``multi_get`` block until their keys are set, at most the store's
  timeout (torch's, 300 s unless set), then raise ``DistStoreError`` as TCPStore does.
  They are woken by an etcd watch on each missing key, never by polling;
- ``add``, ``append`` and ``compare_set`` are transactions guarded by the key's revision.
  ``add`` and ``append`` count once even when an answer is lost (:meth:`_update_once`);
- ``check``, ``multi_get`` and ``multi_set`` batch their keys in transactions within
  etcd's limits (:data:`MAX_OPS` operations, :data:`MAX_BYTES` bytes);
- every call runs through the launcher's retry policy; an etcd that stays unreachable
  past ``read_timeout`` raises ``Unreachable``, and one that refuses ``EtcdRefused``.

torch's C++ ``PrefixStore`` reaches a Python store only by the C++ method names, so
``getNumKeys`` and ``deleteKey`` are defined beside ``num_keys`` and ``delete_key``.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import timedelta
from functools import partial
from typing import TypeVar

from torch.distributed import DistStoreError, Store

from ..._logfmt import format_fields
from ..retry import RetryPolicy
from .client import (
    EtcdClient,
    EtcdRefused,
    create_revision_is,
    get,
    mod_revision_is,
    prefix_end,
    put,
    value_is,
)
from .keys import RunKeys
from .lease import RunLease

__all__ = ["MAX_BYTES", "MAX_OPS", "WATCH_SLICE", "EtcdV3Store"]

log = logging.getLogger(__name__)

_T = TypeVar("_T")

#: Operations per transaction: etcd's default ``--max-txn-ops``.
MAX_OPS = 128
#: Bytes of keys and values per transaction, below etcd's 1.5 MiB ``--max-request-bytes``.
MAX_BYTES = 1 << 20
#: The longest single watch, in seconds: a member that hangs is left after this.
WATCH_SLICE = 10.0


def _as_bytes(value: bytes | str) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()


class EtcdV3Store(Store):
    """The store of one run in etcd v3; see the module documentation.

    Args:
        client: the launcher's etcd client.
        policy: the retry policy of the launcher's calls to etcd.
        keys: the run's keys.
        lease: the run's lease, which every key rides.
        timeout: how long ``get`` and ``wait`` wait (torch's store timeout).
    """

    def __init__(
        self,
        client: EtcdClient,
        policy: RetryPolicy,
        keys: RunKeys,
        lease: RunLease,
        timeout: timedelta = timedelta(seconds=300),
    ) -> None:
        super().__init__()
        self._client = client
        self._policy = policy
        self._keys = keys
        self._lease = lease
        self.set_timeout(timeout)

    def clone(self) -> EtcdV3Store:
        """The same store (client, run and timeout), as torch's stores clone."""
        timeout = self.timeout  # type: ignore[attr-defined]  # (not in torch's stub)
        return EtcdV3Store(self._client, self._policy, self._keys, self._lease, timeout)

    def close(self) -> None:
        """Close the launcher's etcd client, which its backend and clones share."""
        self._client.close()

    def has_extended_api(self) -> bool:
        """``append``, ``multi_get`` and ``multi_set`` are the store's own."""
        return True

    # -- writes -------------------------------------------------------------------------

    def set(self, key: str, value: bytes | str) -> None:
        """Set ``key`` to ``value``."""
        etcd_key, data = self._keys.store(key), _as_bytes(value)
        self._lease.write("set", lambda lease: self._client.put(etcd_key, data, lease=lease))

    def multi_set(self, keys: list[str], values: list[bytes | str]) -> None:
        """Set each key to its value, in as few transactions as etcd's limits allow."""
        pairs = [(self._keys.store(k), _as_bytes(v)) for k, v in zip(keys, values, strict=True)]
        for batch in _batches(pairs, lambda pair: len(pair[0]) + len(pair[1])):
            self._lease.write("multi_set", partial(self._set_all, batch))

    def _set_all(self, pairs: list[tuple[bytes, bytes]], lease: int) -> None:
        """Write every pair in one transaction, on ``lease``."""
        self._client.txn([], [put(key, value, lease=lease) for key, value in pairs])

    def add(self, key: str, amount: int) -> int:
        """Add ``amount`` to the counter ``key`` (absent: 0) and return its new value.

        ``add(key, 0)`` of a counter that exists writes nothing.
        """
        value = self._update_once(
            key, "add", lambda current: str(int(current or b"0") + amount).encode(), amount == 0
        )
        return int(value)

    def append(self, key: str, value: bytes | str) -> None:
        """Append ``value`` to ``key``'s value (absent: set it)."""
        data = _as_bytes(value)
        self._update_once(key, "append", lambda current: (current or b"") + data, False)

    def compare_set(
        self, key: str, expected_value: bytes | str, desired_value: bytes | str
    ) -> bytes:
        """TCPStore's compare-and-set: ``desired_value`` replaces the value if it is
        ``expected_value``, or if the key is absent and ``expected_value`` is empty.

        Returns:
            the value afterwards; ``expected_value`` when the key is absent and it is not
            empty (nothing written).
        """
        etcd_key = self._keys.store(key)
        expected, desired = _as_bytes(expected_value), _as_bytes(desired_value)

        def swap(lease: int) -> bytes:
            absent = create_revision_is(etcd_key, 0)
            if not expected:
                done = self._client.txn(
                    [absent], [put(etcd_key, desired, lease=lease)], [get(etcd_key)]
                )
                if done.succeeded:
                    return desired
            done = self._client.txn(
                [value_is(etcd_key, expected)],
                [put(etcd_key, desired, lease=lease)],
                [get(etcd_key)],
            )
            if done.succeeded:
                return desired
            current = done.ranges[0]
            return current.kvs[0].value if current and current.kvs else expected

        return self._lease.write("compare_set", swap)

    def delete_key(self, key: str) -> bool:
        """Delete ``key``; whether it was there."""
        etcd_key = self._keys.store(key)
        return self._policy.call("delete_key", lambda: self._client.delete(etcd_key)) > 0

    deleteKey = delete_key  # the name torch's C++ PrefixStore calls

    # -- reads --------------------------------------------------------------------------

    def get(self, key: str) -> bytes:
        """The value of ``key``, once it is set (at most the store's timeout).

        Raises:
            DistStoreError: ``key`` was not set within the timeout.
        """
        return self._wait_for(self._keys.store(key), key, self._deadline(None))

    def check(self, keys: list[str]) -> bool:
        """Whether every key in ``keys`` is set now."""
        return not self._absent(keys)[0]

    def wait(self, keys: list[str], timeout: timedelta | None = None) -> None:
        """Return once every key in ``keys`` is set (at most ``timeout``, else the store's).

        Raises:
            DistStoreError: a key was not set within the timeout.
        """
        deadline = self._deadline(timeout)
        for key in self._absent(keys)[0]:
            self._wait_for(self._keys.store(key), key, deadline)

    def multi_get(self, keys: list[str]) -> list[bytes]:
        """The values of ``keys``, once all are set (at most the store's timeout)."""
        deadline = self._deadline(None)
        while True:
            absent, values = self._absent(keys)
            if not absent:
                return [values[key] for key in keys]
            for key in absent:
                self._wait_for(self._keys.store(key), key, deadline)

    def num_keys(self) -> int:
        """How many keys the store holds (one counted range)."""
        start = self._keys.store_prefix
        found = self._policy.call(
            "num_keys", lambda: self._client.range(start, prefix_end(start), count_only=True)
        )
        return found.count

    getNumKeys = num_keys  # the name torch's C++ PrefixStore calls

    def read_counter(self, key: str) -> int:
        """The ``add`` counter ``key`` (``0`` when never added to); one read, no write."""
        etcd_key = self._keys.store(key)
        found = self._policy.call("read_counter", lambda: self._client.range(etcd_key))
        return int(found.kvs[0].value) if found.kvs else 0

    # -- the parts ----------------------------------------------------------------------

    def _deadline(self, timeout: timedelta | None) -> float:
        store_timeout: timedelta = self.timeout  # type: ignore[attr-defined]  # (not in torch's stub)
        seconds = (timeout if timeout is not None else store_timeout).total_seconds()
        return time.monotonic() + seconds

    def _absent(self, keys: Sequence[str]) -> tuple[list[str], dict[str, bytes]]:
        """The keys of ``keys`` not set now, and the values of the others."""
        values: dict[str, bytes] = {}
        for batch in _batches(list(keys), lambda key: len(key)):
            ops = [get(self._keys.store(key)) for key in batch]
            result = self._policy.call("check", partial(self._client.txn, [], ops))
            for key, found in zip(batch, result.ranges, strict=True):
                if found is not None and found.kvs:
                    values[key] = found.kvs[0].value
        return [key for key in keys if key not in values], values

    def _wait_for(self, etcd_key: bytes, key: str, deadline: float) -> bytes:
        """The value of ``etcd_key`` once set: a read, then watches from that read on
        (read again when etcd compacted the revision a watch starts from)."""
        while True:
            found = self._policy.call("get", lambda: self._client.range(etcd_key))
            if found.kvs:
                return found.kvs[0].value
            start = found.revision + 1
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise DistStoreError(f"the key {key!r} was not set within the store's timeout")
                try:
                    watch = partial(
                        self._client.watch, etcd_key, start, min(remaining, WATCH_SLICE)
                    )
                    events = self._policy.call("wait", watch)
                except EtcdRefused as refused:
                    if refused.cause != "compacted":
                        raise
                    break
                for event in events:
                    if event.kind == "put":
                        return event.kv.value
                    start = event.kv.mod_revision + 1

    def _update_once(
        self, key: str, what: str, update: Callable[[bytes | None], bytes], read_only: bool
    ) -> bytes:
        """Write ``update(value)`` over ``key``'s value (``None``: absent) exactly once.

        Each attempt is a transaction guarded by the revision it read, which also writes a
        random tag under the key's ``adds/`` key. An attempt whose answer was lost is
        settled before the next: if the tag key's history since the read holds its tag, it
        landed and its value is the answer (:meth:`_landed`). Since each attempt compares
        the revision it read, of two attempts from one read at most one lands.

        With ``read_only`` a key that exists is only read (``add(key, 0)``).
        """
        etcd_key, tag_key = self._keys.store(key), self._keys.add_tag(key)
        lost: list[tuple[bytes, bytes]] = []  # (tag, value) of attempts whose answer was lost
        since = 0  # the revision read before the first lost attempt

        def attempt(lease: int) -> bytes:
            nonlocal since
            while True:
                if lost:
                    landed = self._landed(tag_key, since, lost, key)
                    if landed is not None:
                        return landed
                found = self._client.range(etcd_key)
                if found.kvs:
                    current: bytes | None = found.kvs[0].value
                    if read_only:
                        return found.kvs[0].value
                    guard = mod_revision_is(etcd_key, found.kvs[0].mod_revision)
                else:
                    current, guard = None, create_revision_is(etcd_key, 0)
                value, tag = update(current), os.urandom(12).hex().encode()
                if not lost:
                    since = found.revision
                lost.append((tag, value))
                result = self._client.txn(
                    [guard], [put(etcd_key, value, lease=lease), put(tag_key, tag, lease=lease)]
                )
                lost.pop()  # answered: it landed or not, as it says
                if result.succeeded:
                    return value

        return self._lease.write(what, attempt)

    def _landed(
        self, tag_key: bytes, since: int, lost: list[tuple[bytes, bytes]], key: str
    ) -> bytes | None:
        """The value of the lost attempt that landed after revision ``since``, if one did."""
        values = dict(lost)
        found = self._client.range(tag_key)
        if not found.kvs or found.kvs[0].mod_revision <= since:
            return None
        newest = found.kvs[0].mod_revision
        start = since + 1
        try:
            while start <= newest:
                for event in self._client.watch(tag_key, start, WATCH_SLICE):
                    if event.kind == "put" and event.kv.value in values:
                        return values[event.kv.value]
                    start = event.kv.mod_revision + 1
        except EtcdRefused as refused:
            if refused.cause != "compacted":
                raise
            log.warning(
                "etcd compacted the history that tells whether a lost write landed; "
                "counting it as landed (once, never twice): %s",
                format_fields({"key": key, "since": since}),
            )
            return lost[-1][1]
        return None


def _batches(items: list[_T], size: Callable[[_T], int]) -> Iterator[list[_T]]:
    """``items`` in consecutive batches of at most :data:`MAX_OPS` items and
    :data:`MAX_BYTES` bytes (one larger item alone)."""
    batch: list[_T] = []
    total = 0
    for item in items:
        weight = size(item)
        if batch and (len(batch) == MAX_OPS or total + weight > MAX_BYTES):
            yield batch
            batch, total = [], 0
        batch.append(item)
        total += weight
    if batch:
        yield batch
