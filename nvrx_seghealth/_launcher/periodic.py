"""A daemon thread that does one thing every few seconds: :class:`PeriodicThread`."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable

from .._decision.helperprocess import CallsClosed
from .exiting import forget, join_at_exit

__all__ = ["PeriodicThread"]


class PeriodicThread:
    """A daemon thread calling ``look()`` every ``interval`` seconds until stopped.

    ``look()`` returns whether it succeeded; with ``backoff_limit``, the pause doubles
    after each failed look, up to ``backoff_limit`` seconds, and the first success brings
    it back to ``interval``. The pause runs from the end of one look to the start of the
    next, so looks never overlap and never come closer than ``interval``. The thread
    holds ``look``'s object weakly (as torch's keep-alive timer holds its handler): an
    object that is no longer used stops its thread with it.

    At the interpreter's exit (also the one torch's agent takes on SIGTERM, which never
    calls the handler's ``shutdown()``), the thread is stopped and its look waited for,
    so that no store call of a look returns while the interpreter finalizes
    (:mod:`.exiting`); a look that then raises
    :class:`~.._decision.helperprocess.CallsClosed` (a stat it waited for was ended) ends
    the thread.
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
        join_at_exit(thread, self._stopped)
        try:
            thread.start()
        except BaseException:
            forget(thread)
            raise

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
        except CallsClosed:
            pass  # the interpreter exits
        finally:
            forget(threading.current_thread())

    def stop(self) -> None:
        """No look starts after this returns (one in progress ends on its own)."""
        self._stopped.set()
