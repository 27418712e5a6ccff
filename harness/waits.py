"""Waits of a test: a condition awaited instead of a fixed sleep, and the bound of a wait
that must end at once.

Standard library only: every room of the harness and every test may import it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["AT_ONCE_BOUND", "wait_until"]

#: Seconds of bound given to a wait that must end at once (a refused call, an answer
#: already there, a signal that ends the wait): it ends in well under half of it, or it
#: waited for its bound. Long, so that a loaded node's scheduling delays cannot pass for
#: a wait.
AT_ONCE_BOUND = 30.0


def wait_until(predicate: Callable[[], object], timeout: float = 30) -> None:
    """Return once ``predicate()`` is true; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)
