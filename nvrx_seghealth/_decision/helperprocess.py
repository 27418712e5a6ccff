"""Calls that may hang for good, made in a helper process and bounded in time.

On a hung Lustre or NFS client a filesystem call can block for minutes, or for ever, in
an uninterruptible sleep: no signal wakes the blocked thread, and a process cannot
finish exiting while one of its threads sleeps so. So such calls run in a small helper
process instead (a fresh ``python -I -S``, its last command-line argument a tag that
names it in ``ps`` and ``/proc``), and a :class:`HelperClient` talks to it:

* The helper is started on first use, or ahead of time (:meth:`HelperClient.start`),
  and reused: a call costs one request and one reply line over two private pipes. A
  helper that died since the last call is replaced.
* Each call's bound is its own. A call made while another thread's call is in flight
  does not wait for it: it is sent at once to a helper of its own (started then,
  outside its bound), and one idle helper is kept afterwards. The kernel may still
  hold it behind a call with the same key (Linux looks a name up once at a time, and
  a second lookup waits for the first). So its bound counts from the last answer of
  a call that was in flight ahead of it, if one answers while it waits. A call ahead
  that never answers moves nothing. So a stat that must be fresh (process 0's before
  it joins a round) is never spent waiting behind a slow one (the watch's), and on a
  hung filesystem it waits its own bound, not the other call's.
* Starting a helper is not part of a call's bound: a new helper first writes
  :data:`READY` on its stdout, and the client waits for that line up to
  :data:`STARTUP_TIMEOUT` seconds (else :class:`HelperStartError`) before the call's
  own bound begins. So a short bound is not used up by an interpreter's start-up.
* A call that has not answered within its bound (:class:`HelperTimeout`), or that failed
  once sent (the helper died, or a signal handler raised and ended the wait), *abandons*
  its helper: the next call starts a new one. The abandoned helper exits on its own as
  soon as its call returns (its stdin is closed), and a daemon thread waiting for it
  reaps it then: once the filesystem answers, nothing is left behind.
* A key names what a call may hang on (a directory). **Once a helper is abandoned, no
  call with its key is sent, across the processes of one account**: while it is still
  inside its call, a new call with that key is refused at once (``HelperTimeout``,
  ``earlier``) instead of sending one more process into the hung filesystem. So a key
  has at most as many stuck helpers as calls were in flight together when the first
  was abandoned: one for a command, two for a launcher (the watch's look, a join's).
  In this process that holds for every client (a stat and a read in one directory
  share the key). For other processes,
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
* A call that gets no answer says so, ``no answer after N s``: it does not know whether
  the filesystem hangs or is only slower than the bound.

One module of about 540 lines, over the package's 400: a call's path, from the client's
idle helper to an abandonment, its stuck record and its end at exit, keeps every rule
above, and is read whole here.
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
    were in flight then (``ahead``); ``answered``: when its answer came (monotonic)."""

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
    stuck records of it (see the module doc).
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
        was in flight ahead of it (see the module doc). A call made while another
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
