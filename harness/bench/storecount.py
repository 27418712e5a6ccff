"""A store that counts what passes through it: a real ``torch.distributed.Store`` subclass.

:class:`harness.rendezvous.CountingStore` is a proxy; torch's ``PrefixStore`` refuses it.
:class:`CountedStore` subclasses ``Store``, so it goes under a ``PrefixStore`` and into
every handler. It counts each call by name and the payload bytes moved: keys and values
sent, values received. A TCPStore ``get`` is one call here (two requests on the wire).
Several stores may share one :class:`Tally` (a launcher's two clients).
"""

from __future__ import annotations

import datetime
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from torch.distributed import Store, TCPStore

__all__ = ["CountedStore", "Tally"]


def _size(value: Any) -> int:
    return len(value) if isinstance(value, (bytes, str)) else len(bytes(value))


@dataclass
class Tally:
    """Calls by name and payload bytes, for one launcher; ``frozen`` stops counting."""

    calls: Counter[str] = field(default_factory=Counter)
    bytes: int = 0
    frozen: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, name: str, moved: int) -> None:
        with self.lock:
            if not self.frozen:
                self.calls[name] += 1
                self.bytes += moved

    def freeze(self) -> tuple[dict[str, int], int]:
        """Stop counting; the counts so far."""
        with self.lock:
            self.frozen = True
            return dict(self.calls), self.bytes


class CountedStore(Store):
    """Forwards every call to ``inner`` and counts it in ``tally``."""

    def __init__(
        self,
        inner: Store,
        tally: Tally | None = None,
        connect: Callable[[], Store] | None = None,
    ) -> None:
        super().__init__()
        self.inner = inner
        self.tally = tally if tally is not None else Tally()
        self._connect = connect
        self.set_timeout(inner.timeout)  # type: ignore[attr-defined]

    def _call(self, name: str, moved: int, call: Callable[[], Any]) -> Any:
        result = call()
        if isinstance(result, bytes):
            moved += len(result)
        elif isinstance(result, list):
            moved += sum(len(item) for item in result)
        self.tally.add(name, moved)
        return result

    def set(self, key: str, value: Any) -> None:
        self._call("set", len(key) + _size(value), lambda: self.inner.set(key, value))

    def get(self, key: str) -> bytes:
        return self._call("get", len(key), lambda: self.inner.get(key))

    def add(self, key: str, amount: int) -> int:
        return self._call("add", len(key) + 8, lambda: self.inner.add(key, amount))

    def compare_set(self, key: str, expected: Any, desired: Any) -> bytes:
        moved = len(key) + _size(expected) + _size(desired)
        return self._call(
            "compare_set", moved, lambda: self.inner.compare_set(key, expected, desired)
        )

    def check(self, keys: list[str]) -> bool:
        return self._call("check", sum(map(len, keys)), lambda: self.inner.check(keys))

    def wait(self, keys: list[str], timeout: datetime.timedelta | None = None) -> None:
        moved = sum(map(len, keys))
        if timeout is None:
            self._call("wait", moved, lambda: self.inner.wait(keys))
        else:
            self._call("wait", moved, lambda: self.inner.wait(keys, timeout))

    def delete_key(self, key: str) -> bool:
        return self._call("delete_key", len(key), lambda: self.inner.delete_key(key))

    def num_keys(self) -> int:
        return self._call("num_keys", 0, self.inner.num_keys)

    def append(self, key: str, value: Any) -> None:
        self._call("append", len(key) + _size(value), lambda: self.inner.append(key, value))  # type: ignore[attr-defined]

    def multi_get(self, keys: list[str]) -> list[bytes]:
        moved = sum(map(len, keys))
        return self._call("multi_get", moved, lambda: self.inner.multi_get(keys))

    def multi_set(self, keys: list[str], values: list[Any]) -> None:
        moved = sum(map(len, keys)) + sum(map(_size, values))
        self._call("multi_set", moved, lambda: self.inner.multi_set(keys, values))  # type: ignore[attr-defined]

    def has_extended_api(self) -> bool:
        return True

    def clone(self) -> CountedStore:
        """A new client to the same server (``connect``'s, if given), in the same tally."""
        if self._connect is not None:
            return CountedStore(self._connect(), self.tally, self._connect)
        inner = self.inner
        assert isinstance(inner, TCPStore), "clone() needs a TCPStore underneath"
        client = TCPStore(
            inner.host,
            inner.port,
            is_master=False,
            timeout=inner.timeout,  # type: ignore[attr-defined]
            use_libuv=inner.libuvBackend,  # type: ignore[attr-defined]
        )
        return CountedStore(client, self.tally)
