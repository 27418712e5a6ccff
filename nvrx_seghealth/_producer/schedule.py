"""When ``publish-drained --interval`` runs its passes, and how signals change that.

The contract (:class:`PassSchedule`):

* a pass runs at once, then one every ``interval`` seconds after the previous one ended;
* SIGUSR1 runs a pass now: while the producer sleeps between passes, the sleep ends at
  once; during a pass, one more pass runs right after it. Signals that arrive during one
  pass coalesce into that one extra pass, so a burst of them (a Slurm trigger firing for
  several nodes) never piles passes up;
* SIGINT or SIGTERM stops the producer at once: a sleep ends, and a pass (or the start-up
  work before the first) is interrupted by :class:`Stopped`, which the caller reports.

The handlers are Python signal handlers, so they run in the main thread between two
bytecodes; the schedule must be used from the main thread.
"""

from __future__ import annotations

import enum
import signal
import threading
from collections.abc import Iterator
from types import FrameType, TracebackType
from typing import Any, final

__all__ = ["WAKE_SIGNAL", "PassSchedule", "Stopped", "Wake"]

#: The signal that asks for a pass now (as NVRx's own producer after 0.7.0).
WAKE_SIGNAL = signal.SIGUSR1
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Stopped(BaseException):
    """SIGINT or SIGTERM during a pass: ``args[0]`` is the signal number.

    A ``BaseException`` so that no ``except Exception`` of a pass swallows it."""

    @property
    def signal(self) -> signal.Signals:
        """The signal that stopped the producer."""
        return signal.Signals(self.args[0])


class Wake(str, enum.Enum):
    """Why a pass runs: the token :meth:`PassSchedule.passes` yields."""

    #: The first pass, at start.
    START = "start"
    #: ``interval`` seconds passed since the previous pass.
    INTERVAL = "interval"
    #: A SIGUSR1 arrived while sleeping, or during the previous pass.
    SIGNAL = "signal"


@final
class PassSchedule:
    """A context manager that owns SIGINT, SIGTERM and SIGUSR1 while it is entered.

    Usage: ``with PassSchedule(30.0) as schedule: prepare(); for wake in
    schedule.passes(): one_pass()``. Entering installs the handlers (and restores the
    previous ones on exit); ``prepare()`` and each pass are interruptible by
    :class:`Stopped`; the iteration ends, without an exception, when SIGINT or SIGTERM
    arrives while it sleeps.
    """

    def __init__(self, interval: float) -> None:
        if not interval > 0:
            raise ValueError(f"the interval must be a positive number of seconds, not {interval}")
        self._interval = interval
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._busy = True  # before the first sleep: a stop signal interrupts at once
        self._previous: dict[signal.Signals, Any] = {}  # a handler, SIG_DFL, SIG_IGN or None

    def __enter__(self) -> PassSchedule:
        self._previous[WAKE_SIGNAL] = signal.signal(WAKE_SIGNAL, self._on_wake)
        for sig in _STOP_SIGNALS:
            self._previous[sig] = signal.signal(sig, self._on_stop)
        return self

    def __exit__(
        self,
        _type: type[BaseException] | None,
        _value: BaseException | None,
        _traceback: TracebackType | None,
    ) -> None:
        self._busy = False
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def passes(self) -> Iterator[Wake]:
        """Yield once per pass to run, with why it runs; see the module doc."""
        wake = Wake.START
        while not self._stop.is_set():
            self._busy = True
            self._wake.clear()  # a SIGUSR1 from here on asks for one more pass
            yield wake
            self._busy = False
            woken = self._wake.wait(self._interval)
            wake = Wake.SIGNAL if woken else Wake.INTERVAL

    def _on_wake(self, _signum: int, _frame: FrameType | None) -> None:
        self._wake.set()

    def _on_stop(self, signum: int, _frame: FrameType | None) -> None:
        self._stop.set()
        self._wake.set()
        if self._busy:
            self._busy = False
            raise Stopped(signum)
