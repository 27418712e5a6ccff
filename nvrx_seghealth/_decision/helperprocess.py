"""Calls that may hang for good, made in a helper process and bounded in time.

On a hung Lustre or NFS client a filesystem call can block for minutes, or for ever, in
an uninterruptible sleep: no signal wakes the blocked thread, and a process cannot
finish exiting while one of its threads sleeps so. So such calls run in a small helper
process instead (a fresh ``python -I -S``, its last command-line argument a tag that
names it in ``ps`` and ``/proc``), and a :class:`HelperClient` talks to it:

* The helper is started on first use, or ahead of time (:meth:`HelperClient.start`),
  and reused: a call costs one request and one reply line over two private pipes. A
  helper that died since the last call is replaced.
* Starting a helper is not part of a call's bound: a new helper first writes
  :data:`READY` on its stdout, and the client waits for that line up to
  :data:`STARTUP_TIMEOUT` seconds (else :class:`HelperStartError`) before the call's
  own bound begins. So a short bound is not used up by an interpreter's start-up.
* A call that has not answered within its bound (:class:`HelperTimeout`), or that failed
  once sent (the helper died, or a signal handler raised and ended the wait), *abandons*
  its helper: the next call starts a new one. The abandoned helper exits on its own as
  soon as its call returns (its stdin is closed), and a daemon thread waiting for it
  reaps it then: once the filesystem answers, nothing is left behind.
* A key names what a call may hang on (a directory). **At most one abandoned helper per
  key, across the processes of one account**: while one is still inside its call, a new
  call with that key is refused at once (``HelperTimeout``, ``earlier``) instead
  of sending one more process into the hung filesystem. In this process that holds for
  every client (a stat and a read in one directory share the key). For other processes,
  abandonment is recorded explicitly: the client starts a *stuck record*, a small
  sleeping process whose command line ends ``STUCK_TAG <key> <helper pid> <call
  start, epoch seconds>`` and which holds the abandoned helper's reply pipe, so
  it exits exactly when that helper does. The first time a process makes a call with a
  key, it looks in ``/proc`` for a live stuck record of that key owned by its own
  effective uid, and refuses the key's calls while that record lives. Only abandoned
  helpers have a record, so a helper that another live process is merely using is never
  counted; a helper whose process was killed in a call (no record) is not counted
  either, so each such kill may leave one more.
* A helper, and a stuck record, holds none of the caller's standard streams (stdin and
  stdout are private pipes, stderr is ``/dev/null``), so a caller that exits, or a reader
  of the caller's output through a pipe, is not held by it. Both stay in the caller's
  process group (and Slurm step); a stuck record ignores SIGINT and SIGHUP.
* Waiting for a reply sleeps interruptibly, so a signal handler that raises ends it.
* At the interpreter's exit, :func:`close_calls` ends every pending call at once and
  refuses every later one (:class:`CallsClosed`), so that a thread waiting for a hung
  filesystem does not hold the exit.

Calls are serialised: one at a time per client, across threads.

One module of about 480 lines, over the package's 400: a call's path, from the client's
lock through its helper to an abandonment, its stuck record and its end at exit, keeps
every rule above, and is read whole here.
"""

from __future__ import annotations

import errno
import logging
import os
import select
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence

from .._errors import SegmentHealthError

__all__ = [
    "READY",
    "STARTUP_TIMEOUT",
    "STUCK_TAG",
    "CallsClosed",
    "HelperClient",
    "HelperStartError",
    "HelperTimeout",
    "close_calls",
    "stuck_for",
]

log = logging.getLogger(__name__)

#: The line (without its newline) a helper writes on stdout once it can serve requests.
READY = b"nvrx-seghealth-helper-ready"

#: Seconds a new helper may take to write :data:`READY` (outside every call's bound).
STARTUP_TIMEOUT = 30.0

#: The first argument after the code of a stuck record (see the module doc).
STUCK_TAG = "nvrx-seghealth-stuck-call"

# A stuck record: read (and drop) the abandoned helper's replies until it exits.
_RECORD_CODE = r"""
import os, signal
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGHUP, signal.SIG_IGN)
while os.read(0, 65536):
    pass
"""


class HelperStartError(OSError, SegmentHealthError):
    """No helper process could be started: the call was not made."""


class HelperTimeout(TimeoutError, SegmentHealthError):
    """A call with ``key`` did not answer within its bound, or was not sent.

    Attributes:
        subject: what the call was about, as its message names it (the stat of a path,
            ``stat('/shared/shc/segment_health_check.7.3')``; else the key).
        key: what the call may hang on: the directory it went to.
        waited: seconds of its bound the call used: waiting for another thread's call
            and for the answer, not starting a helper; ``earlier``: seconds the earlier
            call has been stuck.
        earlier: the call was not sent: an earlier call with ``key`` is still stuck
            (:func:`stuck_for`).
    """

    def __init__(self, subject: str, key: str, waited: float, *, earlier: bool = False) -> None:
        what = (
            f"not sent, an earlier call in {key} is still stuck after"
            if earlier
            else "no answer after"
        )
        super().__init__(f"{subject}: {what} {waited:.1f} s (a hung shared filesystem?)")
        self.subject = subject
        self.key = key
        self.waited = waited
        self.earlier = earlier


class CallsClosed(BaseException):
    """The calls are closed (:func:`close_calls`: the interpreter exits), in a call that
    was pending then or is made later. A ``BaseException``, as ``SystemExit``: the
    catch-alls that fail open let it pass, so what made the call ends, without a warning."""


# close_calls() sets _closed and closes the write end of _wake (a pipe made with the
# first helper), whose read end every waiting call polls.
_closed = threading.Event()
_closing_lock = threading.Lock()
_wake: list[int] = []


def close_calls() -> None:
    """End every pending call and refuse every later one, for good (:class:`CallsClosed`),
    for the interpreter's exit. A pending call abandons its helper as on a timeout."""
    with _closing_lock:
        if _closed.is_set():
            return
        _closed.set()  # before the wake-up: a woken call must find the calls closed
        if _wake:
            os.close(_wake[1])


def _wake_fd() -> int:
    with _closing_lock:
        if not _wake:
            _wake.extend(os.pipe())
            if _closed.is_set():
                os.close(_wake[1])
        return _wake[0]


def _refuse_when_closed() -> None:
    if _closed.is_set():
        raise CallsClosed("the calls into helper processes are closed: the interpreter exits")


def _interpreters() -> list[str]:
    """Pythons to run a helper with, best first: this one, then any ``python3``.

    A helper needs only the standard library, so any Python 3 will do when this
    process's own interpreter cannot be executed (e.g. its path is unreadable to the
    user this process now runs as).
    """
    candidates = [sys.executable, getattr(sys, "_base_executable", ""), shutil.which("python3")]
    return list(dict.fromkeys(c for c in candidates if c))


class _Pipe:
    """Lines read from a helper's stdout, each within a monotonic deadline."""

    def __init__(self, name: str, process: subprocess.Popen[bytes]) -> None:
        assert process.stdout is not None
        self.name = name
        self.fd = process.stdout.fileno()
        self.poller = select.poll()
        self.poller.register(self.fd, select.POLLIN)
        self.poller.register(_wake_fd(), select.POLLIN)
        self.unread = b""

    def line(self, deadline: float) -> bytes | None:
        """The next line (without its newline), or ``None`` once ``deadline`` passed.

        Raises:
            OSError: the helper exited (its stdout reached end of file).
            CallsClosed: :func:`close_calls` was called.
        """
        while b"\n" not in self.unread:
            remaining = deadline - time.monotonic()
            events = self.poller.poll(max(1, int(remaining * 1000) + 1)) if remaining > 0 else []
            _refuse_when_closed()
            if not any(fd == self.fd for fd, _ in events):  # read only what has data
                if time.monotonic() >= deadline:
                    return None
                continue
            chunk = os.read(self.fd, 65536)
            if not chunk:
                raise OSError(errno.EPIPE, f"the {self.name} helper process exited")
            self.unread += chunk
        line, _, self.unread = self.unread.partition(b"\n")
        return line


class _Helper:
    """One ready helper process and the pipes to it."""

    def __init__(self, name: str, argv: Sequence[str]) -> None:
        errors = []
        for interpreter in _interpreters():
            try:
                self._start(name, interpreter, argv)
                return
            except OSError as error:
                errors.append(f"{interpreter}: {error.strerror or error}")
        raise HelperStartError(
            errno.ENOEXEC, f"the {name} helper process cannot be started ({'; '.join(errors)})"
        )

    def _start(self, name: str, interpreter: str, argv: Sequence[str]) -> None:
        """Start the helper with ``interpreter`` and wait for its :data:`READY` line.

        Raises:
            OSError: it cannot be executed, exited, or was not ready in time (it is then
                killed and reaped in the background).
        """
        self.process = subprocess.Popen(
            [interpreter, "-I", "-S", *argv],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            close_fds=True,
            bufsize=0,
        )
        assert self.process.stdin is not None
        self.name = name
        self.interpreter = interpreter
        self.requests = self.process.stdin.fileno()
        self.replies = _Pipe(name, self.process)
        try:
            ready = self.replies.line(time.monotonic() + STARTUP_TIMEOUT)
        except BaseException:
            self.discard()
            raise
        if ready != READY:
            self.discard()
            said = "nothing" if ready is None else repr(ready[:80])
            raise OSError(errno.ETIMEDOUT, f"not ready within {STARTUP_TIMEOUT:g} s (said {said})")

    def ask(self, request: bytes, deadline: float) -> bytes | None:
        """Send ``request``; the reply line (without its newline), or ``None`` once the
        monotonic ``deadline`` has passed.

        Raises:
            OSError: the helper is gone (it died, or its pipe broke).
        """
        os.write(self.requests, request)
        return self.replies.line(deadline)

    def close(self) -> None:
        """Close the pipes; the process exits once its call (if any) returns."""
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                stream.close()

    def discard(self) -> None:
        """Kill a helper that never became ready; reap it on a daemon thread."""
        self.process.kill()
        self.close()
        _reap(self.process.wait)


class _Stuck:
    """One abandoned call, since ``started`` (epoch seconds): this process's ``helper``,
    or another process's, known by its stuck ``record`` (pid, ``/proc/<pid>/cmdline``)."""

    def __init__(
        self, started: float, helper: _Helper | None = None, record: tuple[int, bytes] | None = None
    ) -> None:
        self.started = started
        self.helper = helper
        self.record = record

    def alive(self) -> bool:
        """Whether the call is still stuck (this process's entries are removed by their
        reaper instead)."""
        if self.record is None:
            return True
        pid, cmdline = self.record
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as file:
                return file.read() == cmdline
        except OSError:
            return False


# Stuck calls by key, for every client of this process; keys already looked up in /proc.
_registry_lock = threading.Lock()
_stuck: dict[str, _Stuck] = {}
_looked_up: set[str] = set()


def _records(key: str) -> _Stuck | None:
    """A live stuck record of ``key`` from a process of this effective uid, if any."""
    uid = os.geteuid()
    try:
        pids = [name for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return None
    for pid in pids:
        try:
            if os.stat(f"/proc/{pid}").st_uid != uid:
                continue
            with open(f"/proc/{pid}/cmdline", "rb") as file:
                cmdline = file.read()
        except OSError:
            continue
        argv = cmdline.split(b"\0")[:-1]
        if len(argv) >= 4 and argv[-4] == STUCK_TAG.encode() and argv[-3] == os.fsencode(key):
            try:
                started = float(argv[-1])
            except ValueError:
                continue
            return _Stuck(started, record=(int(pid), cmdline))
    return None


def stuck_for(key: str) -> float | None:
    """Seconds the abandoned call with ``key`` has been stuck, or ``None`` when a call
    with ``key`` would be sent.

    The first query of a ``key`` in this process also looks for other processes'
    stuck records of it (see the module doc).
    """
    with _registry_lock:
        if key not in _looked_up:
            _looked_up.add(key)
            found = _records(key)
            if found is not None:
                _stuck.setdefault(key, found)
        entry = _stuck.get(key)
        if entry is not None and not entry.alive():
            del _stuck[key]
            entry = None
    return None if entry is None else max(0.0, time.time() - entry.started)


def _record(key: str, helper: _Helper, started: float) -> None:
    """Register ``helper``, abandoned in a call with ``key`` since ``started`` (epoch),
    start its stuck record, and reap both on a daemon thread once the helper exits."""
    record: subprocess.Popen[bytes] | None = None
    if helper.process.poll() is None:
        try:
            record = subprocess.Popen(
                [helper.interpreter, "-I", "-S", "-c", _RECORD_CODE, STUCK_TAG, key,
                 str(helper.process.pid), f"{started:.3f}"],
                stdin=helper.process.stdout,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                close_fds=True,
            )  # fmt: skip
        except (OSError, ValueError) as error:  # ValueError: a key with a NUL byte
            log.warning("no stuck record for %s (other processes may send a call there): %s",
                        key, error)  # fmt: skip
    helper.close()
    entry = _Stuck(started, helper)
    with _registry_lock:
        _stuck[key] = entry
    _reap(_reap_when_done, key, entry, record)


def _reap(wait: Callable[..., object], *args: object) -> None:
    """Run ``wait(*args)`` on a daemon thread, unless the calls are closed: the
    interpreter exits, and nothing need be reaped (nor a thread started) then."""
    if not _closed.is_set():
        threading.Thread(target=wait, args=args, name="nvrx-seghealth-reaper", daemon=True).start()


def _reap_when_done(key: str, entry: _Stuck, record: subprocess.Popen[bytes] | None) -> None:
    """Wait for an abandoned helper to exit (its call returned), then forget it.

    ``waitpid`` sleeps interruptibly, so this thread does not keep the process from
    exiting.
    """
    assert entry.helper is not None
    entry.helper.process.wait()
    if record is not None:
        record.wait()  # its stdin, the helper's replies, has reached end of file
    with _registry_lock:
        if _stuck.get(key) is entry:
            del _stuck[key]


class HelperClient:
    """Bounded calls into one kind of helper process (see the module doc).

    Args:
        name: the helper's name in error messages (``stat``: "the stat helper process").
        argv: what follows ``python -I -S`` to run the helper, e.g. ``["-c", CODE]`` or
            a script's path. The helper writes :data:`READY` and a newline on stdout once
            it can serve, then reads requests on stdin and answers each with one line on
            stdout; at end of file on stdin it exits.
        tag: the helper's last command-line argument, to recognise it.
    """

    def __init__(self, name: str, argv: Sequence[str], tag: str) -> None:
        self._name = name
        self._argv = [*argv, tag]
        self._lock = threading.Lock()
        self._helper: _Helper | None = None

    def start(self) -> None:
        """Start the helper now, unless a live one is ready, so that the first call
        does not wait for it. Blocks until it is ready (at most :data:`STARTUP_TIMEOUT`
        seconds per interpreter tried); safe to call again and from any thread.

        Raises:
            HelperStartError: no helper process could be started.
        """
        with self._lock:
            self._ready_helper()

    def _ready_helper(self) -> _Helper:
        """The live helper, started if need be. Called with the lock held."""
        if self._helper is not None and self._helper.process.poll() is not None:
            self._helper.close()  # it died since the last call
            self._helper = None
        if self._helper is None:
            self._helper = _Helper(self._name, self._argv)
        return self._helper

    def call(self, key: str, request: bytes, timeout: float, *, subject: str = "") -> bytes:
        """Send ``request`` (bytes the helper reads as one request) and return the
        reply line, without its newline, waiting at most ``timeout`` seconds for it.
        ``subject`` names the call in a :class:`HelperTimeout` (default: ``key``).

        The bound covers waiting for another thread's call and for the reply; starting
        a helper, when one must be started, comes before it (bounded by
        :data:`STARTUP_TIMEOUT`).

        Raises:
            HelperStartError: no helper process could be started.
            OSError: the helper died, or its pipe broke, during the call.
            HelperTimeout: no answer within ``timeout``, or an earlier call with ``key``
                is still stuck (this one was not sent).
            CallsClosed: the calls are closed (:func:`close_calls`).
        """
        subject = subject or key
        queued = time.monotonic()
        if not self._lock.acquire(timeout=max(timeout, 0.0)):
            raise HelperTimeout(subject, key, time.monotonic() - queued)
        try:
            _refuse_when_closed()
            waited = stuck_for(key)
            if waited is not None:
                raise HelperTimeout(subject, key, waited, earlier=True)
            queued_for = time.monotonic() - queued
            helper = self._ready_helper()
            started, sent = time.monotonic(), time.time()
            try:
                reply = helper.ask(request, started + timeout - queued_for)
            except BaseException:  # the helper died, or a signal handler ended the wait
                self._abandon(key, helper, sent)
                raise
            if reply is None:
                self._abandon(key, helper, sent)
                raise HelperTimeout(subject, key, queued_for + time.monotonic() - started)
            return reply
        finally:
            self._lock.release()

    def _abandon(self, key: str, helper: _Helper, started: float) -> None:
        """Give up ``helper``, stuck in a call with ``key`` since ``started`` (epoch
        seconds). Called with the lock held."""
        self._helper = None
        _record(key, helper, started)
