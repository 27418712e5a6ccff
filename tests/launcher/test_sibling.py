"""A task's other launchers (:class:`~nvrx_seghealth._launcher.sibling.Sibling`): they
stand on process 0's verdict, or on their group's marker, before joining and right after.

Each participant is one launcher: a real dynamic handler on its own client of a real
TCPStore, wrapped by the package's handler, in its own Slurm-like environment, joining
from its own thread (:mod:`harness.rendezvous`).
"""

from __future__ import annotations

import logging
import time
from typing import cast

import pytest
from torch.distributed.elastic.rendezvous.dynamic_rendezvous import DynamicRendezvousHandler

from harness.rendezvous import (
    ARRAY,
    RUN,
    Join,
    dead_store,
    dynamic_handler,
    join_all,
    launcher,
    our_records,
    participants,
    rendezvous_round,
    sibling_view,
    tcp_client,
    waiting_for_a_verdict,
)
from harness.slurmenv import slurm_env
from harness.telemetry import captured
from harness.waits import AT_ONCE_BOUND, wait_until
from nvrx_seghealth import (
    ReplacementGroupMarkers,
    SegmentHealthRendezvousHandler,
    UnhealthyNodeException,
    publish_decision,
)
from nvrx_seghealth._errors import ExclusionReason
from nvrx_seghealth._launcher.events import parse_fields
from nvrx_seghealth._launcher.handoff import Answer, Verdict

pytestmark = pytest.mark.usefixtures("release_handlers")


def test_without_a_verdict_a_marked_group_is_refused_without_joining(tcp_store, shc):
    """No verdict in time (process 0 gone after its marker): the marker keeps it out."""
    ReplacementGroupMarkers(tcp_store, RUN, str(ARRAY)).publish("1", "from process 0")
    sibling = launcher(tcp_store, shc, slurm_env(task=1, procid=1), handoff_timeout=0.5)
    refused = Join(sibling).wait()
    healthy = [launcher(tcp_store, shc, slurm_env(task=t)) for t in (0, 2)]
    joined = join_all(healthy)
    assert isinstance(refused.error, UnhealthyNodeException)
    assert (refused.error.reason, refused.error.after_joining) == (ExclusionReason.MARKER, False)
    assert refused.error.marker == "from process 0"
    assert [j.result.world_size for j in joined] == [2, 2]
    assert [h.num_nodes_waiting() for h in healthy] == [0, 0]  # not waiting either


def test_siblings_asking_after_an_exclusion_are_refused_at_once(tcp_store, shc):
    publish_decision(shc, str(ARRAY), "1", "bad")
    with pytest.raises(UnhealthyNodeException):
        launcher(tcp_store, shc, slurm_env(task=1), 1, 1).next_rendezvous()
    started = time.monotonic()
    for procid in (1, 2):  # the exclusion answers every request, with no wait
        sibling = launcher(tcp_store, shc, slurm_env(task=1, procid=procid), 2, 3, AT_ONCE_BOUND)
        with pytest.raises(UnhealthyNodeException) as refused:
            sibling.next_rendezvous()
        assert refused.value.reason is ExclusionReason.MARKER
    assert time.monotonic() - started < AT_ONCE_BOUND / 2
    assert participants(tcp_store) == 0


def test_sibling_that_starts_first_waits_for_the_verdict_and_never_joins(tcp_store, shc):
    """The race the hand-off closes: no extra round, the sibling is never a participant."""
    sibling = Join(launcher(tcp_store, shc, slurm_env(task=1, procid=1), 2, 3))
    task0 = Join(launcher(tcp_store, shc, slurm_env(task=0), 2, 3))
    wait_until(lambda: waiting_for_a_verdict(tcp_store, 1) and participants(tcp_store) == 1)
    publish_decision(shc, str(ARRAY), "1", "bad")
    process0 = Join(launcher(tcp_store, shc, slurm_env(task=1), 2, 3)).wait()
    assert isinstance(process0.error, UnhealthyNodeException)
    sibling.wait()
    assert isinstance(sibling.error, UnhealthyNodeException)
    assert (sibling.error.reason, sibling.error.after_joining) == (ExclusionReason.MARKER, False)
    task2 = Join(launcher(tcp_store, shc, slurm_env(task=2), 2, 3))
    assert task0.wait().result.world_size == task2.wait().result.world_size == 2
    assert rendezvous_round(tcp_store) == 0  # the first round, no re-run


def test_slow_healthy_process_zero_holds_its_sibling_until_the_verdict(tcp_store, shc):
    sibling = Join(launcher(tcp_store, shc, slurm_env(task=1, procid=1), 2, 2))
    wait_until(lambda: waiting_for_a_verdict(tcp_store, 1))
    sibling.thread.join(1.0)  # process 0 is a second late
    assert sibling.thread.is_alive() and participants(tcp_store) == 0
    process0 = Join(launcher(tcp_store, shc, slurm_env(task=1), 2, 2))
    assert process0.wait().result.world_size == sibling.wait().result.world_size == 2


def test_without_a_verdict_the_sibling_joins_after_the_bound(tcp_store, shc, caplog):
    """Fail open: a missing process 0 holds its sibling only for the hand-off bound."""
    with captured() as telemetry:
        sibling = Join(
            launcher(tcp_store, shc, slurm_env(task=1, procid=1), 2, 2, handoff_timeout=1.0)
        )
        wait_until(lambda: participants(tcp_store) == 1, timeout=10)
        task0 = Join(launcher(tcp_store, shc, slurm_env(task=0), 2, 2))
        assert sibling.wait().result.world_size == task0.wait().result.world_size == 2
    assert len(our_records(caplog, logging.WARNING)) == 1
    assert [f["reason"] for f in telemetry.fields("fail_open", task="1")] == ["no-verdict"]


def test_sibling_that_joined_without_a_verdict_is_excluded_right_after_the_round(tcp_store, shc):
    """Process 0 publishes while its sibling, past the bound, waits inside the rendezvous."""
    sibling = Join(launcher(tcp_store, shc, slurm_env(task=1, procid=1), 3, 3, handoff_timeout=0.5))
    task0 = Join(launcher(tcp_store, shc, slurm_env(task=0), 3, 3))
    wait_until(lambda: participants(tcp_store) == 2)  # both are inside the inner round
    publish_decision(shc, str(ARRAY), "1", "bad")
    process0 = Join(launcher(tcp_store, shc, slurm_env(task=1), 3, 3)).wait()
    assert isinstance(process0.error, UnhealthyNodeException)
    task2 = Join(launcher(tcp_store, shc, slurm_env(task=2), 3, 3))
    for join in (sibling, task0, task2):
        join.wait()
    assert isinstance(sibling.error, UnhealthyNodeException)
    assert (sibling.error.reason, sibling.error.after_joining) == (ExclusionReason.MARKER, True)
    # The round of 3 completed for the others; the world each reads back may already lack
    # the sibling, depending on whether its leaving reached the store first.
    assert {task0.result.world_size, task2.result.world_size} <= {2, 3}


def test_a_healthy_answer_to_an_earlier_request_never_admits_a_later_one(tcp_store, shc):
    """Process 0 answered request 1, then was excluded and died before answering again:
    the old healthy answer does not cover the next request; the marker keeps it out."""
    markers = ReplacementGroupMarkers(tcp_store, RUN, str(ARRAY))
    view = sibling_view(tcp_store)
    request, _ = view.request()
    view.publish(Answer(Verdict.HEALTHY, request))
    markers.publish("1", "process 0 of the next attempt")
    sibling = launcher(tcp_store, shc, slurm_env(task=1, procid=1), 1, 1, handoff_timeout=0.5)
    with pytest.raises(UnhealthyNodeException) as refused:
        sibling.next_rendezvous()
    assert (refused.value.reason, refused.value.after_joining) == (ExclusionReason.MARKER, False)
    assert refused.value.marker == "process 0 of the next attempt"
    assert participants(tcp_store) == 0


def test_an_excluded_verdict_refuses_even_without_a_marker(tcp_store, shc):
    """Process 0 could not publish its marker but its verdict came through."""
    sibling = Join(launcher(tcp_store, shc, slurm_env(task=1, procid=1), 1, 1))
    wait_until(lambda: waiting_for_a_verdict(tcp_store, 1))
    view = sibling_view(tcp_store)
    view.publish(Answer(Verdict.EXCLUDED, view.read()[0]))
    assert isinstance(sibling.wait().error, UnhealthyNodeException)
    assert sibling.error.reason is ExclusionReason.VERDICT
    assert participants(tcp_store) == 0


def test_failure_to_read_a_marker_fails_open(tcp_store, shc, caplog):
    handler = SegmentHealthRendezvousHandler(
        dynamic_handler(tcp_client(tcp_store), 1, 1),
        store=dead_store(),
        directory=shc,
        environ=slurm_env(task=1, procid=1),
    )
    with captured() as telemetry:
        assert handler.next_rendezvous().world_size == 1
    assert len(our_records(caplog, logging.WARNING)) == 3
    # the request, the marker before and after joining
    actions = [f["action"] for f in telemetry.fields("fail_open")]
    assert actions == ["request-verdict", "read-marker", "read-marker"]


def test_a_sibling_admitted_between_rounds_leaves_once_its_unit_is_excluded(tcp_store, shc):
    """The verdict between rounds comes from the responder's stat; process 0 stats again at
    its own restart. A decision written in between excludes process 0, and the sibling it
    admitted leaves the round it joined instead of completing a world without its unit."""
    process0, sibling = (
        launcher(tcp_store, shc, slurm_env(task=1, procid=p), 2, 3, keep_alive_attempts=30)
        for p in (0, 1)
    )
    task0 = launcher(tcp_store, shc, slurm_env(task=0), 2, 3, keep_alive_attempts=30)
    assert [j.result.world_size for j in join_all([process0, sibling, task0])] == [3, 3, 3]
    with captured() as seen:
        restart = Join(sibling)  # its worker failed alone; process 0 answers: healthy
        wait_until(lambda: process0.num_nodes_waiting() == 1, timeout=10)
        assert seen.fields("verdict_waited", task="1")[0]["verdict"] == "healthy"
        publish_decision(shc, str(ARRAY), "1", "drained after the admission")
        excluded = Join(process0).wait()  # its agent saw the waiting node
        healthy = Join(task0)
        restart.wait()
        healthy.wait()
    assert excluded.error.reason is ExclusionReason.DECISION_FILE
    assert isinstance(restart.error, UnhealthyNodeException)
    assert (restart.error.reason, restart.error.after_joining) == (ExclusionReason.MARKER, True)


# -- each decision recorded once, as torch's rendezvous events and metrics -------------


def test_a_sibling_records_the_verdict_it_waited_for_and_its_exclusion(tcp_store, shc):
    publish_decision(shc, str(ARRAY), "1", "bad")
    with captured() as seen:
        sibling = Join(launcher(tcp_store, shc, slurm_env(task=1, procid=1), 1, 1))
        wait_until(lambda: waiting_for_a_verdict(tcp_store, 1))
        with pytest.raises(UnhealthyNodeException):
            launcher(tcp_store, shc, slurm_env(task=1), 1, 1).next_rendezvous()
        sibling.wait()
    sibling_events = [
        parse_fields(e.message) | {"name": e.name}
        for e in seen.ours("1")
        if e.local_id == cast(DynamicRendezvousHandler, sibling.handler.inner)._this_node.local_id
    ]
    assert [e["name"] for e in sibling_events] == [
        "nvrx_seghealth.verdict_waited",
        "nvrx_seghealth.excluded",
    ]
    assert sibling_events[0]["verdict"] == "excluded" and sibling_events[0]["request"] == "1"
    assert sibling_events[1]["by"] == "marker" and sibling_events[1]["when"] == "before-joining"
    assert "(3 bytes)" in sibling_events[1]["marker"]  # process 0's marker text
    assert seen.values("excluded") == [1, 1]
    (waited,) = seen.values("verdict_wait.duration.ms")
    assert waited == round(float(sibling_events[0]["waited_s"]) * 1000)


def test_an_excluded_verdict_without_a_marker_is_recorded_as_the_verdict(tcp_store, shc):
    with captured() as seen:
        sibling = Join(launcher(tcp_store, shc, slurm_env(task=1, procid=1), 1, 1))
        wait_until(lambda: waiting_for_a_verdict(tcp_store, 1))
        view = sibling_view(tcp_store)
        view.publish(Answer(Verdict.EXCLUDED, view.read()[0]))
        assert isinstance(sibling.wait().error, UnhealthyNodeException)
    assert seen.fields("excluded") == [
        {"job_id": "1000", "task_id": "1", "by": "verdict", "when": "before-joining"}
    ]


def test_a_marker_met_after_joining_is_recorded_with_the_round_rank(tcp_store, shc):
    with captured() as seen:
        sibling = Join(
            launcher(tcp_store, shc, slurm_env(task=1, procid=1), 2, 2, handoff_timeout=0.5)
        )
        wait_until(lambda: participants(tcp_store) == 1)
        ReplacementGroupMarkers(tcp_store, RUN, str(ARRAY)).publish("1", "late marker")
        task0 = Join(launcher(tcp_store, shc, slurm_env(task=0), 2, 2))
        task0.wait()
        sibling.wait()
    assert isinstance(sibling.error, UnhealthyNodeException)
    assert seen.names("1") == ["fail_open", "excluded"]
    assert seen.fields("fail_open", "1")[0]["reason"] == "no-verdict"
    assert seen.fields("excluded", "1") == [
        {
            "job_id": "1000",
            "task_id": "1",
            "by": "marker",
            "when": "after-joining",
            "marker": "late marker",
        }
    ]
    (excluded,) = [e for e in seen.ours("1") if e.name == "nvrx_seghealth.excluded"]
    assert excluded.rank in (0, 1) and excluded.rank != task0.result.rank
    assert seen.values("fail_open.no-verdict") == [1]
