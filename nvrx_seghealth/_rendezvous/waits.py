"""A store's blocking ``wait`` that a signal handler's exception ends at once.

torch's ``Store.wait`` blocks in C++. A signal that arrives meanwhile runs its Python
handler only once the wait returns, maybe after minutes. torch's elastic agent raises
``SignalException`` from its SIGTERM handler, and a launcher told to stop must leave at
once, as it does from c10d's rendezvous, which sleeps in Python between store calls.

So on the main thread :func:`wait_for` runs the store's wait in a daemon thread and waits
for it on an event, which a signal interrupts. Other threads call the store's wait
directly: Python runs signal handlers on the main thread only. The rules:

* A wait that times out returns ``False``. On a TCPStore it costs two warning lines of
  torch's client.
* After an interruption the store's wait goes on in its thread until a key appears or its
  timeout ends. The client, which serves one call at a time, is busy until then; a
  launcher told to stop makes no more calls on it.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import timedelta
from typing import Protocol

from torch.distributed import DistStoreError

__all__ = ["WaitingStore", "wait_for"]


class WaitingStore(Protocol):
    """The part of ``torch.distributed.Store`` that a wait uses."""

    def wait(self, keys: list[str], timeout: timedelta, /) -> None: ...

    def check(self, keys: list[str], /) -> bool: ...


#: The shortest wait handed to a store: torch refuses a timeout of zero.
_SHORTEST = 0.001


def wait_for(store: WaitingStore, keys: Sequence[str], timeout: float) -> bool:
    """Block until every key of ``keys`` exists (``True``) or ``timeout`` seconds pass
    (``False``); a signal handler's exception ends the wait at once (see the module).

    Raises:
        Exception: whatever the store raised, a timeout (``DistStoreError``) aside.
    """
    wait = timedelta(seconds=max(timeout, _SHORTEST))
    if threading.current_thread() is not threading.main_thread():
        return _wait(store, list(keys), wait)
    ended = threading.Event()
    outcome: list[bool | Exception] = []

    def run() -> None:
        try:
            outcome.append(_wait(store, list(keys), wait))
        except Exception as error:  # noqa: BLE001  (raised again in the caller's thread)
            outcome.append(error)
        finally:
            ended.set()

    threading.Thread(target=run, name="nvrx-seghealth-store-wait", daemon=True).start()
    ended.wait()
    result = outcome[0]
    if isinstance(result, Exception):
        raise result
    return result


def _wait(store: WaitingStore, keys: list[str], wait: timedelta) -> bool:
    try:
        store.wait(keys, wait)
    except DistStoreError:
        return bool(store.check(keys))
    return True
