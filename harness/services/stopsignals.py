"""A producer's signals that land where its main thread does not see them at once.

CPython runs a Python signal handler in the main thread, between two bytecodes. A signal
that arrives just before the main thread blocks in a wait (a sleep, a Slurm command's
output) does not interrupt that wait: the handler runs only when the wait ends by itself.
The same happens to every signal the kernel gives to another thread of the process. Which
moment a signal hits cannot be chosen from outside, so :class:`SignalledChild` makes it
certain: its program's main thread blocks the producer's signals and a spare thread takes
them, so each one arrives as if just before the main thread's wait.
"""

from __future__ import annotations

import queue
import subprocess
import sys
import threading
from pathlib import Path
from typing import final

__all__ = ["SignalledChild"]

#: Run first in the child: a spare thread that takes the signals, then the main
#: thread's mask (threads inherit the mask of the thread that starts them).
_ELSEWHERE = """\
import signal, threading
threading.Thread(target=threading.Event().wait, daemon=True).start()
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM, signal.SIGUSR1})
"""


@final
class SignalledChild:
    """``python -c code`` whose SIGINT, SIGTERM and SIGUSR1 reach a spare thread, never
    the main one (see the module doc), and the lines it prints. Killed when the
    ``with`` block ends."""

    def __init__(self, code: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", _ELSEWHERE + code], stdout=subprocess.PIPE, text=True
        )
        self._lines: queue.Queue[str] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        """Queue the child's lines; close its stdout at end of file (the reader owns it)."""
        assert self.process.stdout is not None  # a pipe
        with self.process.stdout:
            for line in self.process.stdout:
                self._lines.put(line.rstrip("\n"))

    def __enter__(self) -> SignalledChild:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.process.kill()
        self.process.wait()
        self._reader.join(60)  # its end of file, unless a grandchild still holds the pipe

    def next_line(self, timeout: float = 60) -> str:
        """The next line the child prints; fails the test after ``timeout`` seconds."""
        try:
            return self._lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"the child printed nothing within {timeout:g} s") from None

    def send(self, signum: int) -> None:
        self.process.send_signal(signum)

    def waiting(self) -> bool:
        """Whether the child's main thread sleeps (state ``S``: blocked in a wait)."""
        pid = self.process.pid
        try:
            stat = Path(f"/proc/{pid}/task/{pid}/stat").read_text()
        except OSError:
            return False
        return stat.rsplit(")", 1)[1].split()[0] == "S"
