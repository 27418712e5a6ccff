"""The operators' filesystem calls in a helper process: bounded, never piling up.

A helper that does not answer is made real by stopping it (SIGSTOP); the hung mount
itself is in ``integration/hungmount/test_hung_operator_commands.py``.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from harness.waits import AT_ONCE_BOUND
from nvrx_seghealth._decision import boundedfs
from nvrx_seghealth._decision.files import Current
from nvrx_seghealth._decision.helperprocess import HelperTimeout


def helper_pid():
    helper = boundedfs._client._helper
    assert helper is not None
    return helper.process.pid


def test_calls_share_one_helper_and_answer(tmp_path):
    path = str(tmp_path / "segment_health_check.1.2")
    assert boundedfs.replace(path, b"bad\n", Current("absent"), 5).status == "done"
    pid = helper_pid()
    assert boundedfs.read_current(path, 5) == Current("content", b"bad\n", 4)
    assert ".segment_health_check.lock" in boundedfs.list_names(str(tmp_path), 5)
    boundedfs.append_text(str(tmp_path / "log"), "one\n", 5)
    assert (tmp_path / "log").read_text() == "one\n"
    assert helper_pid() == pid


def test_errors_come_back_as_the_filesystem_gave_them(tmp_path):
    with pytest.raises(FileNotFoundError):
        boundedfs.list_names(str(tmp_path / "missing"), 5)


def test_an_unanswered_call_times_out_and_the_next_one_there_is_refused_at_once(tmp_path):
    boundedfs.list_names(str(tmp_path), 5)
    stuck = helper_pid()
    os.kill(stuck, signal.SIGSTOP)
    try:
        started = time.monotonic()
        with pytest.raises(HelperTimeout, match="no answer after ") as late:
            boundedfs.list_names(str(tmp_path), 0.5)
        assert late.value.key == late.value.subject == str(tmp_path)
        assert late.value.waited >= 0.5 and time.monotonic() - started >= 0.5
        started = time.monotonic()
        with pytest.raises(HelperTimeout) as refused:
            boundedfs.read_current(str(tmp_path / "x"), AT_ONCE_BOUND)
        assert refused.value.earlier  # refused, not sent: no wait for its bound
        assert time.monotonic() - started < AT_ONCE_BOUND / 2
        other = tmp_path.parent  # another directory is not held up
        assert isinstance(boundedfs.list_names(str(other), 5), list)
        assert helper_pid() != stuck
    finally:
        os.kill(stuck, signal.SIGCONT)
    deadline = time.monotonic() + 10
    while True:  # released, the abandoned helper sees its closed pipes and exits
        try:
            assert boundedfs.list_names(str(tmp_path), 5) is not None
            break
        except HelperTimeout:
            assert time.monotonic() < deadline
            time.sleep(0.05)
