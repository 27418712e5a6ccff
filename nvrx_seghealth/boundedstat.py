"""``os.stat`` with a time bound, for shared filesystems that can hang.

A Lustre or NFS client can block a ``stat`` for minutes, or for ever. The consumer
must not hang the launcher with it, so the call runs on a reusable daemon thread and
the caller waits at most ``timeout`` seconds. A stat that has not returned is left to
finish on its own thread; until it does, a new stat of the same path is refused at
once instead of piling up another blocked thread. At most one thread is therefore
stuck per path, and a healthy call costs one thread hand-off on top of the stat.

Standard library only.
"""

from __future__ import annotations

import _thread
import os
import queue
import threading
import time

__all__ = ["StatTimeoutError", "stat_within"]


class StatTimeoutError(TimeoutError):
    """A ``stat`` of ``path`` did not return within the bound.

    Attributes:
        path: the path whose stat is still pending.
        waited: seconds the pending stat has been running so far.
    """

    def __init__(self, path: str, waited: float) -> None:
        super().__init__(f"stat({path!r}) has not returned after {waited:.1f} s")
        self.path = path
        self.waited = waited


_Request = tuple[str, list, "_thread.LockType"]


class _StatThread:
    """One daemon thread that answers stat requests in order."""

    def __init__(self) -> None:
        self.requests: queue.SimpleQueue[_Request] = queue.SimpleQueue()
        threading.Thread(target=self._serve, name="nvrx-seghealth-stat", daemon=True).start()

    def _serve(self) -> None:
        while True:
            path, box, done = self.requests.get()
            try:
                box.append(os.stat(path))
            except OSError as error:
                box.append(error)
            with _state_lock:
                _pending.pop(path, None)
            done.release()


_state_lock = threading.Lock()
_server: _StatThread | None = None
_pending: dict[str, float] = {}  # path -> monotonic start of a stat that timed out


def stat_within(path: str, timeout: float | None) -> os.stat_result:
    """Return ``os.stat(path)`` (following symlinks), waiting at most ``timeout`` s.

    ``timeout=None`` calls ``os.stat`` directly, without a bound.

    Raises:
        OSError: whatever ``os.stat`` raised.
        StatTimeoutError: the stat did not return in time, or an earlier stat of the
            same path is still pending.
    """
    if timeout is None:
        return os.stat(path)
    global _server
    with _state_lock:
        started = _pending.get(path)
        if started is not None:
            raise StatTimeoutError(path, time.monotonic() - started)
        if _server is None:
            _server = _StatThread()
        server = _server
    box: list = []
    done = _thread.allocate_lock()
    done.acquire()
    started = time.monotonic()
    server.requests.put((path, box, done))
    if not done.acquire(timeout=timeout):
        with _state_lock:
            hung = not box
            if hung:  # leave the thread to its stat; later calls get a fresh one
                _pending[path] = started
                if _server is server:
                    _server = None
        if hung:
            raise StatTimeoutError(path, time.monotonic() - started)
    result = box[0]
    if isinstance(result, OSError):
        raise result
    return result
