"""The helper-process client on its own, with an echo helper that can be made to hang
(``sleep``) or to die (``exit``) in the middle of a call. Other processes' calls are
real processes running the same client (``python -c``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.waits import AT_ONCE_BOUND
from nvrx_seghealth._decision import helperprocess
from nvrx_seghealth._decision.helperprocess import (
    STUCK_TAG,
    HelperClient,
    HelperStartError,
    HelperTimeout,
)
from nvrx_seghealth._errors import SegmentHealthError

ECHO = r"""
import os, sys, time
os.write(1, b"nvrx-seghealth-helper-ready\n")
for line in sys.stdin.buffer:
    if line.startswith(b"sleep "):
        time.sleep(float(line.split()[1]))
    if line.startswith(b"hold "):  # hold PATH SECONDS: touch PATH, sleep, remove PATH
        _, path, seconds = line.split()
        open(path, "w").close()
        time.sleep(float(seconds))
        os.remove(path)
    if line.startswith(b"behind "):  # behind PATH SECONDS: wait until PATH is gone, sleep
        _, path, seconds = line.split()
        while os.path.exists(path):
            time.sleep(0.01)
        time.sleep(float(seconds))
    if line == b"exit\n":
        os._exit(3)
    os.write(1, line)
"""


TAG = "nvrx-seghealth-test-helper"
#: Keys of this process's calls: a key abandoned here is refused to every process of the
#: account while its helper is stuck, so tests running beside these (pytest-xdist
#: workers) must not share them.
A = f"a-{uuid.uuid4().hex}"
B = f"b-{uuid.uuid4().hex}"


@pytest.fixture
def client() -> Iterator[HelperClient]:
    made = HelperClient("echo", ["-c", ECHO], TAG)
    yield made
    close(made)


def close(client: HelperClient) -> None:
    """Close the idle helper of a client a test made, and wait for it to exit.

    The package's clients live as long as their process; a test's ends with the test.
    Abandoned helpers are the package's to reap (``helperprocess._stuck``).
    """
    with client._lock:
        helper, client._helper = client._helper, None
    if helper is not None:
        helper.close()
        helper.process.wait(30)  # it exits at the end of its stdin


def wait_until(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)


def helper_pid(client: HelperClient) -> int:
    assert client._helper is not None
    return client._helper.process.pid


def test_replies_come_back_from_one_reused_helper(client):
    assert client.call(A, b"one\n", 5) == b"one"
    pid = helper_pid(client)
    assert client.call(B, b"two\n", 5) == b"two"
    assert helper_pid(client) == pid


def test_a_late_call_abandons_its_helper_and_holds_only_its_key(client):
    client.call(A, b"warm\n", 5)
    with pytest.raises(HelperTimeout) as late:
        client.call(A, b"sleep 1.5\n", 0.3)
    assert (late.value.key, late.value.subject, late.value.earlier) == (A, A, False)
    assert late.value.waited >= 0.3  # a timeout: the answer (after 1.5 s) was not waited for
    assert isinstance(late.value, TimeoutError) and isinstance(late.value, SegmentHealthError)
    started = time.monotonic()
    with pytest.raises(HelperTimeout) as refused:
        client.call(A, b"x\n", AT_ONCE_BOUND, subject="stat('a/x')")
    assert refused.value.earlier and time.monotonic() - started < AT_ONCE_BOUND / 2
    assert refused.value.subject == "stat('a/x')" and str(refused.value).startswith("stat('a/x'): ")
    assert client.call(B, b"other\n", 5) == b"other"  # a new helper, meanwhile
    deadline = time.monotonic() + 10
    while True:  # the abandoned helper's sleep ends, it exits, its reaper forgets it
        try:
            assert client.call(A, b"again\n", 5) == b"again"
            break
        except HelperTimeout:
            assert time.monotonic() < deadline
            time.sleep(0.05)


def test_a_call_beside_another_threads_call_has_its_own_helper_and_bound(client, tmp_path):
    """Another thread's call holds its helper for 3 s (it touched ``held`` first). A call
    made meanwhile with a bound of 1 s (shorter than what is left of the other) does
    not wait for it: it gets a helper of its own and its answer. Both helpers' pids
    differ, and once both are done one helper is kept for the next call."""
    held = tmp_path / "held"
    client.call(A, b"warm\n", 5)
    first = helper_pid(client)
    replies = []
    other = threading.Thread(
        target=lambda: replies.append(client.call(A, b"hold %s 3\n" % bytes(held), 30))
    )
    other.start()
    try:
        wait_until(held.exists)
        assert client.call(A, b"beside\n", 1.0) == b"beside"
        assert helper_pid(client) != first  # its own, kept: the other is still in its call
    finally:
        other.join(30)
    assert replies == [b"hold %s 3" % bytes(held)]
    assert helper_pid(client) != first  # one idle helper is kept; the second one exits
    wait_until(lambda: not Path(f"/proc/{first}").exists() or _zombie(first))


def test_a_call_held_behind_another_call_with_its_key_counts_its_bound_from_that_answer(
    client, tmp_path
):
    """As the kernel holds a lookup behind another of the same name: a call sent while
    another call with its key holds ``held`` (1 s) is answered only 1.5 s after that
    one. Its bound of 2 s counts from the other's answer, so it is answered."""
    held = tmp_path / "held"
    replies = []
    ahead = threading.Thread(
        target=lambda: replies.append(client.call(A, b"hold %s 1\n" % bytes(held), 30))
    )
    ahead.start()
    try:
        wait_until(held.exists)
        behind = b"behind %s 1.5" % bytes(held)
        assert client.call(A, behind + b"\n", 2.0) == behind
    finally:
        ahead.join(30)
    assert replies == [b"hold %s 1" % bytes(held)]


def test_a_call_ahead_that_does_not_answer_moves_no_bound(client, tmp_path):
    """A call ahead that is abandoned (it holds ``held`` for 20 s, its bound is 0.5 s)
    does not lengthen the bound of a call held behind it: that one ends on its own 1 s."""
    held = tmp_path / "held"
    key = f"ahead-{uuid.uuid4()}"
    failures: list[BaseException] = []

    def ahead() -> None:
        try:
            client.call(key, b"hold %s 20\n" % bytes(held), 0.5)
        except HelperTimeout as error:
            failures.append(error)

    thread = threading.Thread(target=ahead)
    thread.start()
    wait_until(held.exists)
    started = time.monotonic()
    with pytest.raises(HelperTimeout) as behind:
        client.call(key, b"behind %s 0\n" % bytes(held), 1.0)
    assert not behind.value.earlier  # it was sent, and timed out on its own bound
    assert time.monotonic() - started < 10  # not until the call ahead returned (20 s)
    thread.join(30)
    assert [error.earlier for error in failures] == [False]  # type: ignore[attr-defined]


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z"
    except OSError:
        return True


def test_a_helper_that_dies_in_a_call_is_an_oserror_and_is_replaced(client):
    client.call(A, b"warm\n", 5)
    dead = helper_pid(client)
    with pytest.raises(OSError, match="the echo helper process exited"):
        client.call(A, b"exit\n", 5)
    deadline = time.monotonic() + 10
    while True:  # refused only until the reaper has seen it exit
        try:
            assert client.call(A, b"back\n", 5) == b"back"
            break
        except HelperTimeout:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    assert helper_pid(client) != dead


def test_the_start_up_of_a_helper_is_not_part_of_a_calls_bound():
    """A helper that takes 0.5 s to be ready answers each call with a 0.05 s bound: the
    first one, and those after an abandoned call (which start a new helper)."""
    slow = HelperClient("echo", ["-c", "import time; time.sleep(0.5)" + ECHO], TAG)
    key = f"slow-{uuid.uuid4()}"
    try:
        assert [slow.call(key, b"%d\n" % n, 0.05) for n in range(3)] == [b"0", b"1", b"2"]
        with pytest.raises(HelperTimeout):
            slow.call(key, b"sleep 2\n", 0.05)
        other = f"other-{uuid.uuid4()}"
        replies = [slow.call(other, b"%d\n" % n, 0.05) for n in range(6)]
        assert replies == [b"%d" % n for n in range(6)]
    finally:
        close(slow)


def test_start_makes_the_helper_ready_ahead_of_the_first_call(client):
    client.start()
    pid = helper_pid(client)
    client.start()  # a no-op while it is ready
    assert helper_pid(client) == pid
    assert client.call(A, b"one\n", 0.05) == b"one"
    assert helper_pid(client) == pid


def test_a_helper_that_never_gets_ready_is_a_start_error_and_is_killed(monkeypatch):
    monkeypatch.setattr(helperprocess, "STARTUP_TIMEOUT", 0.3)
    monkeypatch.setattr(helperprocess, "_interpreters", lambda: [sys.executable])
    mute = HelperClient("mute", ["-c", "import time; time.sleep(60)"], TAG)
    with pytest.raises(HelperStartError, match="the mute helper process cannot be started"):
        mute.call("a", b"x\n", 5)
    assert mute._helper is None


# Another process: abandons a call with KEY (argv[1]) whose helper sleeps for argv[2] s,
# or (argv[3] == "busy") makes that call with a bound long enough; says "ready" first.
OTHER = textwrap.dedent(
    f"""
    import sys
    from nvrx_seghealth._decision.helperprocess import HelperClient, HelperTimeout
    client = HelperClient("echo", ["-c", {ECHO!r}], {TAG!r})
    key, seconds, how = sys.argv[1:]
    client.call(key, b"warm\\n", 30)
    print("ready", flush=True)
    try:
        client.call(key, b"sleep " + seconds.encode() + b"\\n", 60 if how == "busy" else 0.2)
    except HelperTimeout:
        print("abandoned", flush=True)
    """
)


def records(key: str) -> list[list[bytes]]:
    """The argv of each live stuck record of ``key``."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")[:-1]
        except OSError:
            continue
        if len(argv) >= 4 and argv[-4] == STUCK_TAG.encode() and argv[-3] == key.encode():
            found.append(argv)
    return found


def test_a_call_another_process_abandoned_refuses_the_key_at_once_until_it_returns(client):
    key = f"dir-{uuid.uuid4()}"
    other = subprocess.run(
        [sys.executable, "-c", OTHER, key, "30", "abandon"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert other.stdout.split() == ["ready", "abandoned"], other.stderr
    (record,) = records(key)  # the other process has exited; its stuck helper has not
    stuck_helper = int(record[-2])
    try:
        started = time.monotonic()
        with pytest.raises(HelperTimeout) as refused:
            client.call(key, b"x\n", AT_ONCE_BOUND)
        assert refused.value.earlier and refused.value.key == key
        assert time.monotonic() - started < AT_ONCE_BOUND / 2  # not sent: no wait for it
        assert client.call(f"elsewhere-{uuid.uuid4()}", b"y\n", 10) == b"y"
    finally:
        os.kill(stuck_helper, signal.SIGKILL)  # its call "returns": the record exits too
    wait_until(lambda: records(key) == [])
    assert client.call(key, b"z\n", 10) == b"z"


def test_a_helper_another_live_process_is_merely_using_is_not_counted_as_stuck(client):
    key = f"dir-{uuid.uuid4()}"
    other = subprocess.Popen(
        [sys.executable, "-c", OTHER, key, "3", "busy"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert other.stdout is not None and other.stdout.readline() == "ready\n"
        assert client.call(key, b"mine\n", 10) == b"mine"  # while the other's call runs
        assert records(key) == []
    finally:
        other.communicate(timeout=60)


def test_many_processes_abandoning_one_key_leave_one_stuck_helper():
    key = f"dir-{uuid.uuid4()}"
    command = [sys.executable, "-c", OTHER, key, "30", "abandon"]
    outputs = [
        subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
        for _ in range(3)
    ]
    try:
        assert outputs[0].stdout.split() == ["ready", "abandoned"]
        assert len(records(key)) == 1
        for later in outputs[1:]:  # refused before its warm-up call was sent
            assert later.returncode != 0 and "HelperTimeout" in later.stderr
    finally:
        for record in records(key):
            os.kill(int(record[-2]), signal.SIGKILL)
    wait_until(lambda: records(key) == [])


# Closes the calls while one waits for a helper that received its request (it touched
# argv[2]) and never answers; prints what each call raised and the key's stuck record.
CLOSING = textwrap.dedent(
    """
    import os, sys, threading, time
    from nvrx_seghealth._decision import helperprocess
    from nvrx_seghealth._decision.helperprocess import CallsClosed, HelperClient
    SILENT = '''
    import os, sys
    os.write(1, b"nvrx-seghealth-helper-ready\\\\n")
    os.read(0, 65536)
    open(sys.argv[-2], "w").close()
    while os.read(0, 65536):
        pass
    '''
    key, received = sys.argv[1:]
    client = HelperClient("silent", ["-c", SILENT, received], "nvrx-seghealth-test")
    raised = []
    def pending():
        try:
            client.call(key, b"request\\\\n", 600)
        except BaseException as error:
            raised.append(type(error).__name__)
    thread = threading.Thread(target=pending)
    thread.start()
    while not os.path.exists(received):
        time.sleep(0.01)
    helperprocess.close_calls()
    thread.join(60)
    try:
        client.call("elsewhere", b"request\\\\n", 600)
    except BaseException as error:
        raised.append(type(error).__name__)
    print(*raised, helperprocess.stuck_for(key) is not None, flush=True)
    """
)


def test_closing_the_calls_ends_a_pending_call_and_refuses_every_later_one(tmp_path):
    """At the interpreter's exit (``close_calls()``): a call waiting up to 600 s for a
    helper that does not answer ends at once by ``CallsClosed``, its helper is abandoned
    with its stuck record (another process sends no call there), and a later call is
    refused the same way. In a fresh interpreter: closing is for good."""
    key = f"dir-{uuid.uuid4()}"
    done = subprocess.run(
        [sys.executable, "-c", CLOSING, key, str(tmp_path / "received")],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.stdout.split() == ["CallsClosed", "CallsClosed", "True"], done.stderr[-2000:]
    wait_until(lambda: records(key) == [])  # the helper saw its stdin close: both exited
