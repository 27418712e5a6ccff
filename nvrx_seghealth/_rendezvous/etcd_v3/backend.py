"""torch's rendezvous state in etcd v3: :class:`EtcdV3Backend`.

The backend keeps the state torch's ``DynamicRendezvousHandler`` hands it under the
run's ``state`` key, and follows torch's ``RendezvousBackend`` contract:

- the token is the key's ``mod_revision``; ``set_state`` is one transaction that writes
  only if the key is still at that revision (absent, for no token), and otherwise
  returns the state and token as they are: one round trip in both cases;
- a token that is not a revision (another backend's) is stale: the current state comes
  back, nothing is written;
- the state is stored as :data:`FORMAT` (one byte) and torch's bytes compressed with
  zlib: a 1,000-node state is 12 KiB instead of 93. Any other value is
  ``RendezvousStateError``;
- every call runs through the launcher's retry policy: a guarded write whose answer was
  lost fails its compare when run again, and torch then reads the state it wrote;
- an etcd that stays unreachable past ``read_timeout``, or refuses (no space, no
  permission), is ``RendezvousConnectionError`` with the cause and the fix.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from contextlib import contextmanager

from torch.distributed.elastic.rendezvous import RendezvousConnectionError, RendezvousStateError
from torch.distributed.elastic.rendezvous.dynamic_rendezvous import RendezvousBackend, Token

from ..retry import RetryPolicy, Unreachable
from .client import EtcdClient
from .errors import EtcdRefused
from .keys import RunKeys
from .lease import RunLease
from .wire import Range, create_revision_is, get, mod_revision_is, put

__all__ = ["BACKEND_NAME", "FORMAT", "EtcdV3Backend"]

#: The backend's name, as torchrun's ``--rdzv-backend`` takes it.
BACKEND_NAME = "etcd-v3"
#: The first byte of a stored state: the format of what follows (zlib of torch's bytes).
FORMAT = b"\x01"


class EtcdV3Backend(RendezvousBackend):
    """The rendezvous state of one run in etcd v3; see the module documentation.

    Args:
        client: the launcher's etcd client.
        policy: the retry policy of the launcher's calls to etcd.
        keys: the run's keys.
        lease: the run's lease, which the state rides.
    """

    def __init__(
        self, client: EtcdClient, policy: RetryPolicy, keys: RunKeys, lease: RunLease
    ) -> None:
        self._client = client
        self._policy = policy
        self._keys = keys
        self._lease = lease

    @property
    def name(self) -> str:
        """See base class."""
        return BACKEND_NAME

    def close(self) -> None:
        """Close the launcher's etcd client, which its store shares (torch never does)."""
        self._client.close()

    def get_state(self) -> tuple[bytes, Token] | None:
        """See base class."""
        with _as_connection_error():
            found = self._policy.call("get_state", lambda: self._client.range(self._keys.state))
        return _state_of(found)

    def set_state(
        self, state: bytes, token: Token | None = None
    ) -> tuple[bytes, Token, bool] | None:
        """See base class."""
        key = self._keys.state
        if token is None:
            guard = create_revision_is(key, 0)
        else:
            try:
                guard = mod_revision_is(key, int(token))
            except (TypeError, ValueError):
                return self._current()
        value = FORMAT + zlib.compress(state)
        with _as_connection_error():
            result = self._lease.write(
                "set_state",
                lambda lease: self._client.txn([guard], [put(key, value, lease=lease)], [get(key)]),
            )
        if result.succeeded:
            return state, result.revision, True
        current = _state_of(result.ranges[0])
        return None if current is None else (*current, False)

    def _current(self) -> tuple[bytes, Token, bool] | None:
        current = self.get_state()
        return None if current is None else (*current, False)


def _state_of(found: Range | None) -> tuple[bytes, Token] | None:
    """The state and token a range of the state key holds; ``None`` when it is absent."""
    if found is None or not found.kvs:
        return None
    kv = found.kvs[0]
    if not kv.value.startswith(FORMAT):
        raise RendezvousStateError(
            f"the rendezvous state in etcd is not in this backend's format (first byte "
            f"{kv.value[:1]!r}); was the key written by another program?"
        )
    try:
        return zlib.decompress(kv.value[len(FORMAT) :]), kv.mod_revision
    except zlib.error as error:
        raise RendezvousStateError(f"the rendezvous state in etcd is corrupt: {error}") from error


@contextmanager
def _as_connection_error() -> Iterator[None]:
    """Raise what etcd left unanswered or refused as torch's ``RendezvousConnectionError``."""
    try:
        yield
    except (Unreachable, EtcdRefused) as error:
        raise RendezvousConnectionError(str(error)) from error
