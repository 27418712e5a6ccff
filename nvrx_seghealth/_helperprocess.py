"""Calls that may hang for good, made in a helper process and bounded in time.

On a hung Lustre or NFS client a filesystem call can block for minutes, or for ever, in
an uninterruptible sleep: no signal wakes the blocked thread, and a process cannot
finish exiting while one of its threads sleeps so. So such calls run in a small helper
process instead (a fresh ``python -I -S``, its last command-line argument a tag that
names it in ``ps`` and ``/proc``), and a :class:`HelperClient` talks to it:

* The helper is started on first use and reused: a call costs one request and one reply
  line over two private pipes. A helper that died since the last call is replaced.
* A call that has not answered within its bound, or that failed once sent (the helper
  died, or a signal handler raised and ended the wait), *abandons* its helper: the pipes
  are closed and the next call starts a new helper. The abandoned helper exits on its
  own as soon as its call returns (its reply meets a closed pipe), and a daemon thread
  waiting for it reaps it then: once the filesystem answers, nothing is left behind.
* At most one abandoned helper per key (a path, a directory): while one is still alive,
  a new call with that key is refused at once instead of sending one more process into
  the hung filesystem.
* A helper holds none of the caller's standard streams (its stdin and stdout are the
  private pipes, its stderr is ``/dev/null``), so a caller that exits, or a reader of
  the caller's output through a pipe, is not held by it. It stays in the caller's
  process group (and Slurm step).
* Waiting for a reply sleeps interruptibly, so a signal handler that raises ends it.

Calls are serialised: one at a time per client, across threads.

Standard library only.
"""

from __future__ import annotations

import errno
import os
import select
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence

__all__ = ["HelperClient", "HelperStartError"]


class HelperStartError(OSError):
    """No helper process could be started: the call was not made."""


def _interpreters() -> list[str]:
    """Pythons to run a helper with, best first: this one, then any ``python3``.

    A helper needs only the standard library, so any Python 3 will do when this
    process's own interpreter cannot be executed (e.g. its path is unreadable to the
    user this process now runs as).
    """
    candidates = [sys.executable, getattr(sys, "_base_executable", ""), shutil.which("python3")]
    return list(dict.fromkeys(c for c in candidates if c))


class _Helper:
    """One helper process and the pipes to it."""

    def __init__(self, name: str, argv: Sequence[str]) -> None:
        errors = []
        for interpreter in _interpreters():
            try:
                self.process = subprocess.Popen(
                    [interpreter, "-I", "-S", *argv],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                    close_fds=True,
                    bufsize=0,
                )
                break
            except OSError as error:
                errors.append(f"{interpreter}: {error.strerror or error}")
        else:
            raise HelperStartError(
                errno.ENOEXEC,
                f"the {name} helper process cannot be started ({'; '.join(errors)})",
            )
        assert self.process.stdin is not None and self.process.stdout is not None
        self.name = name
        self.requests = self.process.stdin.fileno()
        self.replies = self.process.stdout.fileno()
        self.poller = select.poll()
        self.poller.register(self.replies, select.POLLIN)
        self.unread = b""

    def ask(self, request: bytes, deadline: float) -> bytes | None:
        """Send ``request``; the reply line (without its newline), or ``None`` once the
        monotonic ``deadline`` has passed.

        Raises:
            OSError: the helper is gone (it died, or its pipe broke).
        """
        os.write(self.requests, request)
        while b"\n" not in self.unread:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self.poller.poll(max(1, int(remaining * 1000) + 1)):
                if time.monotonic() >= deadline:
                    return None
                continue
            chunk = os.read(self.replies, 65536)
            if not chunk:
                raise OSError(errno.EPIPE, f"the {self.name} helper process exited")
            self.unread += chunk
        line, _, self.unread = self.unread.partition(b"\n")
        return line

    def close(self) -> None:
        """Close the pipes; the process exits once its call (if any) returns."""
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                stream.close()


class HelperClient:
    """Bounded calls into one kind of helper process (see the module doc).

    Args:
        name: the helper's name in error messages (``stat``: "the stat helper process").
        argv: what follows ``python -I -S`` to run the helper, e.g. ``["-c", CODE]`` or
            a script's path. The helper reads requests on stdin and answers each with
            one line on stdout.
        tag: the helper's last command-line argument, to recognise it.
        timeout_error: ``timeout_error(key, waited, earlier)`` makes the exception
            raised for a call with ``key`` that has been pending ``waited`` seconds
            without an answer; ``earlier``: it was not sent, because an earlier call
            with ``key`` is still stuck.
    """

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        tag: str,
        timeout_error: Callable[[str, float, bool], Exception],
    ) -> None:
        self._name = name
        self._argv = [*argv, tag]
        self._timeout_error = timeout_error
        self._lock = threading.Lock()
        self._helper: _Helper | None = None
        # key -> (abandoned helper still inside its call, monotonic start of that call)
        self._stuck: dict[str, tuple[_Helper, float]] = {}

    def call(self, key: str, request: bytes, timeout: float) -> bytes:
        """Send ``request`` (bytes the helper reads as one request) and return the
        reply line, without its newline, waiting at most ``timeout`` seconds in all.

        Raises:
            HelperStartError: no helper process could be started.
            OSError: the helper died, or its pipe broke, during the call.
            Exception: from ``timeout_error``: no answer within ``timeout``, or an
                earlier call with ``key`` is still stuck (this one was not sent).
        """
        started = time.monotonic()
        if not self._lock.acquire(timeout=max(timeout, 0.0)):
            raise self._timeout_error(key, time.monotonic() - started, False)
        try:
            if key in self._stuck:
                raise self._timeout_error(key, time.monotonic() - self._stuck[key][1], True)
            if self._helper is not None and self._helper.process.poll() is not None:
                self._helper.close()  # it died since the last call
                self._helper = None
            if self._helper is None:
                self._helper = _Helper(self._name, self._argv)
            helper = self._helper
            try:
                reply = helper.ask(request, started + timeout)
            except BaseException:  # the helper died, or a signal handler ended the wait
                self._abandon(key, helper, started)
                raise
            if reply is None:
                self._abandon(key, helper, started)
                raise self._timeout_error(key, time.monotonic() - started, False)
            return reply
        finally:
            self._lock.release()

    def _abandon(self, key: str, helper: _Helper, started: float) -> None:
        """Give up ``helper``, stuck in a call with ``key`` since ``started``; reap it
        on a daemon thread. Called with the lock held."""
        helper.close()
        self._helper = None
        self._stuck[key] = (helper, started)
        threading.Thread(
            target=self._reap_when_done,
            args=(key, helper),
            name="nvrx-seghealth-reaper",
            daemon=True,
        ).start()

    def _reap_when_done(self, key: str, helper: _Helper) -> None:
        """Wait for an abandoned helper to exit (its call returned), then forget it.

        ``waitpid`` sleeps interruptibly, so this thread does not keep the process from
        exiting.
        """
        helper.process.wait()
        with self._lock:
            if self._stuck.get(key, (None, 0.0))[0] is helper:
                del self._stuck[key]
