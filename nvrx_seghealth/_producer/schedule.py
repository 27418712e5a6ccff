"""When ``publish-drained --interval`` runs its passes, and how signals change that.

The contract (:class:`PassSchedule`):

- A pass runs at once, then one every ``interval`` seconds after the previous one ended.
- SIGUSR1 runs a pass now: it ends a sleep, or runs one more pass right after the current one.
- Signals during one pass coalesce into one extra pass, so a burst never piles passes up.
- SIGINT or SIGTERM stops the producer at once with :class:`Stopped`, in a sleep or a pass.
- A step that must not be cut in two holds the stop until it has ended (:func:`stops_held`).
- A stop signal ignored when the producer started stays ignored, as ``nohup`` wants.
- A single pass (``--once``) is stopped the same way inside :func:`stop_signals`.

The handlers are Python signal handlers: use the schedule from the main thread. A handler
only sets a flag or raises, never waits for a lock. Every signal also writes a byte to the
wake-up pipe (:func:`signal.set_wakeup_fd`), so a signal that lands just before the sleep
still ends it.
"""

from __future__ import annotations

import contextlib
import enum
import os
import select
import signal
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from types import FrameType, TracebackType
from typing import Any, final

__all__ = [
    "STOP_SIGNALS",
    "WAKE_SIGNAL",
    "PassSchedule",
    "Stopped",
    "Wake",
    "stop_signals",
    "stops_held",
]

#: The signal that asks for a pass now (as NVRx's own producer after 0.7.0).
WAKE_SIGNAL = signal.SIGUSR1
#: The signals that stop the producer.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)

#: One entry per :func:`stops_held` block, innermost last: the stop signal that arrived
#: inside it, or 0. Module-wide, as the signal handlers are process-wide.
_held: list[int] = []


class Stopped(BaseException):
    """A stop signal arrived: SIGINT or SIGTERM during a pass (also SIGHUP for ``demo``,
    whose job it stops). ``args[0]`` is the signal number.

    A ``BaseException`` so that no ``except Exception`` on its way swallows it."""

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


@contextlib.contextmanager
def stops_held() -> Iterator[None]:
    """Let the block end before SIGINT or SIGTERM interrupts it: a stop that arrives
    inside it raises :class:`Stopped` as the block ends, instead of halfway through.

    For a step that, cut in two, would leave something behind: a Slurm command
    interrupted as it starts would run on, and nobody would know its pid to end it.
    Outside an entered :class:`PassSchedule` the block runs as it is.
    """
    _held.append(0)
    try:
        yield
    finally:
        signum = _held.pop()
        if signum and _held:
            _held[-1] = signum  # the outer block raises it
        elif signum:
            raise Stopped(signum)


@contextlib.contextmanager
def stop_signals(signals: Sequence[signal.Signals] = STOP_SIGNALS) -> Iterator[None]:
    """Own ``signals`` while the block runs, where no sleep is to be ended: one pass
    (``--once``), or the demo's job.

    The first of them to arrive interrupts the block with :class:`Stopped` (as the block
    of :func:`stops_held` inside it ends, if it arrives there); a later one is ignored,
    so that what the first interrupted is cleaned up (a Slurm command's process group
    killed, a job's processes stopped). A signal ignored when the block is entered stays
    ignored (``nohup``'s SIGHUP). The previous handlers are restored on exit. For the
    main thread, as :class:`PassSchedule`.
    """
    stopped = False

    def stop(signum: int, _frame: FrameType | None) -> None:
        nonlocal stopped
        if stopped:
            return
        stopped = True
        if _held:
            _held[-1] = signum
        else:
            raise Stopped(signum)

    previous = _own(signals, stop)
    try:
        yield
    finally:
        _restore(previous)


def _own(
    signals: Iterable[signal.Signals], handler: Callable[[int, FrameType | None], None]
) -> dict[signal.Signals, Any]:
    """Install ``handler`` for each of ``signals`` that is not ignored now; the handlers it
    replaced (a handler, ``SIG_DFL`` or ``None``), for :func:`_restore`.

    A signal ignored when the process started was ignored on purpose, by ``nohup`` or by
    the shell that started a background job: it stays ignored.
    """
    return {
        sig: signal.signal(sig, handler)
        for sig in signals
        if signal.getsignal(sig) is not signal.SIG_IGN
    }


def _restore(previous: dict[signal.Signals, Any]) -> None:
    """Put back the handlers that :func:`_own` replaced."""
    for sig, handler in previous.items():
        signal.signal(sig, handler)


@final
class PassSchedule:
    """A context manager that owns SIGINT, SIGTERM and SIGUSR1 while it is entered (a stop
    signal ignored at start stays ignored, as in :func:`stop_signals`).

    Usage: ``with PassSchedule(30.0) as schedule: prepare(); for wake in
    schedule.passes(): run_a_pass()``. Entering installs the handlers and the wake-up pipe
    (and restores the previous ones on exit); ``prepare()`` and each pass are
    interruptible by :class:`Stopped`; the iteration ends, without an exception, when
    SIGINT or SIGTERM arrives while it sleeps.
    """

    def __init__(self, interval: float) -> None:
        if not interval > 0:
            raise ValueError(f"the interval must be a positive number of seconds, not {interval}")
        self._interval = interval
        self._stopped = False
        self._asked = False  # a SIGUSR1 asked for a pass
        self._busy = True  # before the first sleep: a stop signal interrupts at once
        self._previous: dict[signal.Signals, Any] = {}  # a handler, SIG_DFL, SIG_IGN or None
        self._pipe: tuple[int, int] | None = None  # the wake-up pipe's ends
        self._previous_wakeup = -1

    def __enter__(self) -> PassSchedule:
        reader, writer = os.pipe()
        for end in (reader, writer):
            os.set_blocking(end, False)
        self._pipe = (reader, writer)
        self._previous_wakeup = signal.set_wakeup_fd(writer, warn_on_full_buffer=False)
        self._previous[WAKE_SIGNAL] = signal.signal(WAKE_SIGNAL, self._on_wake)
        self._previous.update(_own(STOP_SIGNALS, self._on_stop))
        return self

    def __exit__(
        self,
        _type: type[BaseException] | None,
        _value: BaseException | None,
        _traceback: TracebackType | None,
    ) -> None:
        self._busy = False
        _restore(self._previous)
        self._previous.clear()
        signal.set_wakeup_fd(self._previous_wakeup)
        if self._pipe is not None:
            for end in self._pipe:
                os.close(end)
            self._pipe = None

    def passes(self) -> Iterator[Wake]:
        """Yield once per pass to run, with why it runs; see the module doc."""
        wake = Wake.START
        while not self._stopped:
            self._busy = True
            self._drain()
            self._asked = False  # a SIGUSR1 from here on asks for one more pass
            yield wake
            self._busy = False
            wake = Wake.SIGNAL if self._sleep() else Wake.INTERVAL

    def _sleep(self) -> bool:
        """Sleep until the next pass is due, a SIGUSR1 asks for one (``True``), or a stop
        signal arrives; each signal ends the wait on the wake-up pipe, and is taken from
        the pipe too, whenever its handler runs."""
        deadline = time.monotonic() + self._interval
        while not (self._stopped or self._asked):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            select.select([self._reader], [], [], remaining)
            for signum in self._drain():
                if signum == WAKE_SIGNAL:
                    self._asked = True
                elif signum in STOP_SIGNALS:
                    self._stopped = True
        return self._asked and not self._stopped

    @property
    def _reader(self) -> int:
        assert self._pipe is not None, "the schedule is used inside its with block"
        return self._pipe[0]

    def _drain(self) -> bytes:
        """The signal numbers written to the wake-up pipe since it was last read."""
        signums = b""
        with contextlib.suppress(BlockingIOError):
            while chunk := os.read(self._reader, 512):
                signums += chunk
        return signums

    def _on_wake(self, _signum: int, _frame: FrameType | None) -> None:
        self._asked = True

    def _on_stop(self, signum: int, _frame: FrameType | None) -> None:
        self._stopped = True
        if not self._busy:
            return
        self._busy = False
        if _held:
            _held[-1] = signum
        else:
            raise Stopped(signum)
