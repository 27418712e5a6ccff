"""What stops a launcher passes through the wrapper: never a fail-open.

torch's agent raises ``SignalException`` from its signal handler once it has started
workers, so every ``next_rendezvous()`` of a restart may meet one anywhere. These tests
send a real SIGTERM to this process, with torch's own handler installed, while a sibling
waits for its process 0, and make every one of the coordinator's calls raise what a
signal handler or the interpreter would raise there. The real torchrun side by side with
plain c10d is in ``integration/test_signals.py``.
"""

from __future__ import annotations

import os
import signal
import threading

import pytest
from torch.distributed.elastic.multiprocessing.api import (
    SignalException,
    _terminate_process_handler,
)

from harness.rendezvous import excluded, launcher, waiting_for_a_verdict
from harness.slurmenv import slurm_env
from harness.telemetry import captured
from harness.waits import wait_until
from nvrx_seghealth import ReplacementGroupMarkers, publish_decision
from nvrx_seghealth._decision import decision_file
from nvrx_seghealth._launcher.handoff import VerdictHandoff


@pytest.fixture
def torch_signal_handler():
    """torch's agent's SIGTERM handler, as installed once workers run."""
    previous = signal.signal(signal.SIGTERM, _terminate_process_handler)
    yield
    signal.signal(signal.SIGTERM, previous)


def test_a_sigterm_during_the_wait_for_process_zero_ends_the_call(
    tcp_store, shc, torch_signal_handler
):
    """srun SIGTERMs a task's launchers when its process 0 died: exactly while they wait
    for process 0's verdict. The wait ends with torch's exception, not a round."""
    sibling = launcher(tcp_store, shc, slurm_env(task=1, procid=1), 1, 1, handoff_timeout=600)

    def terminate_once_waiting():
        wait_until(lambda: waiting_for_a_verdict(tcp_store, 1), timeout=60)
        os.kill(os.getpid(), signal.SIGTERM)

    sender = threading.Thread(target=terminate_once_waiting, daemon=True)
    with captured() as seen:
        sender.start()
        with pytest.raises(SignalException) as raised:
            sibling.next_rendezvous()
    sender.join(60)
    assert raised.value.sigval == signal.SIGTERM
    assert wrapper_errors(seen) == []
    assert not excluded(sibling)


def wrapper_errors(seen):
    """The fail-opens recorded for an error of the wrapper's own work."""
    return [f for f in seen.fields("fail_open") if f["reason"] == "wrapper-error"]


STOPS = [
    SignalException("Process 1 got signal: 15", sigval=signal.SIGTERM),
    KeyboardInterrupt(),
    SystemExit(1),
]


def raising(stop):
    def call(*_args, **_kwargs):
        raise stop

    return call


@pytest.mark.parametrize("stop", STOPS, ids=lambda s: type(s).__name__)
def test_a_stop_during_process_zeros_stat_passes_through(tcp_store, shc, monkeypatch, stop):
    """The stat waits for its helper process, e.g. on a hung mount."""
    handler = launcher(tcp_store, shc, slurm_env(task=1), 1, 1)
    monkeypatch.setattr(decision_file, "stat_within", raising(stop))
    with captured() as seen, pytest.raises(type(stop)):
        handler.next_rendezvous()
    assert wrapper_errors(seen) == []


@pytest.mark.parametrize("stop", STOPS, ids=lambda s: type(s).__name__)
@pytest.mark.parametrize(
    "procid,target,name",
    [
        (0, VerdictHandoff, "publish"),
        (1, VerdictHandoff, "request"),
        (1, VerdictHandoff, "wait"),
        (1, ReplacementGroupMarkers, "detail"),
    ],
)
def test_a_stop_during_a_store_call_passes_through(
    tcp_store, shc, monkeypatch, stop, procid, target, name
):
    """Every store call of a coordinator goes through the fail-open funnel. (No process 0
    answers the sibling: it waits, then looks at the marker.)"""
    monkeypatch.setattr(target, name, raising(stop))
    env = slurm_env(task=1, procid=procid)
    handler = launcher(tcp_store, shc, env, 1, 1, handoff_timeout=0.5)
    with captured() as seen, pytest.raises(type(stop)):
        handler.next_rendezvous()
    assert wrapper_errors(seen) == []


def test_a_stop_while_recording_passes_through(tcp_store, shc, monkeypatch):
    """Recording an event never raises into torchrun, except what stops it."""
    from nvrx_seghealth._launcher import events

    publish_decision(shc, "1000", "1", "drained")
    stop = SignalException("Process 1 got signal: 15", sigval=signal.SIGTERM)
    with captured():
        handler = launcher(tcp_store, shc, slurm_env(task=1), 1, 1)
        monkeypatch.setattr(events.torch_events, "record_rdzv_event", raising(stop))
        with pytest.raises(SignalException):
            handler.next_rendezvous()
