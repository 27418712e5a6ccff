"""``nvrx_seghealth._launcher.events``: decisions as torch's rendezvous events and metrics.

Real torch telemetry: the events go through torch's own ``record_rdzv_event`` to a
handler configured where torch looks for it, the metrics through ``put_metric`` to a
handler given to ``metrics.configure``. The node fields are compared with the events
torch's own dynamic handler records for the same node.
"""

from __future__ import annotations

import datetime
import logging
import os
import socket

import pytest
from torch.distributed.elastic import metrics as torch_metrics
from torch.distributed.elastic.events import NodeState
from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import C10dRendezvousBackend
from torch.distributed.elastic.rendezvous.dynamic_rendezvous import (
    DynamicRendezvousHandler,
    RendezvousTimeout,
)

from harness.slurmenv import slurm_env
from harness.telemetry import captured, routed
from nvrx_seghealth._decision.decision_file import Decision, Outcome
from nvrx_seghealth._decision.unit import AllocationUnit
from nvrx_seghealth._errors import Exclusion, ExclusionReason, When
from nvrx_seghealth._launcher.events import (
    METRIC_GROUP,
    DecisionRecorder,
    FailOpenReason,
)


class StaticInner:
    """A rendezvous handler that is not torch's dynamic one (only what is read)."""

    def __init__(self) -> None:
        self.run_id_reads = 0

    def get_run_id(self) -> str:
        self.run_id_reads += 1
        return "run-static"


def recorder(inner=None, task=1):
    # StaticInner stands in for the inner handler: the recorder asks only its run id.
    events = DecisionRecorder(inner or StaticInner())  # type: ignore[arg-type]
    events.unit = AllocationUnit.from_env(slurm_env(task=task))
    return events


def test_nothing_is_built_while_torch_records_nowhere():
    """torch's default destination is a NullHandler: no event is built, the run id is
    never read, as torch skips its own events."""
    inner = StaticInner()
    events = recorder(inner)
    events.installed("/shared/shc")
    events.excluded(
        Exclusion(ExclusionReason.DECISION_FILE, When.BEFORE_JOINING, "x", "/shared/shc/x", 3)
    )
    assert inner.run_id_reads == 0


def test_each_decision_is_one_event_with_its_fields_and_metrics():
    with captured() as seen:
        events = recorder()
        events.installed("/shared/shc")
        events.judged(Decision("/p", Outcome.ABSENT, "no decision file"), 0.000042, "attempt")
        events.judged(
            Decision("/p", Outcome.NOT_REGULAR, "not a regular file: directory"), 0.001, "request"
        )
        events.judged(Decision("/p", Outcome.UNHEALTHY, "non-empty", 7), 0.0005, "attempt")
        events.excluded(
            Exclusion(ExclusionReason.DECISION_FILE, When.BEFORE_JOINING, "non-empty", "/p", 7)
        )
        events.marker_published("1")
        events.verdict_published("excluded", 16777215, True, "attempt")
    assert seen.names() == [
        "installed",
        "proceed",
        "fail_open",
        "excluded",
        "marker_published",
        "verdict_published",
    ]
    by_name = {e.name: e for e in seen.ours()}
    assert by_name["nvrx_seghealth.installed"].node_state is NodeState.INIT
    assert by_name["nvrx_seghealth.excluded"].node_state is NodeState.FAILED
    assert by_name["nvrx_seghealth.proceed"].node_state is NodeState.RUNNING
    assert seen.fields("installed") == [
        {"job_id": "1000", "task_id": "1", "directory": "/shared/shc"}
    ]
    assert seen.fields("proceed") == [
        {
            "job_id": "1000",
            "task_id": "1",
            "outcome": "absent",
            "path": "/p",
            "check_us": "42",
            "trigger": "attempt",
        }
    ]
    assert seen.fields("fail_open") == [
        {
            "job_id": "1000",
            "task_id": "1",
            "reason": "not-a-regular-file",
            "path": "/p",
            "check_us": "1000",
            "trigger": "request",
            "detail": "not a regular file: directory",
        }
    ]
    assert seen.fields("excluded") == [
        {"job_id": "1000", "task_id": "1", "by": "decision-file", "path": "/p", "size": "7"}
    ]
    assert seen.fields("verdict_published") == [
        {
            "job_id": "1000",
            "task_id": "1",
            "verdict": "excluded",
            "covers": "16777215",
            "standing": "true",
            "trigger": "attempt",
        }
    ]
    assert seen.values("check.duration.us") == [42, 1000, 500]
    assert seen.values("fail_open.not-a-regular-file") == [1]
    assert seen.values("excluded") == [1]
    assert all(m.group_name == METRIC_GROUP for m in seen.metrics)


@pytest.mark.parametrize(
    ("reason", "when", "token"),
    [
        (ExclusionReason.DECISION_FILE, When.BEFORE_JOINING, None),
        (ExclusionReason.DECISION_FILE, When.AFTER_JOINING, "after-joining"),
        (ExclusionReason.DECISION_FILE, When.DURING_TRAINING, "during-training"),
        (ExclusionReason.MARKER, When.BEFORE_JOINING, "before-joining"),
        (ExclusionReason.MARKER, When.AFTER_JOINING, "after-joining"),
        (ExclusionReason.VERDICT, When.BEFORE_JOINING, "before-joining"),
    ],
)
def test_an_exclusion_says_when_but_for_process_zeros_stat_before_joining(reason, when, token):
    """Process 0's stat before joining is the check itself: only its event has no ``when``."""
    with captured() as seen:
        recorder().excluded(Exclusion(reason, when, "words"))
    (fields,) = seen.fields("excluded")
    assert (fields["by"], fields.get("when")) == (reason.value, token)


def test_a_sibling_wait_is_a_verdict_or_a_fail_open():
    with captured() as seen:
        events = recorder()
        events.verdict_waited("healthy", 3, 1.2345)
        events.verdict_waited(None, 4, 30.0)
    assert seen.names() == ["verdict_waited", "fail_open"]
    assert seen.fields("verdict_waited") == [
        {
            "job_id": "1000",
            "task_id": "1",
            "verdict": "healthy",
            "request": "3",
            "waited_s": "1.234",
        }
    ]
    assert seen.fields("fail_open") == [
        {
            "job_id": "1000",
            "task_id": "1",
            "reason": "no-verdict",
            "request": "4",
            "waited_s": "30.000",
        }
    ]
    assert seen.values("verdict_wait.duration.ms") == [1234, 30000]
    assert seen.values("fail_open.no-verdict") == [1]


def test_a_wrapper_error_names_its_action_and_error():
    with captured() as seen:
        recorder().wrapper_error("read-marker", ConnectionError("store gone"))
    assert seen.fields("fail_open") == [
        {
            "job_id": "1000",
            "task_id": "1",
            "reason": FailOpenReason.WRAPPER_ERROR.value,
            "action": "read-marker",
            "error": "ConnectionError: store gone",
        }
    ]
    assert seen.values("fail_open.wrapper-error") == [1]


def test_another_handler_records_this_host_and_process():
    with captured() as seen:
        events = recorder()
        events.rank = 3
        events.marker_published("1")
    (event,) = seen.ours()
    assert (event.run_id, event.hostname, event.pid, event.local_id, event.rank) == (
        "run-static",
        socket.getfqdn(),
        os.getpid(),
        None,
        3,
    )


def test_the_node_is_named_as_torch_names_it_in_its_own_events(tcp_store):
    """The dynamic handler's own join events and ours carry the same run id and node."""
    handler = DynamicRendezvousHandler.from_backend(
        "run-node",
        tcp_store,
        C10dRendezvousBackend(tcp_store, "run-node"),
        1,
        1,
        local_addr="127.0.0.1",
        timeout=RendezvousTimeout(
            join=datetime.timedelta(seconds=30), last_call=datetime.timedelta(seconds=1)
        ),
    )
    with captured() as seen:
        info = handler.next_rendezvous()
        events = recorder(handler)
        events.rank = info.rank
        events.marker_published("1")
    handler.shutdown()
    torch_joined = [
        e for e in seen.events if e.name.endswith("next_rendezvous") and e.rank is not None
    ]
    (ours,) = seen.ours()
    assert torch_joined, [e.name for e in seen.events]
    node = lambda e: (e.run_id, e.hostname, e.pid, e.local_id, e.rank)
    assert (
        node(ours)
        == node(torch_joined[-1])
        == ("run-node", "127.0.0.1", os.getpid(), handler._this_node.local_id, 0)
    )


class RaisingHandler(logging.Handler):
    """A collector that fails (a filter's error is not caught by logging)."""

    def filter(self, record):
        raise RuntimeError("collector down")


class RaisingMetrics(torch_metrics.MetricHandler):
    def emit(self, metric_data):
        raise OSError("disk full")


def test_a_failing_handler_never_raises_and_warns_once(caplog):
    caplog.set_level(logging.DEBUG, logger="nvrx_seghealth")
    with routed(RaisingHandler(), RaisingMetrics()):
        events = recorder()
        events.excluded(Exclusion(ExclusionReason.MARKER, When.BEFORE_JOINING, "marked"))
        events.judged(Decision("/p", Outcome.CLEAR, "empty", 0), 0.001, "attempt")
    ours = [r for r in caplog.records if r.name == "nvrx_seghealth._launcher.events"]
    assert [r.levelno for r in ours] == [
        logging.WARNING,
        logging.DEBUG,
        logging.DEBUG,
        logging.DEBUG,
    ]  # two events, two metrics
    assert "could not record event nvrx_seghealth.excluded" in ours[0].getMessage()


def test_a_thousand_decisions_reach_a_real_file_one_line_each(tmp_path):
    """To a real file, as docs/reference/events.md's routing does. (What recording costs is not
    bounded here: a loaded machine is no clock.)"""
    file_handler = logging.FileHandler(tmp_path / "events.jsonl")
    with routed(file_handler, torch_metrics.NullMetricHandler()):
        events = recorder()
        for _ in range(1000):
            events.judged(Decision("/p", Outcome.ABSENT, "no decision file"), 0.00004, "attempt")
    file_handler.close()
    lines = (tmp_path / "events.jsonl").read_text().splitlines()
    assert len(lines) == 1000 and all("nvrx_seghealth.proceed" in line for line in lines)


@pytest.fixture(autouse=True)
def _no_leftover_configuration():
    yield
    from torch.distributed.elastic.events import handlers

    assert isinstance(handlers._log_handlers["dynamic_rendezvous"], logging.NullHandler)
