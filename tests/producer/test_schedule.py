"""When ``publish-drained --interval`` runs its passes, and what its signals do to them;
how a block without a sleep (``--once``, the demo) is stopped (``stop_signals``).

The schedule runs in a child program with its real signal handlers. Most signals reach a
process's main thread while it waits, as the command's own tests
(``tests/commands/test_publish_drained.py``) send them; here they land beside the main
thread (:class:`harness.services.stopsignals.SignalledChild`), as one does that arrives just
before the main thread blocks in its wait.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time

from harness.commands import in_the_foreground
from harness.services.stopsignals import SignalledChild
from harness.waits import wait_until

#: One pass, then one each time SIGUSR1 asks; each pass prints why it runs.
SLEEPER = """
from nvrx_seghealth._producer.schedule import PassSchedule
with PassSchedule(600) as schedule:
    for wake in schedule.passes():
        print(wake.value, flush=True)
print("ended", flush=True)
"""


def test_a_wake_signal_that_lands_as_the_sleep_begins_runs_a_pass_now():
    """The main thread sleeps until the next pass (600 s) when SIGUSR1 arrives beside it:
    the pass runs at once all the same; so does the end on SIGTERM."""
    with SignalledChild(SLEEPER) as child:
        assert child.next_line() == "start"
        wait_until(child.waiting)
        child.send(signal.SIGUSR1)
        assert child.next_line() == "signal"
        wait_until(child.waiting)
        child.send(signal.SIGTERM)
        assert child.next_line() == "ended"
        assert child.process.wait(60) == 0


def test_a_stop_signal_that_lands_as_the_sleep_begins_ends_the_passes_at_once():
    with SignalledChild(SLEEPER) as child:
        assert child.next_line() == "start"
        wait_until(child.waiting)
        child.send(signal.SIGTERM)
        assert child.next_line() == "ended"
        assert child.process.wait(60) == 0


#: Passes one millisecond apart for 3 s, whatever signals arrive; SIGUSR1 is ignored after.
BUSY = """
import signal, time
from nvrx_seghealth._producer.schedule import PassSchedule
with PassSchedule(0.001) as schedule:
    print("ready", flush=True)
    end = time.monotonic() + 3
    for wake in schedule.passes():
        if time.monotonic() > end:
            break
signal.signal(signal.SIGUSR1, signal.SIG_IGN)
print("done", flush=True)
"""


def test_a_flood_of_wake_signals_never_stops_the_schedule():
    """SIGUSR1 every millisecond while the schedule goes from pass to sleep and back:
    each one lands wherever the main thread is, and none of them hangs or ends it."""
    child = subprocess.Popen([sys.executable, "-c", BUSY], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None  # a pipe
    try:
        assert child.stdout.readline() == "ready\n"
        deadline = time.monotonic() + 60
        while child.poll() is None and time.monotonic() < deadline:
            child.send_signal(signal.SIGUSR1)
            time.sleep(0.001)
        assert child.wait(1) == 0
        assert child.stdout.read() == "done\n"
    finally:
        child.kill()
        child.communicate()


#: stop_signals' contract, one line per case: the first signal interrupts, a later one
#: is ignored, a signal ignored on entry stays ignored, a stop inside stops_held waits
#: for the held block's end, and the previous handlers come back.
ONE_BLOCK = """
import signal
from nvrx_seghealth._producer.schedule import Stopped, stop_signals, stops_held

def previous(signum, frame):
    print("previous handler", signal.Signals(signum).name, flush=True)

signal.signal(signal.SIGTERM, previous)
signal.signal(signal.SIGHUP, signal.SIG_IGN)
try:
    with stop_signals((signal.SIGINT, signal.SIGTERM, signal.SIGHUP)):
        signal.raise_signal(signal.SIGHUP)
        print("SIGHUP ignored", flush=True)
        try:
            with stops_held():
                signal.raise_signal(signal.SIGTERM)
                print("held", flush=True)
        except Stopped as stopped:
            print("stopped by", stopped.signal.name, "after the held block", flush=True)
        signal.raise_signal(signal.SIGINT)
        print("a later signal ignored", flush=True)
except Stopped:
    print("not expected: a second Stopped", flush=True)
signal.raise_signal(signal.SIGTERM)
print("SIGHUP still", signal.getsignal(signal.SIGHUP) is signal.SIG_IGN and "ignored", flush=True)
"""


def test_stop_signals_stops_once_keeps_ignored_signals_and_restores_the_handlers():
    done = subprocess.run(
        [sys.executable, "-c", ONE_BLOCK], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "SIGHUP ignored",
        "held",
        "stopped by SIGTERM after the held block",
        "a later signal ignored",
        "previous handler SIGTERM",
        "SIGHUP still ignored",
    ]


#: Started with SIGINT ignored: a SIGINT inside --once's block, then the schedule.
IGNORED_AT_START = """
import signal
from nvrx_seghealth._producer.schedule import PassSchedule, Stopped, stop_signals
with stop_signals():
    signal.raise_signal(signal.SIGINT)
    print("one pass ran on", flush=True)
try:
    with PassSchedule(600) as schedule:
        for wake in schedule.passes():
            print(wake.value, flush=True)
except Stopped:  # during a pass
    pass
print("ended", flush=True)
"""


def test_a_stop_signal_ignored_at_start_stays_ignored_by_one_pass_and_by_the_schedule():
    """As ``nohup`` or a background job starts the producer: SIGINT ignored. Neither a
    single pass nor the schedule's sleep ends on it; SIGUSR1 still runs a pass, and
    SIGTERM, not ignored, still ends the schedule."""
    child = subprocess.Popen(
        in_the_foreground([sys.executable, "-c", IGNORED_AT_START], ignored={signal.SIGINT}),
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None  # a pipe
    try:
        assert child.stdout.readline() == "one pass ran on\n"
        assert child.stdout.readline() == "start\n"
        child.send_signal(signal.SIGINT)
        child.send_signal(signal.SIGUSR1)
        assert child.stdout.readline() == "signal\n"
        child.send_signal(signal.SIGTERM)
        assert child.stdout.readline() == "ended\n"
        assert child.wait(60) == 0
    finally:
        child.kill()
        child.communicate()
