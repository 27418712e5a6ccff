"""Calls that may hang for good, made in a helper process and bounded in time.

A hung Lustre or NFS client can block a filesystem call for ever, and no signal wakes it.
So such calls run in a small helper process, ``python -I -S``, tagged in ``ps``.
A :class:`HelperClient` talks to it. docs/concepts.md, "A hung decision directory", tells the
story. The rules:

- A helper is started once, outside every call's bound, and reused.
- Each call's bound is its own: a call never waits behind another thread's call
  (:class:`_Flight`).
- A call without an answer in time raises :class:`HelperTimeout` and abandons its helper;
  the helper exits, and is reaped, once its call returns.
- A key names what a call may hang on. Once a helper with that key is abandoned, calls with
  the key are refused at once, in every process of the account (:func:`_record`).
- A helper holds none of the caller's standard streams, so it never holds the caller's exit
  or a reader of its output.
- :func:`close_calls` ends every pending call at the interpreter's exit.
- A call without an answer says ``no answer after N s``: slow and hung look the same.

One module, over the package's 400 lines: a call's path, from an idle helper to its
abandonment and its end at exit, keeps every rule above.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import select
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence

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

#: The first argument after the code of a stuck record (:func:`_record`).
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
        waited: seconds the call waited for its answer (not starting a helper);
            ``earlier``: seconds the earlier call has been stuck.
        earlier: the call was not sent: an earlier call with ``key`` is still stuck
            (:func:`stuck_for`).
    """

    def __init__(self, subject: str, key: str, waited: float, *, earlier: bool = False) -> None:
        what = (
            f"not sent, an earlier call in {key} is still stuck after"
            if earlier
            else "no answer after"
        )
        super().__init__(f"{subject}: {what} {waited:.1f} s")
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

    def line(self, deadline: Callable[[], float]) -> bytes | None:
        """The next line (without its newline), or ``None`` once the monotonic time
        ``deadline()`` passed (asked again each time it seems to: it may have moved).

        Raises:
            OSError: the helper exited (its stdout reached end of file).
            CallsClosed: :func:`close_calls` was called.
        """
        while b"\n" not in self.unread:
            remaining = deadline() - time.monotonic()
            events = self.poller.poll(max(1, int(remaining * 1000) + 1)) if remaining > 0 else []
            _refuse_when_closed()
            if not any(fd == self.fd for fd, _ in events):  # read only what has data
                if time.monotonic() >= deadline():
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
            limit = time.monotonic() + STARTUP_TIMEOUT
            ready = self.replies.line(lambda: limit)
        except BaseException:
            self.discard()
            raise
        if ready != READY:
            self.discard()
            said = "nothing" if ready is None else repr(ready[:80])
            raise OSError(errno.ETIMEDOUT, f"not ready within {STARTUP_TIMEOUT:g} s (said {said})")

    def ask(self, request: bytes, deadline: Callable[[], float]) -> bytes | None:
        """Send ``request``; the reply line (without its newline), or ``None`` once the
        monotonic time ``deadline()`` has passed.

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


class _Flight:
    """One call in flight since ``sent`` (monotonic), behind the calls with its key that
    were in flight then (``ahead``); ``answered``: when its answer came (monotonic).

    The kernel may hold a call behind another with the same key: Linux looks up one name
    at a time. So the bound counts from the last answer of a call ahead, if one answers
    while this one waits. A call ahead that never answers moves nothing.
    """

    def __init__(self, ahead: list[_Flight]) -> None:
        self.ahead = ahead
        self.sent = time.monotonic()
        self.answered: float | None = None

    def deadline(self, timeout: float) -> float:
        """When the call's bound of ``timeout`` seconds ends: counted from its sending, or
        from the last answer of a call ahead of it, whichever came later."""
        answers = [call.answered for call in self.ahead if call.answered is not None]
        return max([self.sent, *answers]) + timeout


# Calls in flight and stuck calls by key, for every client of this process.
_registry_lock = threading.Lock()
_flights: dict[str, list[_Flight]] = {}


@contextlib.contextmanager
def _flying(key: str) -> Iterator[_Flight]:
    """A call with ``key`` is in flight for the time of the ``with`` block."""
    with _registry_lock:
        flying = _flights.setdefault(key, [])
        flight = _Flight(list(flying))
        flying.append(flight)
    try:
        yield flight
    finally:
        with _registry_lock:
            flying.remove(flight)
            if not flying:
                del _flights[key]


# Stuck calls: more than one for a key when calls were in flight together. Keys already
# looked up in /proc.
_stuck: dict[str, list[_Stuck]] = {}
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
    """Seconds the oldest abandoned call with ``key`` has been stuck, or ``None`` when a
    call with ``key`` would be sent.

    The first query of a ``key`` in this process also looks for other processes'
    stuck records of it (:func:`_record`).
    """
    with _registry_lock:
        if key not in _looked_up:
            _looked_up.add(key)
            found = _records(key)
            if found is not None:
                _stuck.setdefault(key, []).append(found)
        entries = [entry for entry in _stuck.pop(key, []) if entry.alive()]
        if not entries:
            return None
        _stuck[key] = entries
    return max(0.0, time.time() - min(entry.started for entry in entries))


def _record(key: str, helper: _Helper, started: float) -> None:
    """Register ``helper``, abandoned in a call with ``key`` since ``started`` (epoch),
    start its stuck record, and reap both on a daemon thread once the helper exits.

    The stuck record tells other processes of the account that ``key`` hangs. It is a
    small sleeping process whose command line ends ``STUCK_TAG <key> <helper pid> <start>``.
    It holds the helper's reply pipe, so it exits exactly when the helper does.
    :func:`stuck_for` looks for a live one in ``/proc`` at a process's first call with a key.
    A helper killed in its call has no record, so each such kill may leave one more stuck.
    """
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
        _stuck.setdefault(key, []).append(entry)
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
        entries = _stuck.get(key, [])
        if entry in entries:
            entries.remove(entry)
        if not entries:
            _stuck.pop(key, None)


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
        self._lock = threading.Lock()  # guards the idle helper only, never a call
        self._helper: _Helper | None = None  # the idle helper, ready for the next call

    def start(self) -> None:
        """Start the helper now, unless a live one is ready, so that the first call
        does not wait for it. Blocks until it is ready (at most :data:`STARTUP_TIMEOUT`
        seconds per interpreter tried); safe to call again and from any thread.

        Raises:
            HelperStartError: no helper process could be started.
        """
        self._keep(self._take())

    def _take(self) -> _Helper:
        """The idle helper if it lives, else a new one; the caller has it to itself."""
        with self._lock:
            helper, self._helper = self._helper, None
        if helper is not None and helper.process.poll() is None:
            return helper
        if helper is not None:
            helper.close()  # it died since its last call
        return _Helper(self._name, self._argv)

    def _keep(self, helper: _Helper) -> None:
        """Keep ``helper``, which answered its call, for the next call; one idle helper
        is enough, so a second one is closed (it exits at the end of its stdin)."""
        with self._lock:
            if self._helper is None:
                self._helper = helper
                return
        helper.close()
        _reap(helper.process.wait)

    def call(self, key: str, request: bytes, timeout: float, *, subject: str = "") -> bytes:
        """Send ``request`` (bytes the helper reads as one request) and return the
        reply line, without its newline, waiting for it ``timeout`` seconds of its own.
        ``subject`` names the call in a :class:`HelperTimeout` (default: ``key``).

        The bound is the call's own: it covers waiting for the reply only, counted
        from the call's sending, or from the last answer of a call with ``key`` that
        was in flight ahead of it (:meth:`_Flight.deadline`). A call made while another
        thread's call is in flight gets a helper of its own instead of waiting for
        that call. Starting a helper, when one must be started, comes before the bound
        (bounded by :data:`STARTUP_TIMEOUT`).

        Raises:
            HelperStartError: no helper process could be started.
            OSError: the helper died, or its pipe broke, during the call.
            HelperTimeout: no answer within ``timeout``, or an earlier call with ``key``
                is still stuck (this one was not sent).
            CallsClosed: the calls are closed (:func:`close_calls`).
        """
        subject = subject or key
        _refuse_when_closed()
        waited = stuck_for(key)
        if waited is not None:
            raise HelperTimeout(subject, key, waited, earlier=True)
        helper = self._take()
        with _flying(key) as flight:
            sent = time.time()
            try:
                reply = helper.ask(request, lambda: flight.deadline(timeout))
            except BaseException:  # the helper died, or a signal handler ended the wait
                _record(key, helper, sent)
                raise
            if reply is None:
                _record(key, helper, sent)
                raise HelperTimeout(subject, key, time.monotonic() - flight.sent)
            flight.answered = time.monotonic()
        self._keep(helper)
        return reply
