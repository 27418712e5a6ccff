"""torch's ``Store`` in etcd v3, with TCPStore's semantics: :class:`EtcdV3Store`.

torchrun's agents meet in this store each round (``MASTER_ADDR``, the role infos, the
assigned ranks, the exit barrier), through the ``PrefixStore`` the handler wraps it in;
the check keeps its markers here. Its rules:

- every key is the run's ``store/<key>`` (:mod:`.keys`) and rides the run lease;
- ``get``, ``wait`` and ``multi_get`` block until their keys are set, at most the store's
  timeout (torch's, 300 s unless set), then raise ``DistStoreError`` as TCPStore does.
  They are woken by an etcd watch on each missing key, never by polling;
- ``add``, ``append``, ``delete_key`` and ``compare_set`` are transactions guarded by
  the key's revision. The first three take effect once and answer the truth, whatever
  the order of a lost answer, a late commit and a retry (:meth:`_write_once`);
- ``check``, ``multi_get`` and ``multi_set`` batch their keys in transactions within
  etcd's limits (:data:`MAX_OPS` operations, :data:`MAX_BYTES` bytes);
- every call runs through the launcher's retry policy, within the caller's deadline:
  a wait's timeout, else torch's store timeout and ``read_timeout`` from its start,
  attempts included. Past torch's deadline it raises ``DistStoreError``; an etcd
  silent for ``read_timeout`` before that ``Unreachable``; one that refuses
  ``EtcdRefused``.

torch's C++ ``PrefixStore`` reaches a Python store only by the C++ method names, so
``getNumKeys`` and ``deleteKey`` are defined beside ``num_keys`` and ``delete_key``.

One module, over the package's 400 lines: torch's whole store contract in one class.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta
from functools import partial
from typing import Concatenate, ParamSpec, TypeVar

from torch.distributed import DistStoreError, Store

from ..retry import RetryPolicy, Unreachable, deadline_scope
from .client import EtcdClient
from .errors import EtcdRefused
from .keys import RunKeys
from .lease import RunLease
from .wire import (
    Op,
    Range,
    create_revision_is,
    delete,
    get,
    mod_revision_is,
    prefix_end,
    put,
    value_is,
)

__all__ = ["MAX_BYTES", "MAX_OPS", "WATCH_SLICE", "EtcdV3Store"]

log = logging.getLogger(__name__)

_T = TypeVar("_T")
_P = ParamSpec("_P")

#: Operations per transaction: etcd's default ``--max-txn-ops``.
MAX_OPS = 128
#: Bytes of keys and values per transaction, below etcd's 1.5 MiB ``--max-request-bytes``.
MAX_BYTES = 1 << 20
#: The longest single watch, in seconds: a member that hangs is left after this.
WATCH_SLICE = 10.0


def _as_bytes(value: bytes | str) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()


def _bounded(
    method: Callable[Concatenate[EtcdV3Store, _P], _T],
) -> Callable[Concatenate[EtcdV3Store, _P], _T]:
    """``method``, its etcd calls ending by torch's store timeout and ``read_timeout``."""

    @functools.wraps(method)
    def bounded(self: EtcdV3Store, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        with self._within(method.__name__):
            return method(self, *args, **kwargs)

    return bounded


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
        self._writer = os.urandom(8).hex()  # names this store's writer keys
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

    @_bounded
    def set(self, key: str, value: bytes | str) -> None:
        """Set ``key`` to ``value``."""
        etcd_key, data = self._keys.store(key), _as_bytes(value)
        self._lease.write("set", lambda lease: self._client.put(etcd_key, data, lease=lease))

    @_bounded
    def multi_set(self, keys: list[str], values: list[bytes | str]) -> None:
        """Set each key to its value, in as few transactions as etcd's limits allow."""
        pairs = [(self._keys.store(k), _as_bytes(v)) for k, v in zip(keys, values, strict=True)]
        for batch in _batches(pairs, lambda pair: len(pair[0]) + len(pair[1])):
            self._lease.write("multi_set", partial(self._set_all, batch))

    def _set_all(self, pairs: list[tuple[bytes, bytes]], lease: int) -> None:
        """Write every pair in one transaction, on ``lease``."""
        self._client.txn([], [put(key, value, lease=lease) for key, value in pairs])

    @_bounded
    def add(self, key: str, amount: int) -> int:
        """Add ``amount`` to the counter ``key`` (absent: 0) and return its new value.

        ``add(key, 0)`` of a counter that exists writes nothing.
        """
        etcd_key = self._keys.store(key)

        def plan(found: Range, lease: int) -> tuple[list[Op] | None, bytes]:
            current = found.kvs[0].value if found.kvs else None
            if current is not None and amount == 0:
                return None, current
            value = str(int(current or b"0") + amount).encode()
            return [put(etcd_key, value, lease=lease)], value

        return int(self._write_once("add", etcd_key, plan))

    @_bounded
    def append(self, key: str, value: bytes | str) -> None:
        """Append ``value`` to ``key``'s value (absent: set it)."""
        etcd_key, data = self._keys.store(key), _as_bytes(value)

        def plan(found: Range, lease: int) -> tuple[list[Op] | None, None]:
            current = found.kvs[0].value if found.kvs else b""
            return [put(etcd_key, current + data, lease=lease)], None

        self._write_once("append", etcd_key, plan)

    @_bounded
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

    @_bounded
    def delete_key(self, key: str) -> bool:
        """Delete ``key``; whether it was there (also when the answer was lost)."""
        etcd_key = self._keys.store(key)

        def plan(found: Range, lease: int) -> tuple[list[Op] | None, bool]:
            return ([delete(etcd_key)], True) if found.kvs else (None, False)

        return self._write_once("delete_key", etcd_key, plan)

    deleteKey = delete_key  # the name torch's C++ PrefixStore calls

    # -- reads --------------------------------------------------------------------------

    def get(self, key: str) -> bytes:
        """The value of ``key``, once it is set (at most the store's timeout).

        Raises:
            DistStoreError: ``key`` was not set within the timeout.
        """
        deadline = self._deadline(None)
        with self._within("get", deadline):
            return self._wait_for(self._keys.store(key), key, deadline)

    @_bounded
    def check(self, keys: list[str]) -> bool:
        """Whether every key in ``keys`` is set now."""
        return not self._absent(keys)[0]

    def wait(self, keys: list[str], timeout: timedelta | None = None) -> None:
        """Return once every key in ``keys`` is set (at most ``timeout``, else the store's).

        Raises:
            DistStoreError: a key was not set within the timeout.
        """
        deadline = self._deadline(timeout)
        with self._within("wait", deadline):
            for key in self._absent(keys)[0]:
                self._wait_for(self._keys.store(key), key, deadline)

    def multi_get(self, keys: list[str]) -> list[bytes]:
        """The values of ``keys``, once all are set (at most the store's timeout)."""
        deadline = self._deadline(None)
        with self._within("multi_get", deadline):
            while True:
                absent, values = self._absent(keys)
                if not absent:
                    return [values[key] for key in keys]
                for key in absent:
                    self._wait_for(self._keys.store(key), key, deadline)

    @_bounded
    def num_keys(self) -> int:
        """How many keys the store holds (one counted range)."""
        start = self._keys.store_prefix
        found = self._policy.call(
            "num_keys", lambda: self._client.range(start, prefix_end(start), count_only=True)
        )
        return found.count

    getNumKeys = num_keys  # the name torch's C++ PrefixStore calls

    @_bounded
    def read_counter(self, key: str) -> int:
        """The ``add`` counter ``key`` (``0`` when never added to); one read, no write."""
        etcd_key = self._keys.store(key)
        found = self._policy.call("read_counter", lambda: self._client.range(etcd_key))
        return int(found.kvs[0].value) if found.kvs else 0

    # -- the parts ----------------------------------------------------------------------

    @contextmanager
    def _within(self, what: str, deadline: float | None = None) -> Iterator[None]:
        """The block's etcd calls end by ``deadline`` (a wait's), or else by torch's store
        timeout and ``read_timeout`` from now, attempts included. Past the store's own
        deadline, etcd's silence is torch's ``DistStoreError``."""
        store_end = deadline if deadline is not None else self._deadline(None)
        end = store_end if deadline is not None else time.monotonic() + self._policy.timeout
        try:
            with deadline_scope(min(end, store_end)):
                yield
        except Unreachable as error:
            if time.monotonic() < store_end:
                raise
            raise DistStoreError(
                f"etcd did not answer {what} within the store's timeout: {error}"
            ) from error

    def _deadline(self, timeout: timedelta | None) -> float:
        store_timeout: timedelta = self.timeout  # type: ignore[attr-defined]  # (not in torch's stub)
        seconds = (timeout if timeout is not None else store_timeout).total_seconds()
        return time.monotonic() + seconds

    def _absent(self, keys: Sequence[str]) -> tuple[list[str], dict[str, bytes]]:
        """The keys of ``keys`` not set now, and the values of the others."""
        values: dict[str, bytes] = {}
        for batch in _batches(list(keys), lambda key: len(key)):
            ops = [get(self._keys.store(key)) for key in batch]
            try:
                ranges = self._policy.call("check", partial(self._client.txn, [], ops)).ranges
            except EtcdRefused as refused:  # NOSPACE refuses a txn, also one that reads
                if refused.cause != "nospace":
                    raise
                ranges = tuple(self._read(key) for key in batch)
            for key, found in zip(batch, ranges, strict=True):
                if found is not None and found.kvs:
                    values[key] = found.kvs[0].value
        return [key for key in keys if key not in values], values

    def _read(self, key: str) -> Range:
        return self._policy.call("check", partial(self._client.range, self._keys.store(key)))

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
                    events = self._policy.call("wait", watch, bounded=False)
                except EtcdRefused as refused:
                    if refused.cause != "compacted":
                        raise
                    break
                for event in events:
                    if event.kind == "put":
                        return event.kv.value
                    start = event.kv.mod_revision + 1

    def _write_once(
        self, what: str, etcd_key: bytes, plan: Callable[[Range, int], tuple[list[Op] | None, _T]]
    ) -> _T:
        """Write ``plan``'s ops over ``etcd_key`` exactly once, and answer its result.

        ``plan(read, lease)`` gives the ops to write over what ``read`` found, and the
        call's result if they land; no ops (``None``): answer the result at once.
        Each attempt reads the key and this thread's writer key (:meth:`.RunKeys.writer`)
        in one transaction. It then writes the ops and a new tag to the writer key,
        guarded on both revisions it read. An attempt whose answer was lost stays
        pending:

        - the writer key holding its tag means it landed: its result is the answer;
        - otherwise it has not landed yet, and every later attempt is guarded on the
          writer key as read then: at most one attempt ever lands.

        No history is read: a compaction cannot make it guess.
        """
        writer = self._keys.writer(f"{self._writer}-{threading.get_ident():x}")
        pending: dict[bytes, _T] = {}  # tag -> result, of attempts whose answer was lost

        def attempt(lease: int) -> _T:
            while True:
                found, mine = self._client.txn([], [get(etcd_key), get(writer)]).ranges
                assert found is not None and mine is not None  # two range ops
                if mine.kvs and mine.kvs[0].value in pending:
                    return pending[mine.kvs[0].value]
                ops, result = plan(found, lease)
                if ops is None:
                    return result
                guard = [
                    mod_revision_is(etcd_key, found.kvs[0].mod_revision)
                    if found.kvs
                    else create_revision_is(etcd_key, 0),
                    mod_revision_is(writer, mine.kvs[0].mod_revision if mine.kvs else 0),
                ]
                tag = os.urandom(12).hex().encode()
                pending[tag] = result
                done = self._client.txn(guard, [*ops, put(writer, tag, lease=lease)])
                del pending[tag]  # answered: it landed or not, as it says
                if done.succeeded:
                    return result

        return self._lease.write(what, attempt)


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
