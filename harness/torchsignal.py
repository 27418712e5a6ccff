"""torch's agent's SIGTERM handler in this process, and a SIGTERM sent to it later.

Once torch's elastic agent has started workers, its handler raises ``SignalException``
wherever the main thread is, a rendezvous included. :func:`sigterm_after` installs that
handler for the ``with`` block and sends this process SIGTERM after a delay, from a timer
thread: the main thread is then blocked in the call under test.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator

from torch.distributed.elastic.multiprocessing.api import _terminate_process_handler

__all__ = ["sigterm_after"]


@contextlib.contextmanager
def sigterm_after(seconds: float) -> Iterator[None]:
    """Within the block, torch's handler takes SIGTERM, sent ``seconds`` after entering."""
    previous = signal.signal(signal.SIGTERM, _terminate_process_handler)
    sender = threading.Timer(seconds, os.kill, (os.getpid(), signal.SIGTERM))
    try:
        sender.start()
        yield
    finally:
        sender.join()
        signal.signal(signal.SIGTERM, previous)
