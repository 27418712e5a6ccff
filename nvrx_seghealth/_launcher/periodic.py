"""A daemon thread that does one thing every few seconds: :class:`PeriodicThread`."""

from __future__ import annotations

import atexit
import threading
import time
import weakref
from collections.abc import Callable

__all__ = ["EXIT_WAIT", "PeriodicThread"]

#: Seconds the interpreter's exit waits, in all, for the looks still in progress.
EXIT_WAIT = 2.0

# The threads whose loop runs, with their stop events: stopped and joined at exit.
_running: dict[threading.Thread, threading.Event] = {}


class PeriodicThread:
    """A daemon thread calling ``look()`` every ``interval`` seconds until stopped.

    ``look()`` returns whether it succeeded; with ``backoff_limit``, the pause doubles
    after each failed look, up to ``backoff_limit`` seconds, and the first success brings
    it back to ``interval``. The pause runs from the end of one look to the start of the
    next, so looks never overlap and never come closer than ``interval``. The thread
    holds ``look``'s object weakly (as torch's keep-alive timer holds its handler): an
    object that is no longer used stops its thread with it.

    At the interpreter's exit (also the one torch's agent takes on SIGTERM, which never
    calls the handler's ``shutdown()``), every thread is stopped and joined, for at most
    :data:`EXIT_WAIT` seconds in all. A look may be in a store call, which runs in C++
    without the GIL: a daemon thread that returns from one while the interpreter
    finalizes ends the process with SIGABRT (``terminate called without an active
    exception``) instead of the launcher's own exit code. A store that answers ends its
    call in milliseconds; the bound keeps a look waiting for a hung stat from holding
    the launcher's exit.
    """

    def __init__(
        self,
        look: Callable[[], bool],
        interval: float,
        *,
        name: str,
        backoff_limit: float | None = None,
    ) -> None:
        self._stopped = threading.Event()
        self._look = weakref.WeakMethod(look)
        self._interval = interval
        self._backoff_limit = interval if backoff_limit is None else backoff_limit
        thread = threading.Thread(target=self._run, name=name, daemon=True)
        _running[thread] = self._stopped
        thread.start()

    def _run(self) -> None:
        try:
            pause = self._interval
            while not self._stopped.wait(pause):
                look = self._look()
                if look is None:
                    return
                looked = look()
                del look
                pause = self._interval if looked else min(2 * pause, self._backoff_limit)
        finally:
            _running.pop(threading.current_thread(), None)

    def stop(self) -> None:
        """No look starts after this returns (one in progress ends on its own)."""
        self._stopped.set()


@atexit.register
def _stop_at_exit() -> None:
    """Stop every running thread and wait for its look, up to :data:`EXIT_WAIT` in all."""
    running = list(_running.items())
    for _, stopped in running:
        stopped.set()
    deadline = time.monotonic() + EXIT_WAIT
    for thread, _ in running:
        thread.join(max(0.0, deadline - time.monotonic()))
