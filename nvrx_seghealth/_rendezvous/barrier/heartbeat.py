"""A launcher's heartbeat: its own key, set to its wall clock at a fixed interval.

* Only ``hb/<node>`` of this launcher is written; nobody reads it on a schedule. A
  closer reads the heartbeats it needs in one ``multi_get`` (:mod:`.closer`).
* The thread writes through the launcher's client, between its short calls. A TCPStore
  client serves one call at a time, so the launcher's blocking waits have a client of
  their own (:mod:`.handler`): no wait holds a beat.
* A heartbeat older than ``dead_after`` seconds means the launcher is dead. Clocks must
  agree to well within that, as torch's dynamic rendezvous assumes for its keep-alives.
* A failed write is retried at the next beat: a dead store ends the rendezvous' own
  calls, not this thread. One WARNING says the first failure of a spell; one INFO says
  the write that ends it.
* The thread stops with :meth:`stop`, or with :meth:`halt` once its handler is gone
  (the handler registers it), as torch's keep-alive ends with its handler.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

from . import keys

if TYPE_CHECKING:
    from torch.distributed import Store

__all__ = ["Heartbeat", "is_stale"]

log = logging.getLogger(__name__)


def is_stale(value: bytes, now: float, dead_after: float) -> bool:
    """Whether a heartbeat value is older than ``dead_after`` seconds (or unreadable)."""
    try:
        return now - float(value.decode("ascii")) > dead_after
    except ValueError:
        return True


class Heartbeat:
    """Sets ``hb/<node>`` every ``interval`` seconds until :meth:`stop`."""

    def __init__(self, store: Store, node: str, interval: float) -> None:
        self._store = store
        self._key = keys.heartbeat(node)
        self._interval = interval
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def beat(self) -> None:
        """Write the heartbeat now."""
        self._store.set(self._key, repr(time.time()))

    def start(self) -> None:
        """Beat now, then in a daemon thread; a second call does nothing."""
        if self._thread is not None:
            return
        self.beat()
        self._thread = threading.Thread(
            target=self._run, name="nvrx-seghealth-barrier-heartbeat", daemon=True
        )
        self._thread.start()

    def halt(self) -> None:
        """Stop beating after the current beat, without waiting for it."""
        self._stopped.set()

    def stop(self) -> None:
        """Stop beating (the key stays, and goes stale)."""
        self.halt()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=self._interval + 5)

    def _run(self) -> None:
        failing = False
        while not self._stopped.wait(self._interval):
            try:
                self.beat()
            except Exception as error:  # noqa: BLE001  (the store may be gone; retry)
                if not failing:
                    log.warning("barrier rendezvous heartbeat not written: %s", error)
                failing = True
                continue
            if failing:
                log.info("barrier rendezvous heartbeat written again")
            failing = False
