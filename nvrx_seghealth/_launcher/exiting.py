"""No thread of a launcher returns from a store call while its interpreter finalizes.

A daemon thread that returns from a store call then is ended inside pybind11's GIL guard,
and the launcher dies by SIGABRT instead of with its exit code. Such threads may well run
then: torch's agent leaves on SIGTERM without ``shutdown()``, and never stops its
keep-alive. So an ``atexit`` hook, which runs before the interpreter finalizes:

1. tells every thread registered with :func:`join_at_exit` to stop, and closes the calls
   into helper processes (:func:`~.._decision.helperprocess.close_calls`);
2. waits, within :data:`EXIT_WAIT` seconds in all, for those threads to end, and for
   every ``quiet`` registered with :func:`quiet_at_exit` to say its thread makes no
   store call any more;
3. then shuts down the connections of the stores registered with :func:`shut_at_exit`
   (one WARNING), so every call on them ends now, and waits once more.

A call on a store not registered may still be pending after that: the exit waits for it
one more :data:`EXIT_WAIT`, with one WARNING.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import socket
import threading
import time
import weakref
from collections.abc import Callable

from torch.distributed import PrefixStore, Store, TCPStore

from .._decision.helperprocess import close_calls

__all__ = ["EXIT_WAIT", "forget", "join_at_exit", "quiet_at_exit", "shut_at_exit"]

log = logging.getLogger(__name__)

#: Seconds the exit waits, in all, for store calls in progress before it shuts their
#: stores' connections down.
EXIT_WAIT = 2.0

# The threads to stop and join, with their stop events (a thread leaves when it ends).
_threads: dict[threading.Thread, threading.Event] = {}
# Other owners' quiet methods, held weakly.
_quiets: list[weakref.WeakMethod[Callable[[float], bool]]] = []
# The stores' endpoints: (port, the addresses of its host).
_endpoints: set[tuple[int, frozenset[str]]] = set()
# The address families of a TCPStore's connections.
_STORE_FAMILIES = (socket.AF_INET, socket.AF_INET6)


def join_at_exit(thread: threading.Thread, stopped: threading.Event) -> None:
    """At exit, set ``stopped`` and wait for ``thread`` to end; the thread calls
    :func:`forget` when it ends earlier."""
    _threads[thread] = stopped


def forget(thread: threading.Thread) -> None:
    """``thread`` has ended: the exit need not wait for it."""
    _threads.pop(thread, None)


def quiet_at_exit(quiet: Callable[[float], bool]) -> None:
    """Call the bound method ``quiet(timeout)`` at exit, unless its object is gone by then
    (it is held weakly).

    ``quiet`` keeps a thread of another owner out of store calls from then on, waiting at
    most ``timeout`` seconds for its call in progress, and returns whether it is out.
    It may be called again (after the stores' connections were shut down).
    """
    _quiets[:] = [alive for alive in _quiets if alive() is not None]
    _quiets.append(weakref.WeakMethod(quiet))


def shut_at_exit(store: Store | None) -> None:
    """Shut down ``store``'s connections at exit when a call on it has not returned within
    :data:`EXIT_WAIT` seconds. A TCPStore (or a PrefixStore on one); others have none."""
    while isinstance(store, PrefixStore):
        store = store.underlying_store
    if not isinstance(store, TCPStore):
        return
    try:
        addresses = {str(info[4][0]) for info in socket.getaddrinfo(store.host, store.port)}
    except (OSError, UnicodeError):
        addresses = set()  # any address, at that port
    _endpoints.add((store.port, frozenset(_plain(address) for address in addresses)))


def _plain(address: str) -> str:
    """An IPv4 address mapped into IPv6 (``::ffff:a.b.c.d``) as ``a.b.c.d``."""
    return address.removeprefix("::ffff:")


def _shut_connections() -> int:
    """Shut down every TCP connection of this process to a registered store; how many."""
    shut = 0
    for name in os.listdir("/proc/self/fd"):
        try:
            if not os.readlink(f"/proc/self/fd/{name}").startswith("socket:"):
                continue
            duplicate = os.dup(int(name))
        except OSError:
            continue
        try:
            connection = socket.socket(fileno=duplicate)
        except OSError:
            os.close(duplicate)
            continue
        with connection, contextlib.suppress(OSError):
            if connection.family not in _STORE_FAMILIES or connection.type != socket.SOCK_STREAM:
                continue  # a store's connection is TCP; a netlink socket's peer is (0, 0)
            address, port = connection.getpeername()[:2]
            address = _plain(address)
            if any(port == p and (not a or address in a) for p, a in _endpoints):
                connection.shutdown(socket.SHUT_RDWR)  # the shared socket, not only this dup
                shut += 1
    return shut


def _settle(deadline: float) -> bool:
    """Wait until every thread has ended and every quiet is out, until ``deadline``;
    whether all are."""
    settled = True
    for thread in list(_threads):
        thread.join(max(0.0, deadline - time.monotonic()))
        settled = settled and not thread.is_alive()
    for reference in _quiets:
        quiet = reference()
        try:
            out = quiet is None or quiet(max(0.0, deadline - time.monotonic()))
        except Exception as error:  # noqa: BLE001  (the exit goes on: the others are waited for)
            log.warning("Could not stop a thread at exit (%s: %s)", type(error).__name__, error)
            out = True
        settled = settled and out
    return settled


@atexit.register
def _at_exit() -> None:
    """See the module doc."""
    for stopped in list(_threads.values()):
        stopped.set()
    close_calls()
    if _settle(time.monotonic() + EXIT_WAIT):
        return
    try:
        shut = _shut_connections()
    except Exception as error:  # noqa: BLE001  (the second wait must still run)
        log.warning(
            "Could not shut the store connections at exit (%s: %s)", type(error).__name__, error
        )
        shut = 0
    log.warning(
        "A store call has not returned %g s after the launcher began to exit; %d connection(s) "
        "to the rendezvous store shut down so that it ends before the interpreter finalizes",
        EXIT_WAIT,
        shut,
    )
    if not _settle(time.monotonic() + EXIT_WAIT):
        log.warning("A thread is still in a call at exit; the launcher exits without it")
