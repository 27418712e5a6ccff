"""The bounded stat and its helper process.

A stat that never answers is made here by stopping the helper process (SIGSTOP): to
the caller that is exactly a helper stuck in a hung filesystem. Continuing it
(SIGCONT) is the filesystem answering. ``integration/hungmount/`` does the same with
a real hung FUSE mount.
"""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.services.stathelpers import helper_pids, only_helper
from harness.waits import AT_ONCE_BOUND
from nvrx_seghealth._decision import helperprocess
from nvrx_seghealth._decision.boundedstat import prepare, stat_within
from nvrx_seghealth._decision.decision_file import Outcome, evaluate
from nvrx_seghealth._decision.helperprocess import HelperTimeout
from nvrx_seghealth._errors import ConfigurationError


@pytest.fixture
def stopped_helper():
    """The live helper, stopped: its next stat does not answer. Continued at the end."""
    pid = only_helper()
    os.kill(pid, signal.SIGSTOP)
    yield pid
    with contextlib.suppress(ProcessLookupError):  # gone already when the test continued it
        os.kill(pid, signal.SIGCONT)


def wait_for(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)


def test_results_match_os_stat(tmp_path):
    target = tmp_path / "f"
    target.write_bytes(b"abc")
    got, want = stat_within(str(target), 5), os.stat(target)
    assert (got.st_size, got.st_mode, got.st_ino, got.st_dev) == (
        3,
        want.st_mode,
        want.st_ino,
        want.st_dev,
    )
    assert got.st_mtime == want.st_mtime and stat.S_ISREG(got.st_mode)
    with pytest.raises(FileNotFoundError):
        stat_within(str(tmp_path / "missing"), 5)
    with pytest.raises(NotADirectoryError):
        stat_within(str(target / "below"), 5)
    with pytest.raises(ValueError):
        stat_within("/a\0b", 5)
    for bad in (0, -1):
        with pytest.raises(ValueError):
            stat_within(str(target), bad)


def test_one_helper_serves_every_call():
    first = only_helper()
    for _ in range(50):
        stat_within("/", 5)
    assert helper_pids() == [first]


def test_the_helper_holds_none_of_the_callers_standard_streams():
    pid = only_helper()

    def identity(st):
        return st.st_dev, st.st_ino

    null = identity(os.stat("/dev/null"))
    ours = {identity(os.fstat(fd)) for fd in (0, 1, 2)} - {null}
    theirs = {identity(os.stat(f"/proc/{pid}/fd/{fd}")) for fd in (0, 1, 2)}
    assert not ours & theirs
    assert os.readlink(f"/proc/{pid}/fd/2") == "/dev/null"


def test_a_stat_that_does_not_answer_fails_open_within_the_bound(stopped_helper, tmp_path):
    path = str(tmp_path / "segment_health_check.1.2")
    started = time.monotonic()
    decision = evaluate(path, stat_timeout=0.3)
    assert decision.outcome is Outcome.UNREADABLE and decision.proceed
    assert time.monotonic() - started < AT_ONCE_BOUND / 2  # unbounded, it never returns


def test_a_stuck_path_is_refused_at_once_and_served_again_once_it_answers(stopped_helper, tmp_path):
    path = str(tmp_path / "segment_health_check.1.2")
    with pytest.raises(HelperTimeout) as late:
        stat_within(path, 0.2)
    assert (late.value.subject, late.value.key) == (f"stat({path!r})", str(tmp_path))
    started = time.monotonic()
    with pytest.raises(HelperTimeout) as refused:
        stat_within(path, AT_ONCE_BOUND)  # refused at once: its stat is still pending
    assert time.monotonic() - started < AT_ONCE_BOUND / 2
    assert refused.value.earlier and refused.value.subject == f"stat({path!r})"
    # So is every path of that directory (one stuck call per directory) ...
    with pytest.raises(HelperTimeout):
        stat_within(str(tmp_path / "sibling"), 10)
    # ... while other directories go to a new helper; no second process went in there.
    (tmp_path / "elsewhere").mkdir()
    other = tmp_path / "elsewhere" / "other"
    other.write_bytes(b"x")
    assert stat_within(str(other), 5).st_size == 1
    assert len(helper_pids()) == 2
    os.kill(stopped_helper, signal.SIGCONT)  # the filesystem answers ...
    wait_for(lambda: stopped_helper not in helper_pids())  # ... the abandoned helper exits

    def served_again():
        try:
            stat_within(path, 5)
        except HelperTimeout:
            return False  # its reaper has not forgotten it yet
        except FileNotFoundError:
            return True
        raise AssertionError("the missing file was found")

    wait_for(served_again, timeout=5)
    assert len(helper_pids()) == 1


def test_a_helper_that_died_is_replaced(tmp_path):
    pid = only_helper()
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: Path(f"/proc/{pid}/stat").read_text().split()[2] in "ZX")
    assert stat_within(str(tmp_path), 5).st_mode & stat.S_IFDIR
    assert pid not in helper_pids() and len(helper_pids()) == 1


def test_many_stuck_calls_leave_at_most_one_stuck_helper(stopped_helper, tmp_path):
    path = str(tmp_path / "segment_health_check.1.2")
    for _ in range(20):
        assert evaluate(path, stat_timeout=0.1).outcome is Outcome.UNREADABLE
    stat_within("/", 5)
    assert len(helper_pids()) == 2  # the stuck one and one live one


def test_timeouts_out_of_range_are_configuration_errors(tmp_path):
    for bad in (0, -1, float("inf"), float("nan"), 1e10, True, None, "soon"):
        with pytest.raises(ConfigurationError):
            evaluate(str(tmp_path / "x"), stat_timeout=bad)  # type: ignore[arg-type]  # on purpose


def test_prepare_starts_the_helper_ahead_of_the_first_stat(tmp_path):
    prepare(str(tmp_path / "x"))
    pid = only_helper()
    prepare(str(tmp_path / "x"))  # a no-op while it is ready
    assert helper_pids() == [pid]


def test_prepare_looks_for_stuck_calls_so_the_first_stat_does_not(tmp_path, monkeypatch):
    looks: list[str] = []
    read_proc = helperprocess._records

    def counted(key: str) -> object:
        looks.append(key)
        return read_proc(key)

    monkeypatch.setattr(helperprocess, "_records", counted)
    directory = tmp_path / "fresh"
    directory.mkdir()
    (directory / "x").touch()
    prepare(str(directory / "x"))
    assert looks == [str(directory)]
    assert stat_within(str(directory / "x"), 5).st_size == 0
    assert looks == [str(directory)]


SLOW_START = """
import sys
sys.executable = sys.argv[1]  # an interpreter slow to start, as one on a slow mount
from nvrx_seghealth._decision.boundedstat import stat_within
print(" ".join(str(stat_within(sys.argv[2], float(sys.argv[3])).st_size) for _ in range(6)))
"""
#: The bound of each stat of the slow-start test: a stat's answer takes milliseconds, and
#: a second leaves room for a loaded machine to schedule the helper and the caller.
SHORT_BOUND = 1.0
#: How long the helper's interpreter takes to start there: three bounds.
SLOW_START_SECONDS = 3 * SHORT_BOUND


def test_a_helper_slow_to_start_does_not_use_up_a_short_bound(tmp_path):
    """Each of 6 stats with a short bound gives the real result though the helper's
    interpreter takes three such bounds to start: the start-up is outside the bound."""
    slow = tmp_path / "slow-python"
    slow.write_text(f'#!/bin/sh\nsleep {SLOW_START_SECONDS}\nexec {sys.executable} "$@"\n')
    slow.chmod(0o755)
    decision = tmp_path / "segment_health_check.1.1"
    decision.write_text("n1: ECC\n")
    done = subprocess.run(
        [sys.executable, "-c", SLOW_START, str(slow), str(decision), str(SHORT_BOUND)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["8"] * 6
