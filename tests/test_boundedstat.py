"""The time bound on stat, with a hung filesystem injected (it cannot be made real here)."""

from __future__ import annotations

import os
import threading
import time

import pytest

from nvrx_seghealth.artifact import Outcome, evaluate
from nvrx_seghealth.boundedstat import StatTimeoutError, stat_within


@pytest.fixture
def hung_path(tmp_path, monkeypatch):
    """A path whose stat blocks until the test releases it; yields (path, release, calls)."""
    path = str(tmp_path / "segment_health_check.1.2")
    release = threading.Event()
    calls = []
    real_stat = os.stat

    def hanging_stat(target, *args, **kwargs):
        if target == path:
            calls.append(target)
            release.wait(60)
        return real_stat(target, *args, **kwargs)

    monkeypatch.setattr(os, "stat", hanging_stat)
    yield path, release, calls
    release.set()


def test_plain_stat_result(tmp_path):
    target = tmp_path / "f"
    target.write_bytes(b"abc")
    assert stat_within(str(target), 5).st_size == 3
    assert stat_within(str(target), None).st_size == 3
    with pytest.raises(FileNotFoundError):
        stat_within(str(tmp_path / "missing"), 5)


def test_hung_stat_fails_open_within_the_bound(hung_path):
    path, _, _ = hung_path
    started = time.monotonic()
    decision = evaluate(path, stat_timeout=0.3)
    elapsed = time.monotonic() - started
    assert decision.outcome is Outcome.UNREADABLE and decision.proceed
    assert "has not returned" in decision.reason
    assert elapsed < 5


def test_pending_stat_is_not_stacked_and_recovers(hung_path):
    path, release, calls = hung_path
    with pytest.raises(StatTimeoutError):
        stat_within(path, 0.2)
    started = time.monotonic()
    with pytest.raises(StatTimeoutError, match="has not returned"):
        stat_within(path, 10)  # refused at once: the first stat is still blocked
    assert time.monotonic() - started < 1
    assert len(calls) == 1  # no second thread was sent into the hung filesystem
    release.set()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            stat_within(path, 5)
        except StatTimeoutError:
            time.sleep(0.05)
            continue
        except FileNotFoundError:
            break
    else:
        pytest.fail("the path stayed pending after its stat returned")
    assert len(calls) == 2


def test_other_paths_are_served_while_one_hangs(hung_path, tmp_path):
    path, _, _ = hung_path
    with pytest.raises(StatTimeoutError):
        stat_within(path, 0.2)
    other = tmp_path / "other"
    other.write_bytes(b"x")
    assert stat_within(str(other), 5).st_size == 1
