"""A periodic thread's look never outlives the interpreter's exit in a native call.

Each case runs a fresh interpreter that starts a :class:`PeriodicThread` and leaves its
main thread, as torchrun's does on SIGTERM (torch's agent never calls the handler's
``shutdown()`` then), and reads the exit code.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

from nvrx_seghealth._launcher.periodic import EXIT_WAIT

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

# A look that never ends by itself.
_ENDLESS_LOOK = """
import threading
from nvrx_seghealth._launcher.periodic import PeriodicThread

inside = threading.Event()

class Looker:
    def look(self):
        inside.set()
        threading.Event().wait(600)
        return True

looker = Looker()
thread = PeriodicThread(looker.look, 0.001, name="test-endless")
inside.wait(60)
"""


def _assert_exits_cleanly(code: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])


def test_the_exit_waits_for_looks_in_a_store_call() -> None:
    """Without the wait at exit this interpreter ends by SIGABRT (``terminate called
    without an active exception``) in nearly every run; with it, by its own exit code."""
    for _ in range(3):
        _assert_exits_cleanly(_STORE_CALLS)


def test_a_look_that_does_not_end_holds_the_exit_only_for_the_bound() -> None:
    """The look waits 600 s; the interpreter exits after at most EXIT_WAIT of it (the
    run's timeout, 120 s, fails an unbounded wait)."""
    assert EXIT_WAIT < 120
    _assert_exits_cleanly(_ENDLESS_LOOK)
