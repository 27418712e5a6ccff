"""No thread of a launcher returns from a store call while its interpreter finalizes.

A daemon thread that returns from a store call (C++ through pybind11, the GIL released)
while the interpreter finalizes ends the process by SIGABRT (``terminate called without
an active exception``) instead of its exit code. Each case runs a fresh interpreter
that starts the threads (the launcher's periodic threads, torch's keep-alive of a
wrapped handler) and leaves its main thread, as torchrun's does on SIGTERM (torch's
agent then calls no ``shutdown()``), and reads the exit code.

Some cases serve the store from a child process that the script stops (SIGSTOP) once a
thread is in a call to it, and resumes while the interpreter finalizes (from an object
held by ``sys``, whose attributes are cleared last): a call still pending then returns
during finalization, and the process aborts, every time. A thread that the exit has
taken out of its call survives it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap

# Looks that are in a TCPStore call nearly all the time: one returning while the
# interpreter finalizes would abort the process.
_STORE_CALLS = """
import datetime, threading
from torch.distributed import TCPStore
from nvrx_seghealth._launcher.periodic import PeriodicThread

store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                 timeout=datetime.timedelta(seconds=30))
store.set("key", "value")
looked = threading.Event()

class Looker:
    def look(self):
        for _ in range(200):
            store.get("key")
        looked.set()
        return True

looker = Looker()
thread = PeriodicThread(looker.look, 0.001, name="test-looks")
looked.wait(60)
for _ in range(50):  # the main thread leaves while the looks' store calls run
    store.get("key")
"""

#: The stopped store's timeout: far beyond the test's patience (and never reached:
#: a call on a stopped store does not end at its timeout).
STORE_TIMEOUT = 600

# A store served by a child process (its pid on stdout's first line, for the test to
# kill), a way to stop it, and an object that resumes it while the interpreter finalizes:
# held by ``sys``, whose attributes are cleared after every module's.
_STOPPED_STORE = f"""
import datetime, functools, os, signal, subprocess, sys, time
from torch.distributed import TCPStore

SERVE = '''
import os, time
from torch.distributed import TCPStore
store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
print(store.port, flush=True)
parent = os.getppid()
while os.getppid() == parent:
    time.sleep(0.2)
'''
server = subprocess.Popen([sys.executable, "-c", SERVE], stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL, text=True)
print("server", server.pid, flush=True)
port = int(server.stdout.readline())
store = TCPStore("127.0.0.1", port, is_master=False,
                 timeout=datetime.timedelta(seconds={STORE_TIMEOUT}))
store.set("key", "value")

def stop_the_store():
    os.kill(server.pid, signal.SIGSTOP)

class ResumeWhileFinalizing:
    def __init__(self, pid):
        self.resume = functools.partial(os.kill, pid, signal.SIGCONT)
        self.sleep = time.sleep

    def __del__(self):
        self.resume()  # a call still pending returns now
        self.sleep(1)

sys.resume_while_finalizing = ResumeWhileFinalizing(server.pid)
"""

# A look whose store call (on a store registered with shut_at_exit, as the handler's
# are) is still pending when the main thread leaves, and would be until the store's
# timeout: torch's client then waits, unbounded, for the store to cancel the call.
_PENDING_LOOK = """
import threading
from nvrx_seghealth._launcher.exiting import shut_at_exit
from nvrx_seghealth._launcher.periodic import PeriodicThread

shut_at_exit(store)

calling = threading.Event()

class Looker:
    def look(self):
        calling.set()
        try:
            store.get("key")
        except Exception:  # the store's timeout
            pass
        return True

stop_the_store()
looker = Looker()
thread = PeriodicThread(looker.look, 0.001, name="test-pending")
calling.wait(60)
"""

# torch's keep-alive timer of a wrapped dynamic handler, in its store call when the main
# thread leaves (torch stops that timer only in shutdown() and next_rendezvous()).
_PENDING_KEEP_ALIVE = f"""
from torch.distributed.elastic.rendezvous import RendezvousParameters, c10d_rendezvous_backend
from torch.distributed.elastic.rendezvous.dynamic_rendezvous import create_handler
from nvrx_seghealth import SegmentHealthRendezvousHandler

params = RendezvousParameters(
    backend="c10d", endpoint=f"127.0.0.1:{{port}}", run_id="exit", min_nodes=1, max_nodes=1,
    is_host="false", read_timeout="{STORE_TIMEOUT}", keep_alive_interval="1")
backend, rendezvous_store = c10d_rendezvous_backend.create_backend(params)
inner = create_handler(rendezvous_store, backend, params)
handler = SegmentHealthRendezvousHandler(inner, store=rendezvous_store, directory=None)
handler.next_rendezvous()  # a world of one: the keep-alive timer runs

def in_store_call():
    for frame in sys._current_frames().values():
        while frame is not None:
            if frame.f_code.co_name == "_call_store":  # torch's c10d backend
                return True
            frame = frame.f_back
    return False

stop_the_store()
deadline = time.monotonic() + 60
while not in_store_call():
    assert time.monotonic() < deadline, "no keep-alive called the store"
    time.sleep(0.01)
"""

# A look in a bounded call that does not answer (its helper never replies; on a hung
# mount, a stat) when the main thread leaves.
_HUNG_CALL = """
import threading
from nvrx_seghealth._decision.helperprocess import HelperClient
from nvrx_seghealth._launcher.periodic import PeriodicThread

SILENT = '''
import os
os.write(1, b"nvrx-seghealth-helper-ready\\\\n")
while os.read(0, 65536):
    pass
'''
client = HelperClient("silent", ["-c", SILENT], "nvrx-seghealth-test-silent")
client.start()
calling = threading.Event()

class Looker:
    def look(self):
        calling.set()
        try:
            client.call("key", b"request\\n", 600)
        finally:
            print("look-ended", flush=True)
        return True

looker = Looker()
thread = PeriodicThread(looker.look, 0.001, name="test-hung")
calling.wait(60)
"""


def _run(code: str) -> str:
    """Run ``code`` in a fresh interpreter; fail unless it exits with 0; its stdout.

    The store server a script started (``server <pid>`` on stdout) is killed after it.
    """
    process = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=120)
    finally:
        process.kill()
        process.wait()
    words = stdout.split()
    if "server" in words:
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(words[words.index("server") + 1]), signal.SIGKILL)
    assert process.returncode == 0, (process.returncode, stderr[-2000:])
    return stdout


def test_the_exit_waits_for_looks_in_a_store_call() -> None:
    """Without the wait at exit this interpreter ends by SIGABRT (``terminate called
    without an active exception``) in nearly every run; with it, by its own exit code."""
    for _ in range(3):
        _run(_STORE_CALLS)


def test_a_store_call_that_does_not_answer_ends_before_the_interpreter_finalizes() -> None:
    """The look's store call does not answer (the store is stopped) and would return
    while the interpreter finalizes: after EXIT_WAIT the exit shuts the store's
    connection down, so that the call ends first (a mere bound on the wait, as 2 s
    was, aborts here)."""
    _run(_STOPPED_STORE + _PENDING_LOOK)


# A netlink socket (whose peer is ``(0, 0)``, no address) opened before the store's
# connection, so the exit meets it first among the process's sockets.
_NETLINK_FIRST = """
import socket
netlink = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
netlink.bind((0, 0))
"""


def test_a_netlink_socket_does_not_keep_the_exit_from_shutting_the_stores_connection() -> None:
    """A launcher that holds a NETLINK_ROUTE socket at exit: only TCP connections are
    looked at, so the store's is still shut down and the pending call ends before the
    interpreter finalizes (reading the netlink peer as an address raised in the hook,
    which skipped the shutdown, and the process aborted)."""
    _run(_NETLINK_FIRST + _STOPPED_STORE + _PENDING_LOOK)


def test_the_exit_keeps_torchs_keep_alive_of_a_wrapped_handler_out_of_store_calls() -> None:
    """torch's rendezvous keep-alive thread of the inner handler is in a store call that
    does not answer when the main thread leaves (torch stops that thread only in
    ``shutdown()`` and ``next_rendezvous()``): the wrapper's exit ends that call and
    keeps the thread out of later ones before the interpreter finalizes (torch alone,
    or the wrapper before, aborts here)."""
    _run(_STOPPED_STORE + _PENDING_KEEP_ALIVE)


def test_a_look_in_a_call_that_does_not_answer_ends_at_the_exit() -> None:
    """The look waits up to 600 s for a helper that never answers (as a stat on a hung
    mount does): the exit ends that wait at once, so the look ends before the
    interpreter finalizes and does not hold the exit (the run's timeout, 120 s, fails
    a look that does)."""
    assert "look-ended" in _run(_HUNG_CALL).split()
