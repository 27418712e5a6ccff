"""The retry policy alone (:mod:`nvrx_seghealth._rendezvous.retry`), on calls that fail on
purpose; the etcd-v2 backend and store on it, against a real three-member etcd:
``integration/etcd/test_leader_loss.py``."""

from __future__ import annotations

import logging
import signal
import threading

import pytest
from torch.distributed.elastic.multiprocessing.api import SignalException

from harness.waits import wait_until
from nvrx_seghealth._errors import SegmentHealthError
from nvrx_seghealth._logfmt import parse_fields
from nvrx_seghealth._rendezvous.retry import RetryPolicy, Unreachable


class Flaky(ConnectionError):
    """The transient error of these tests."""


def policy(timeout: float = 30.0) -> RetryPolicy:
    return RetryPolicy("svc", timeout, lambda error: isinstance(error, Flaky), lambda: "m1")


def failing(times: int, then: object = "answer"):
    """A call that raises :class:`Flaky` ``times`` times, then returns ``then``."""
    calls = [0]

    def call() -> object:
        calls[0] += 1
        if calls[0] <= times:
            raise Flaky(f"attempt {calls[0]}")
        return then

    return call, calls


def episodes(caplog) -> list[tuple[int, dict[str, str]]]:
    return [
        (record.levelno, parse_fields(record.getMessage()))
        for record in caplog.records
        if record.name == "nvrx_seghealth._rendezvous.retry"
    ]


def test_a_transient_failure_is_retried_and_warned_once(caplog) -> None:
    caplog.set_level(logging.INFO)
    call, calls = failing(3)
    assert policy().call("get", call) == "answer" and calls == [4]
    (start_level, start), (end_level, end) = episodes(caplog)
    assert start_level == logging.WARNING and end_level == logging.INFO
    assert start["retry"] == "start" and end["retry"] == "end"
    assert (start["service"], start["member"], start["call"], start["error"]) == (
        "svc",
        "m1",
        "get",
        "Flaky",
    )
    assert start["detail"] == "attempt 1" and end["answered"] == "true"


def test_an_answer_at_once_logs_nothing(caplog) -> None:
    caplog.set_level(logging.DEBUG)
    assert policy().call("get", lambda: 7) == 7
    assert episodes(caplog) == []


def test_past_the_timeout_the_call_raises_unreachable(caplog) -> None:
    caplog.set_level(logging.INFO)
    call, calls = failing(10**9)
    with pytest.raises(Unreachable) as raised:
        policy(timeout=0.3).call("add", call)
    assert isinstance(raised.value, SegmentHealthError) and isinstance(
        raised.value, ConnectionError
    )
    assert isinstance(raised.value.__cause__, Flaky)
    assert "m1" in str(raised.value) and "add" in str(raised.value)
    assert calls[0] >= 2
    assert [(f["retry"], f.get("answered")) for _, f in episodes(caplog)] == [
        ("start", None),
        ("end", "false"),
    ]


def test_an_error_naming_its_member_is_told_by_that_member(caplog) -> None:
    class Named(Flaky):
        member = "m0"  # the member that failed; the policy's callable names the next

    def call() -> object:
        raise Named("refused")

    caplog.set_level(logging.INFO)
    with pytest.raises(Unreachable) as raised:
        policy(timeout=0.2).call("get", call)
    assert "m0" in str(raised.value) and episodes(caplog)[0][1]["member"] == "m0"


@pytest.mark.parametrize(
    "error", [ValueError("not transient"), SignalException("stop", signal.SIGTERM)]
)
def test_other_errors_and_stop_signals_pass_at_once(error, caplog) -> None:
    calls = [0]

    def call() -> None:
        calls[0] += 1
        raise error

    with pytest.raises(type(error)):
        policy().call("set", call)
    assert calls == [1] and episodes(caplog) == []


def test_calls_failing_together_are_one_episode(caplog) -> None:
    """Three threads fail and retry until each has failed once: one WARNING, and one
    INFO when the last of them answers."""
    caplog.set_level(logging.INFO)
    shared = policy()
    release = threading.Event()
    failures: set[str] = set()

    def call() -> str:
        if release.is_set():
            return "ok"
        failures.add(threading.current_thread().name)
        raise Flaky("electing")

    answers: list[object] = []
    threads = [
        threading.Thread(target=lambda: answers.append(shared.call("get", call)), name=f"t{n}")
        for n in range(3)
    ]
    for thread in threads:
        thread.start()
    wait_until(lambda: len(failures) == 3)
    release.set()
    for thread in threads:
        thread.join(30)
    assert answers == ["ok"] * 3
    assert [f["retry"] for _, f in episodes(caplog)] == ["start", "end"]


def test_the_timeout_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        RetryPolicy("svc", 0, lambda error: True, lambda: "m")
