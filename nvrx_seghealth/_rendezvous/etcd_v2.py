"""torch's etcd-v2 rendezvous through an etcd leader election: :func:`election_safe`.

While etcd elects a leader, a follower answers a write with an error, and a dead member
drops the requests it held. torch's backend would turn either into an exit. Here every
call of the backend and its store goes through one :class:`~.retry.RetryPolicy` per
launcher, and is made safe to run again:

- reads are run again as they are;
- torch's state writes are guarded: a lost write that landed fails its next compare;
- ``set`` writes again unless the key holds its value already;
- ``add`` settles whether its lost writes landed before each new write (:class:`_Add`):
  it counts once whatever the order of a late commit and a retry.

The client sends each request once: python-etcd's failover and urllib3's resends are off.
A member that does not answer moves the client to the next one (:class:`EtcdConnection`).
What stays open on the v2 API, and what an election costs: docs/cluster.md.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import etcd  # python-etcd: the backend imports this module only for etcd-v2, after checking
import urllib3  # type: ignore[import-untyped]
from torch.distributed import Store
from torch.distributed.elastic.rendezvous import RendezvousConnectionError
from torch.distributed.elastic.rendezvous.dynamic_rendezvous import RendezvousBackend, Token
from torch.distributed.elastic.rendezvous.etcd_store import EtcdStore, cas_delay

from .._errors import SegmentHealthError
from .etcd_reads import OneKeyEtcdStore
from .retry import RetryPolicy, Unreachable

if TYPE_CHECKING:
    from torch.distributed.elastic.rendezvous.etcd_rendezvous_backend import (
        EtcdRendezvousBackend,
    )

__all__ = [
    "AddUnsettled",
    "ElectionSafeEtcdBackend",
    "ElectionSafeEtcdStore",
    "EtcdConnection",
    "election_safe",
    "is_transient",
]

log = logging.getLogger(__name__)

_T = TypeVar("_T")

#: etcd-v2's error code of a raft proposal that failed (a timeout, a leader change).
RAFT_INTERNAL = 300
#: Whitespace characters after the count in each ``add``'s write (see :class:`_Add`).
TAG_LENGTH = 16
_WHITESPACE = " \t\n\r\x0b\x0c"


def is_transient(error: Exception) -> bool:
    """Whether a call that failed with ``error`` may answer when run again: etcd's raft
    errors and any 5xx answer, a leader election, a member that did not answer."""
    if isinstance(error, RendezvousConnectionError):  # torch's, with python-etcd's cause
        cause = error.__cause__
        return isinstance(cause, Exception) and is_transient(cause)
    if isinstance(error, etcd.EtcdWatchTimedOut):  # a wait that ran out: an answer
        return False
    if isinstance(error, (etcd.EtcdConnectionFailed, etcd.EtcdLeaderElectionInProgress)):
        return True
    if type(error) is etcd.EtcdException:  # an answer python-etcd has no class for
        payload = getattr(error, "payload", None)
        payload = payload if isinstance(payload, dict) else {}
        status = payload.get("status")
        return payload.get("errorCode") == RAFT_INTERNAL or (
            isinstance(status, int) and status >= 500
        )
    return isinstance(error, (urllib3.exceptions.HTTPError, OSError))


def _connection_failed(error: Exception) -> bool:
    """Whether ``error`` says the member did not answer at all."""
    if isinstance(error, RendezvousConnectionError):
        error = error.__cause__ if isinstance(error.__cause__, Exception) else error
    return isinstance(error, etcd.EtcdConnectionFailed) and not isinstance(
        error, etcd.EtcdWatchTimedOut
    )


class EtcdConnection:
    """One launcher's python-etcd client, sending each request once, and its retry policy.

    A resent compare-and-swap that landed the first time would fail its compare and look
    like another launcher's write, so python-etcd's failover and urllib3's resends are off.

    The client's members are those it learned at start (torch builds it with
    ``allow_reconnect=True``, which asks the named member for the others).
    """

    def __init__(self, client: Any) -> None:
        self.client = client
        # python-etcd 0.4.5 (its last release) keeps these in private attributes.
        self.members: list[str] = [client.base_uri, *client._machines_cache]
        client._allow_reconnect = False
        client._machines_cache = []
        settings = {**client.http.connection_pool_kw, "retries": False}
        client.http = urllib3.PoolManager(num_pools=10, **settings)
        self.policy = RetryPolicy("etcd", client.read_timeout, is_transient, self.member)

    def member(self) -> str:
        """The member the client asks now."""
        return str(self.client.base_uri)

    def call(self, what: str, operation: Callable[[], _T], *, bounded: bool = True) -> _T:
        """``operation()`` under the policy; a member that does not answer is left for
        the next one. ``bounded``: see :meth:`.RetryPolicy.call` (False for a wait)."""
        return self.policy.call(what, lambda: self._attempt(operation), bounded=bounded)

    def _attempt(self, operation: Callable[[], _T]) -> _T:
        try:
            return operation()
        except Exception as error:
            if _connection_failed(error):
                error.member = self.member()  # type: ignore[attr-defined]  # the one that failed
                at = self.members.index(self.member()) if self.member() in self.members else -1
                self.client._base_uri = self.members[(at + 1) % len(self.members)]
            raise


class ElectionSafeEtcdBackend(RendezvousBackend):
    """torch's etcd-v2 rendezvous backend, its calls run again through an election."""

    def __init__(self, inner: EtcdRendezvousBackend, connection: EtcdConnection) -> None:
        self._inner = inner
        self._connection = connection

    @property
    def name(self) -> str:
        """See base class (``etcd-v2``)."""
        return self._inner.name

    def get_state(self) -> tuple[bytes, Token] | None:
        """See base class."""
        return self._call("get_state", self._inner.get_state)

    def set_state(
        self, state: bytes, token: Token | None = None
    ) -> tuple[bytes, Token, bool] | None:
        """See base class: torch's write is guarded (``prevIndex``, or ``prevExist`` for
        the first), so running it again is safe: a lost write that landed fails its
        compare, and torch returns the state as it is, which holds that write."""
        return self._call("set_state", lambda: self._inner.set_state(state, token))

    def _call(self, what: str, operation: Callable[[], _T]) -> _T:
        try:
            return self._connection.call(what, operation)
        except Unreachable as error:
            raise RendezvousConnectionError(str(error)) from error


class ElectionSafeEtcdStore(OneKeyEtcdStore):
    """The backend's store (:class:`~.etcd_reads.OneKeyEtcdStore`), its calls run again
    through an election, its ``add`` counting once.

    Raises (every call): :class:`~.retry.Unreachable` when etcd did not answer within
    the client's ``read_timeout``.
    """

    _connection: EtcdConnection

    def set(self, key: str, value: str | bytes) -> None:
        """Write ``value`` to ``key``; after a lost answer, again unless it is there.

        A value another launcher wrote in between is then overwritten: torch's keys have
        one writer each."""
        path, encoded = self.prefix + self._encode(key), self._encode(value)
        sent = False

        def attempt() -> None:
            nonlocal sent
            if sent and self._raw(path) == encoded:
                return
            sent = True
            self.client.set(path, encoded)

        self._connection.call("set", attempt)

    def get(self, key: str) -> bytes:
        """See :meth:`OneKeyEtcdStore.get`."""
        return self._connection.call("get", lambda: OneKeyEtcdStore.get(self, key), bounded=False)

    def check(self, keys: list[str]) -> bool:
        """See :meth:`OneKeyEtcdStore.check`."""
        return self._connection.call("check", lambda: OneKeyEtcdStore.check(self, keys))

    def wait(self, keys: list[str], *args: Any) -> None:
        """See torch's ``EtcdStore.wait``."""
        self._connection.call("wait", lambda: EtcdStore.wait(self, keys, *args), bounded=False)

    def read_counter(self, key: str) -> int:
        """See :meth:`OneKeyEtcdStore.read_counter`."""
        return self._connection.call("read", lambda: OneKeyEtcdStore.read_counter(self, key))

    def add(self, key: str, num: int) -> int:
        """Add ``num`` to the counter ``key`` (``0`` when absent); its new value.

        Counts once also when an answer is lost (:class:`_Add`).
        """
        return self._connection.call("add", _Add(self, self.prefix + self._encode(key), num))

    def _raw(self, path: str) -> str | None:
        """The value of ``path`` as etcd holds it (base64), ``None`` when absent."""
        try:
            return str(self.client.get(path).value)
        except etcd.EtcdKeyNotFound:
            return None


class AddUnsettled(SegmentHealthError, RuntimeError):
    """An ``add`` whose answer was lost cannot tell whether it landed: etcd's v2 history
    no longer holds the write after its guard. Nothing was counted twice or guessed."""


class _Add:
    """One ``add``: a compare-and-swap on the counter's ``modifiedIndex``, whose lost
    answers are settled before each new write. Called once per attempt.

    Each write is the new count followed by a random tag of :data:`TAG_LENGTH`
    whitespace characters, which ``int()`` ignores: two adds of the same amount from
    the same count write different values. Every write whose answer was lost stays
    pending until settled, at each read of the counter:

    - the counter holds its value: it landed, and its count is the answer;
    - the counter is still at the index it was guarded on: it has not landed yet. The
      next write is guarded on that index too, so at most one of them ever lands;
    - the counter moved on: the first write after its guard (etcd's history) is it, or
      it never lands.

    etcd's v2 history holds its last 1,000 events. A write still pending past that
    cannot be settled: the ``add`` raises :class:`AddUnsettled`, never guessing.
    """

    def __init__(self, store: ElectionSafeEtcdStore, path: str, num: int) -> None:
        self._store = store
        self._path = path
        self._num = num
        # (the index the write was guarded on, the value it wrote, the count) of each
        # write whose answer was lost and that is not settled yet
        self._pending: list[tuple[int, str, int]] = []

    def __call__(self) -> int:
        client, store = self._store.client, self._store
        while True:
            try:
                node = client.read(self._path, quorum=True)
            except etcd.EtcdKeyNotFound as absent:  # guarded on the etcd index then
                base, current, exists = int(absent.payload["index"]), None, False
            else:
                base, current, exists = int(node.modifiedIndex), str(node.value), True
            landed = self._settle(base, current)
            if landed is not None:
                return landed
            new = (int(store._decode(current)) if current is not None else 0) + self._num
            tag = "".join(random.choice(_WHITESPACE) for _ in range(TAG_LENGTH))
            written = store._encode(f"{new}{tag}")
            guard = {"prevIndex": base} if exists else {"prevExist": False}
            self._pending.append((base, written, new))
            try:
                client.write(self._path, written, **guard)
            except (etcd.EtcdCompareFailed, etcd.EtcdAlreadyExist):  # refused: not written
                self._pending.pop()
                cas_delay()
                continue
            self._pending.pop()
            return new

    def _settle(self, index: int, current: str | None) -> int | None:
        """The count of the pending write that landed, if one did; drops those that
        never will. ``index`` and ``current``: the counter as read now."""
        for sent in list(self._pending):
            base, written, count = sent
            if current == written:
                return count
            if base == index or current is None:
                continue  # not landed yet: the next write is guarded on this index too
            try:
                event = self._store.client.read(self._path, wait=True, waitIndex=base + 1)
            except etcd.EtcdEventIndexCleared:
                raise AddUnsettled(
                    f"etcd's history no longer holds the write after index {base} of the "
                    f"counter {self._path}, so an add whose answer was lost cannot tell "
                    "whether it landed; it counts nothing rather than guess"
                ) from None
            if event.value == written:
                return count
            self._pending.remove(sent)  # another write passed its guard: it never lands
        return None


def election_safe(
    backend: RendezvousBackend, store: Store
) -> tuple[ElectionSafeEtcdBackend, ElectionSafeEtcdStore]:
    """torch's etcd-v2 ``backend`` and ``store`` (one client) as they run through an
    election: each call retried, each write safe to send again.

    Raises:
        TypeError: ``backend`` or ``store`` is not torch's etcd-v2 one.
    """
    from torch.distributed.elastic.rendezvous.etcd_rendezvous_backend import (
        EtcdRendezvousBackend,
    )

    if not isinstance(backend, EtcdRendezvousBackend):
        raise TypeError(f"needs torch's EtcdRendezvousBackend, not {type(backend).__name__}")
    safe = ElectionSafeEtcdStore.of(store)
    safe._connection = EtcdConnection(safe.client)
    return ElectionSafeEtcdBackend(backend, safe._connection), safe
