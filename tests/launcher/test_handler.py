"""The wrapper around a real in-process ``DynamicRendezvousHandler`` on a real TCPStore.

Each participant is one launcher: its own TCPStore client, its own c10d backend and
dynamic handler, its own Slurm-like environment, joining from its own thread.
"""

from __future__ import annotations

import datetime
import itertools
import logging
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from typing import Any, cast

import pytest
import torch.distributed as dist
from torch.distributed.elastic.rendezvous import RendezvousClosedError
from torch.distributed.elastic.rendezvous.dynamic_rendezvous import DynamicRendezvousHandler

from harness.common import slurm_env, wait_until
from harness.rendezvous import (
    ARRAY,
    RUN,
    Join,
    dynamic_handler,
    join_all,
    launcher,
    our_records,
    participants,
    rendezvous_round,
    tcp_client,
    waiting_for_a_verdict,
)
from harness.telemetry import captured
from nvrx_seghealth import (
    ReplacementGroupMarkers,
    SegmentHealthRendezvousHandler,
    UnhealthyNodeException,
    publish_decision,
)
from nvrx_seghealth._decision import artifact
from nvrx_seghealth._errors import ConfigurationError, ExclusionReason
from nvrx_seghealth._launcher.events import parse_fields
from nvrx_seghealth._launcher.handoff import Answer, Verdict, VerdictHandoff
from nvrx_seghealth._launcher.process_zero import RESPONDER_INTERVAL

pytestmark = pytest.mark.usefixtures("release_handlers")


def test_process_zero_is_excluded_before_joining_and_publishes_its_group(tcp_store, shc, caplog):
    publish_decision(shc, str(ARRAY), "1", "n3 drained")
    handlers = [launcher(tcp_store, shc, slurm_env(task=t)) for t in (0, 1, 2)]
    healthy0, excluded, healthy2 = join_all(handlers)
    assert isinstance(excluded.error, UnhealthyNodeException)
    assert (excluded.error.job_id, excluded.error.task_id) == (str(ARRAY), "1")
    assert excluded.error.path == os.path.join(shc, f"segment_health_check.{ARRAY}.1")
    assert excluded.error.size == len("n3 drained")
    assert excluded.error.reason is ExclusionReason.DECISION_FILE
    assert [j.error for j in (healthy0, healthy2)] == [None, None]
    assert {j.result.world_size for j in (healthy0, healthy2)} == {2}
    assert sorted(j.result.rank for j in (healthy0, healthy2)) == [0, 1]
    assert ReplacementGroupMarkers(tcp_store, RUN, str(ARRAY)).marked_groups() == ["1"]
    errors = our_records(caplog, logging.ERROR)
    assert len(errors) == 1
    fields = parse_fields(errors[0])  # the line's tokens
    assert (fields["reason"], fields["after_joining"], fields["task_id"]) == (
        "decision-file",
        "false",
        "1",
    )


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
    for procid in (1, 2):  # the bound is 30 s; the exclusion answers every request
        sibling = launcher(tcp_store, shc, slurm_env(task=1, procid=procid))
        with pytest.raises(UnhealthyNodeException) as refused:
            sibling.next_rendezvous()
        assert refused.value.reason is ExclusionReason.MARKER
    assert time.monotonic() - started < 5
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


def view_of(master, task="1"):
    """The hand-off of ``task`` as a sibling sees it."""
    return VerdictHandoff(ReplacementGroupMarkers(master, RUN, str(ARRAY)), task, "0")


def test_process_zero_answers_at_each_attempt(tcp_store, shc, tmp_path):
    handler = launcher(tcp_store, shc, slurm_env(task=1), 1, 1)
    sibling_view = view_of(tcp_store)
    request, _ = sibling_view.request()
    handler.next_rendezvous()
    assert sibling_view.wait(request, 0) is Verdict.HEALTHY
    os.mkdir(os.path.join(shc, f"segment_health_check.{ARRAY}.1"))  # not a regular file
    request, _ = sibling_view.request()
    handler.next_rendezvous()
    assert sibling_view.wait(request, 5) is Verdict.UNCHECKED
    os.rmdir(os.path.join(shc, f"segment_health_check.{ARRAY}.1"))
    publish_decision(shc, str(ARRAY), "1", "bad")
    request, _ = sibling_view.request()
    with pytest.raises(UnhealthyNodeException):
        handler.next_rendezvous()
    assert sibling_view.wait(request, 5) is Verdict.EXCLUDED
    request, _ = sibling_view.request()
    with pytest.raises(UnhealthyNodeException):
        handler.next_rendezvous()  # excluded for good ...
    assert sibling_view.wait(request, 0) is Verdict.EXCLUDED
    assert sibling_view.wait(request + 1000, 0) is Verdict.EXCLUDED  # ... for every request


def test_a_healthy_answer_to_an_earlier_request_never_admits_a_later_one(tcp_store, shc):
    """Process 0 answered request 1, then was excluded and died before answering again:
    the old healthy answer does not cover the next request; the marker keeps it out."""
    markers = ReplacementGroupMarkers(tcp_store, RUN, str(ARRAY))
    view = view_of(tcp_store)
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
    view = view_of(tcp_store)
    view.publish(Answer(Verdict.EXCLUDED, view.read()[0]))
    assert isinstance(sibling.wait().error, UnhealthyNodeException)
    assert sibling.error.reason is ExclusionReason.VERDICT
    assert participants(tcp_store) == 0


def test_handoff_timeout_zero_turns_the_handoff_off(tcp_store, shc):
    handlers = [
        launcher(tcp_store, shc, slurm_env(task=1, procid=p), 2, 2, handoff_timeout=0)
        for p in (1, 0)
    ]
    assert [h.handoff for h in handlers] == [None, None]
    assert [j.result.world_size for j in join_all(handlers)] == [2, 2]
    assert not waiting_for_a_verdict(tcp_store, 1)


def test_a_restart_count_that_is_no_id_turns_only_the_handoff_off(tcp_store, shc, caplog):
    envs = [slurm_env(task=1, procid=p) for p in (1, 0)]
    for env in envs:
        env["SLURM_RESTART_COUNT"] = "x"
    handlers = [launcher(tcp_store, shc, env, 2, 2) for env in envs]
    assert [h.handoff for h in handlers] == [None, None]
    assert all(h.markers is not None for h in handlers) and handlers[1].check is not None
    assert len(our_records(caplog, logging.WARNING)) == 2  # one per launcher
    assert [j.result.world_size for j in join_all(handlers)] == [2, 2]


def test_shutdown_after_exclusion_leaves_the_rendezvous_open(tcp_store, shc):
    publish_decision(shc, str(ARRAY), "1", "bad")
    handlers = [launcher(tcp_store, shc, slurm_env(task=t), 1, 3) for t in (0, 1, 2)]
    first = join_all(handlers)
    excluded = handlers[1]
    assert isinstance(first[1].error, UnhealthyNodeException)
    assert excluded.shutdown() is False
    excluded.set_closed()
    assert not any(h.is_closed() for h in handlers)
    second = join_all([handlers[0], handlers[2]])  # the healthy units re-form
    assert [j.error for j in second] == [None, None]
    assert [j.result.world_size for j in second] == [2, 2]
    # The trap is real: the inner handler's shutdown closes the rendezvous for everyone.
    assert excluded.inner.shutdown() is True
    wait_until(lambda: handlers[0].is_closed() and handlers[2].is_closed())  # cached ~1 s
    with pytest.raises(RendezvousClosedError):
        handlers[0].next_rendezvous()


def test_exclusion_sticks_even_if_the_decision_is_cleared(tcp_store, shc):
    path = publish_decision(shc, str(ARRAY), "1", "bad")
    handler = launcher(tcp_store, shc, slurm_env(task=1), 1, 1)
    with pytest.raises(UnhealthyNodeException):
        handler.next_rendezvous()
    os.unlink(path)
    with pytest.raises(UnhealthyNodeException) as again:
        handler.next_rendezvous()
    assert (again.value.reason, again.value.path) == (ExclusionReason.DECISION_FILE, path)
    assert handler.excluded


def test_decision_is_consumed_at_the_next_rendezvous(tcp_store, shc):
    """A unit that joined round 0 healthy is excluded at its next ``next_rendezvous()``."""
    handlers = [launcher(tcp_store, shc, slurm_env(task=t), 2, 2) for t in (0, 1)]
    assert [j.result.world_size for j in join_all(handlers)] == [2, 2]
    publish_decision(shc, str(ARRAY), "1", "drained while running")
    with pytest.raises(UnhealthyNodeException):
        handlers[1].next_rendezvous()
    assert ReplacementGroupMarkers(tcp_store, RUN, str(ARRAY)).is_marked("1")


def test_regular_job_raises_and_publishes_nothing(tcp_store, shc):
    publish_decision(shc, "77", "77", "bad")
    handler = launcher(tcp_store, shc, slurm_env(job=77), 1, 1)
    assert handler.markers is None
    keys = tcp_store.num_keys()
    with pytest.raises(UnhealthyNodeException) as excluded:
        handler.next_rendezvous()
    assert (excluded.value.job_id, excluded.value.task_id) == ("77", "77")
    assert tcp_store.num_keys() == keys


def test_other_launchers_never_stat_the_artifact(tcp_store, shc, monkeypatch):
    path = publish_decision(shc, str(ARRAY), "1", "bad")
    real_stat_within = artifact.stat_within
    stats = []

    def counting_stat(target, timeout):
        if target == path:
            stats.append(threading.current_thread().name)
        return real_stat_within(target, timeout)

    monkeypatch.setattr(artifact, "stat_within", counting_stat)
    others = [
        launcher(tcp_store, shc, env, 2, 2, handoff_timeout=0)
        for env in (slurm_env(task=1, procid=1), slurm_env(task=1, procid=2))
    ]
    assert all(h.check is None for h in others)
    assert [j.result.world_size for j in join_all(others)] == [2, 2]
    assert stats == []
    process0 = launcher(tcp_store, shc, slurm_env(task=1), 1, 1)
    with pytest.raises(UnhealthyNodeException):
        process0.next_rendezvous()
    assert len(stats) == 1  # one metadata call per rendezvous


def test_without_a_directory_the_wrapper_only_delegates(tcp_store, shc):
    publish_decision(shc, str(ARRAY), "1", "bad")
    ReplacementGroupMarkers(tcp_store, RUN, str(ARRAY)).publish("1", "marked")
    handlers = [launcher(tcp_store, None, slurm_env(task=1, procid=p), 2, 2) for p in (0, 1)]
    assert all(h.check is None and h.markers is None for h in handlers)
    assert [j.result.world_size for j in join_all(handlers)] == [2, 2]


def test_without_a_store_process_zero_still_excludes_and_says_so_once(tcp_store, shc, caplog):
    publish_decision(shc, str(ARRAY), "1", "bad")
    store = tcp_client(tcp_store)
    handler = SegmentHealthRendezvousHandler(
        dynamic_handler(store, 1, 1), store=None, directory=shc, environ=slurm_env(task=1)
    )
    with pytest.raises(UnhealthyNodeException):
        handler.next_rendezvous()
    warnings = our_records(caplog, logging.WARNING)
    assert len(warnings) == 1 and "no rendezvous store" in warnings[0]


def _dead_store():
    """A TCPStore client whose server is gone: every operation fails for real."""
    master = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    client = dist.TCPStore(
        "127.0.0.1", master.port, is_master=False, timeout=datetime.timedelta(seconds=5)
    )
    del master
    return client


def test_failure_to_publish_is_a_warning_and_the_exclusion_stands(tcp_store, shc, caplog):
    publish_decision(shc, str(ARRAY), "1", "bad")
    handler = SegmentHealthRendezvousHandler(
        dynamic_handler(tcp_client(tcp_store), 1, 1),
        store=_dead_store(),
        directory=shc,
        environ=slurm_env(task=1),
    )
    with captured() as telemetry, pytest.raises(UnhealthyNodeException):
        handler.next_rendezvous()
    actions = [f["action"] for f in telemetry.fields("fail_open")]
    assert "publish-marker" in actions and "publish-verdict" in actions


def test_failure_to_read_a_marker_fails_open(tcp_store, shc, caplog):
    handler = SegmentHealthRendezvousHandler(
        dynamic_handler(tcp_client(tcp_store), 1, 1),
        store=_dead_store(),
        directory=shc,
        environ=slurm_env(task=1, procid=1),
    )
    with captured() as telemetry:
        assert handler.next_rendezvous().world_size == 1
    assert len(our_records(caplog, logging.WARNING)) == 3
    # the request, the marker before and after joining
    actions = [f["action"] for f in telemetry.fields("fail_open")]
    assert actions == ["request-verdict", "read-marker", "read-marker"]


def test_every_other_method_delegates(tcp_store, shc, monkeypatch):
    store = tcp_client(tcp_store)
    inner = dynamic_handler(store, 1, 2)
    handler = SegmentHealthRendezvousHandler(
        inner, store=store, directory=shc, environ=slurm_env(task=0)
    )
    assert handler.get_backend() == inner.get_backend() == "c10d"
    assert (
        SegmentHealthRendezvousHandler(
            inner, store=store, directory=None, backend="segment-health"
        ).get_backend()
        == "segment-health"
    )
    assert handler.get_run_id() == RUN
    assert handler.inner is inner
    for value in ("0", "1"):
        monkeypatch.setenv("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", value)
        assert handler.use_agent_store is inner.use_agent_store
    info = handler.next_rendezvous()
    assert (info.rank, info.world_size) == (0, 1)
    assert handler.num_nodes_waiting() == 0
    late = launcher(tcp_store, shc, slurm_env(task=5), 1, 2)
    Join(late)
    wait_until(lambda: handler.num_nodes_waiting() == 1)
    assert handler.is_closed() is False
    assert handler.shutdown() is True  # healthy: closes like the inner handler does
    wait_until(lambda: handler.is_closed() and late.is_closed())


def test_set_closed_delegates_while_healthy(tcp_store, shc):
    handlers = [launcher(tcp_store, shc, slurm_env(task=t), 1, 2) for t in (0, 1)]
    handlers[0].set_closed()
    wait_until(handlers[1].is_closed)


BAD = (-1, float("nan"), float("inf"))


def test_configuration_is_validated_at_construction(tcp_store):
    inner = dynamic_handler(tcp_client(tcp_store), 1, 1)
    cases: list[tuple[dict[str, Any], str]] = [
        ({"directory": "rel/shc"}, "directory"),
        ({"directory": "/shc", "stat_timeout": -1}, "stat_timeout"),
        *(({"directory": "/shc", "handoff_timeout": bad}, "handoff_timeout") for bad in BAD),
    ]
    for kwargs, setting in cases:
        with pytest.raises(ConfigurationError) as refused:
            SegmentHealthRendezvousHandler(inner, store=None, **kwargs)
        assert refused.value.setting == setting


def count_stats(monkeypatch, path):
    """Record every stat of ``path`` (the helper call the artifact makes)."""
    real_stat_within = artifact.stat_within
    stats = []

    def counting_stat(target, timeout):
        if target == path:
            stats.append(time.monotonic())
        return real_stat_within(target, timeout)

    monkeypatch.setattr(artifact, "stat_within", counting_stat)
    return stats


def test_a_sibling_restarting_alone_is_answered_while_process_zero_trains(
    tcp_store, shc, monkeypatch
):
    """Process 0 is outside the rendezvous (its workers run): it still answers, at once,
    with a fresh stat, so the sibling joins and pulls the others into a new round."""
    path = os.path.join(shc, f"segment_health_check.{ARRAY}.1")
    stats = count_stats(monkeypatch, path)
    process0, sibling = (
        launcher(tcp_store, shc, slurm_env(task=1, procid=p), 2, 2) for p in (0, 1)
    )
    assert [j.result.world_size for j in join_all([process0, sibling])] == [2, 2]
    assert len(stats) == 1  # one stat for the round: the sibling asked while process 0 joined
    started = time.monotonic()
    restart = Join(sibling)  # the sibling's worker failed; process 0's still run
    wait_until(lambda: process0.num_nodes_waiting() == 1, timeout=10)
    assert time.monotonic() - started < 5  # not the 30 s bound
    assert len(stats) == 2  # answered with a fresh stat, not the round's old verdict
    again = Join(process0)  # process 0's agent sees the waiting node and restarts
    assert restart.wait().result.world_size == again.wait().result.world_size == 2
    assert rendezvous_round(tcp_store) == 1


def test_a_decision_found_between_rounds_refuses_the_restarting_sibling(tcp_store, shc):
    process0, sibling = (
        launcher(tcp_store, shc, slurm_env(task=1, procid=p), 2, 3) for p in (0, 1)
    )
    task0 = launcher(tcp_store, shc, slurm_env(task=0), 2, 3)
    assert [j.result.world_size for j in join_all([process0, sibling, task0])] == [3, 3, 3]
    publish_decision(shc, str(ARRAY), "1", "drained while training")  # DRAIN: no eviction
    refused = Join(sibling).wait(timeout=10)
    assert isinstance(refused.error, UnhealthyNodeException)
    assert refused.error.after_joining is False
    assert process0.num_nodes_waiting() == 0  # the sibling never entered the wait list
    with pytest.raises(UnhealthyNodeException):  # process 0 at its next boundary
        process0.next_rendezvous()


def test_a_request_while_process_zero_joins_costs_no_second_stat(tcp_store, shc, monkeypatch):
    path = os.path.join(shc, f"segment_health_check.{ARRAY}.1")
    stats = count_stats(monkeypatch, path)
    process0 = Join(launcher(tcp_store, shc, slurm_env(task=1), 2, 2))
    wait_until(lambda: participants(tcp_store) == 1)  # process 0 waits inside the round
    sibling = Join(launcher(tcp_store, shc, slurm_env(task=1, procid=1), 2, 2))
    assert process0.wait().result.world_size == sibling.wait().result.world_size == 2
    assert len(stats) == 1


def test_an_excluded_launcher_leaves_its_round_without_closing_it(tcp_store, shc):
    """Once excluded, it stops heart-beating and leaves the round it was part of, so the
    others need not wait for its heartbeat to expire; the rendezvous stays open."""
    handlers = [launcher(tcp_store, shc, slurm_env(task=t), 3, 3) for t in (0, 1, 2)]
    assert [j.result.world_size for j in join_all(handlers)] == [3, 3, 3]
    publish_decision(shc, str(ARRAY), "1", "bad")
    excluded = handlers[1]
    with pytest.raises(UnhealthyNodeException):
        excluded.next_rendezvous()
    assert participants(tcp_store) == 2
    timer = cast(DynamicRendezvousHandler, excluded.inner)._keep_alive_timer
    thread = timer._thread if timer is not None else None  # started when the round formed
    assert thread is not None
    wait_until(lambda: not thread.is_alive(), timeout=10)  # torch's own timer stopped
    assert excluded.shutdown() is False
    assert not any(h.is_closed() for h in handlers)


def test_a_failing_check_fails_open_with_one_warning(tcp_store, shc, caplog, monkeypatch):
    """Nothing but an exclusion leaves the wrapper as an error."""
    handler = launcher(tcp_store, shc, slurm_env(task=1), 1, 1)

    def broken():
        raise RuntimeError("a bug in the check")

    monkeypatch.setattr(handler.check, "evaluate", broken)
    with captured() as telemetry:
        assert handler.next_rendezvous().world_size == 1
    assert len(our_records(caplog, logging.WARNING)) == 1
    failed = telemetry.fields("fail_open")
    assert [(f["action"], f["error"].split(":")[0]) for f in failed] == [
        ("evaluate", "RuntimeError")
    ]


def test_a_directory_that_does_not_exist_gets_one_warning(tcp_store, tmp_path, caplog):
    missing = str(tmp_path / "typo")
    handler = launcher(tcp_store, missing, slurm_env(task=1), 1, 1, handoff_timeout=0)
    for _ in range(2):
        assert handler.next_rendezvous().world_size == 1
    warnings = our_records(caplog, logging.WARNING)
    assert len(warnings) == 1 and missing in warnings[0] and "does not exist" in warnings[0]
    sibling = launcher(
        tcp_store, missing, slurm_env(task=1, procid=1), 1, 1, run_id="run-2", handoff_timeout=0
    )
    sibling.next_rendezvous()
    assert len(our_records(caplog, logging.WARNING)) == 1  # other launchers never look


# -- each decision recorded once, as torch's rendezvous events and metrics -------------


def test_an_exclusion_is_recorded_once_with_its_marker_and_verdict(tcp_store, shc):
    publish_decision(shc, str(ARRAY), "1", "n3 drained")
    with captured() as seen:
        handlers = [launcher(tcp_store, shc, slurm_env(task=t)) for t in (0, 1, 2)]
        joins = join_all(handlers)
        with pytest.raises(UnhealthyNodeException):  # again: excluded for good, not re-recorded
            handlers[1].next_rendezvous()
    assert isinstance(joins[1].error, UnhealthyNodeException)
    path = os.path.join(shc, f"segment_health_check.{ARRAY}.1")
    assert seen.names("1") == ["installed", "excluded", "marker_published", "verdict_published"]
    assert seen.fields("excluded", "1") == [
        {"job_id": "1000", "task_id": "1", "by": "decision-file", "path": path, "size": "10"}
    ]
    assert seen.fields("marker_published", "1")[0]["group"] == "1"
    assert seen.fields("verdict_published", "1")[0]["verdict"] == "excluded"
    for healthy in ("0", "2"):
        assert seen.names(healthy) == ["installed", "proceed", "verdict_published"]
        assert seen.fields("proceed", healthy)[0]["outcome"] == "absent"
        assert seen.fields("verdict_published", healthy)[0]["standing"] == "true"
    (excluded,) = [e for e in seen.ours("1") if e.name == "nvrx_seghealth.excluded"]
    node = cast(DynamicRendezvousHandler, handlers[1].inner)._this_node
    assert (excluded.run_id, excluded.hostname, excluded.pid, excluded.local_id) == (
        RUN,
        node.addr,
        node.pid,
        node.local_id,
    )
    assert excluded.rank is None  # it never joined a round
    assert seen.values("excluded") == [1]
    assert len(seen.values("check.duration.us")) == 3  # one stat per process 0


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
        view = view_of(tcp_store)
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


def test_a_fail_open_is_recorded_with_its_reason(tcp_store, shc, monkeypatch):
    os.mkdir(os.path.join(shc, f"segment_health_check.{ARRAY}.1"))  # not a regular file
    with captured() as seen:
        handler = launcher(tcp_store, shc, slurm_env(task=1), 1, 1)
        handler.next_rendezvous()

        def broken():
            raise RuntimeError("a bug in the check")

        monkeypatch.setattr(handler.check, "evaluate", broken)
        handler.next_rendezvous()
    assert seen.names() == [
        "installed",
        "fail_open",
        "verdict_published",
        "fail_open",
        "verdict_published",
    ]
    first, second = seen.fields("fail_open")
    assert (first["reason"], first["trigger"]) == ("not-a-regular-file", "attempt")
    assert first["detail"] == "not a regular file: directory"
    assert (second["reason"], second["action"]) == ("wrapper-error", "evaluate")
    assert second["error"] == "RuntimeError: a bug in the check"
    assert [f["verdict"] for f in seen.fields("verdict_published")] == ["unchecked"] * 2
    assert seen.values("fail_open.not-a-regular-file") == [1]
    assert seen.values("fail_open.wrapper-error") == [1]


def test_the_responder_records_its_answers_never_its_looks(tcp_store, shc):
    """Between rounds process 0 looks for requests every 0.2 s: only an answer is a
    decision, recorded once, with the rank of the round process 0 trains in."""
    with captured() as seen:
        process0, sibling = (
            launcher(tcp_store, shc, slurm_env(task=1, procid=p), 2, 2, keep_alive_attempts=30)
            for p in (0, 1)
        )
        joined = join_all([process0, sibling])
        time.sleep(10 * RESPONDER_INTERVAL)  # ten looks, no request
        quiet = seen.names()
        restart = Join(sibling)
        wait_until(lambda: process0.num_nodes_waiting() == 1, timeout=10)
        wait_until(lambda: len(seen.names()) >= len(quiet) + 3, timeout=10)
        time.sleep(5 * RESPONDER_INTERVAL)  # five more looks, no new request
        answered = seen.names()
        Join(process0).wait()
        restart.wait()
    # Two threads record (process 0's and the sibling's): the events, not their order.
    assert Counter(quiet) == Counter(
        ["installed", "proceed", "verdict_published", "verdict_waited"]
    )
    assert Counter(answered[len(quiet) :]) == Counter(
        ["proceed", "verdict_published", "verdict_waited"]
    )
    request_events = [e for e in seen.ours() if parse_fields(e.message).get("trigger") == "request"]
    assert [e.name for e in request_events] == [
        "nvrx_seghealth.proceed",
        "nvrx_seghealth.verdict_published",
    ]
    assert {e.rank for e in request_events} == {joined[0].result.rank}


def test_without_a_directory_nothing_is_recorded(tcp_store, shc):
    with captured() as seen:
        handler = launcher(tcp_store, None, slurm_env(task=1), 1, 1)
        handler.next_rendezvous()
    assert seen.ours() == [] and seen.metrics == []
    assert any(e.name.endswith("next_rendezvous") for e in seen.events)  # torch's own went


def test_a_closed_rendezvous_met_before_joining_says_to_use_a_new_run_id(tcp_store, caplog):
    """torch raises a bare RendezvousClosedError; the wrapper passes it on and says why."""
    earlier = dynamic_handler(tcp_client(tcp_store), 1, 1)
    earlier.set_closed()  # as a finished run leaves it
    handler = launcher(tcp_store, None, {}, min_nodes=1, max_nodes=1)
    caplog.set_level(logging.ERROR, logger="nvrx_seghealth")
    with pytest.raises(RendezvousClosedError):
        handler.next_rendezvous()
    (said,) = our_records(caplog, logging.ERROR)
    assert RUN in said and "--rdzv-id" in said


def test_a_streak_of_failed_looks_is_one_warning_and_its_end_one_line(
    tcp_store, shc, caplog, monkeypatch
):
    """The responder looks every 0.2 s; a store that fails for a while costs one WARNING
    and one fail-open event for the whole streak, and one INFO line when it answers."""
    caplog.set_level(logging.INFO, logger="nvrx_seghealth")
    handler = launcher(tcp_store, shc, slurm_env(task=1), 1, 1, keep_alive_attempts=30)
    handler.next_rendezvous()  # starts the responder
    assert handler.handoff is not None  # task 1's process 0
    read, failing, looks = handler.handoff.read, threading.Event(), []

    def flaky():
        if failing.is_set():
            looks.append(time.monotonic())
            raise RuntimeError("store gone for a while")
        return read()

    monkeypatch.setattr(handler.handoff, "read", flaky)
    caplog.clear()
    with captured() as telemetry:
        failing.set()
        wait_until(lambda: telemetry.fields("fail_open") and len(looks) >= 3, timeout=30)
        failing.clear()
        wait_until(lambda: our_records(caplog, logging.INFO), timeout=30)  # readable again
    assert [f["action"] for f in telemetry.fields("fail_open")] == ["read-requests"]
    assert len(our_records(caplog, logging.WARNING)) == 1
    assert len(our_records(caplog, logging.INFO)) == 1


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


def test_a_dead_store_is_asked_less_and_less_often_between_rounds(shc):
    """A store that died between rounds: each failed look doubles the responder's pause (up
    to RESPONDER_BACKOFF_LIMIT), so torch's store client does not print a warning five
    times a second for as long as the workers train."""
    from harness.common import free_port

    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-c", STORE_SERVER, str(port)], stdout=subprocess.PIPE, text=True
    )
    assert server.stdout is not None  # a pipe
    try:
        assert server.stdout.readline().strip() == "serving"
        master = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=STORE_TIMEOUT)
        handler = launcher(master, shc, slurm_env(task=1), 1, 1, keep_alive_attempts=30)
        handler.next_rendezvous()  # starts the responder
        assert handler.handoff is not None  # task 1's process 0
        read, looks = handler.handoff.read, []

        def counted():
            looks.append(time.monotonic())
            return read()

        handler.handoff.read = counted  # type: ignore[method-assign]  # injected
        wait_until(lambda: len(looks) >= 2, timeout=30)
    finally:
        server.kill()
        server.wait()
    dead = len(looks)
    time.sleep(12 * RESPONDER_INTERVAL)  # 2.4 s: 12 looks without the back-off
    failed = looks[dead - 1 :]
    # Pauses of at least 0.2, 0.4, 0.8, 1.6 s: at most 4 looks fit (fewer when loaded).
    assert len(failed) <= 5
    pauses = [b - a for a, b in itertools.pairwise(failed)]
    assert all(p >= RESPONDER_INTERVAL * 2**k * 0.95 for k, p in enumerate(pauses))
    handler.shutdown()


STORE_TIMEOUT = datetime.timedelta(seconds=2)
STORE_SERVER = """
import datetime, sys, time
from torch.distributed import TCPStore
store = TCPStore("127.0.0.1", int(sys.argv[1]), is_master=True, wait_for_workers=False,
                 timeout=datetime.timedelta(seconds=30))
print("serving", flush=True)
time.sleep(3600)
"""


def test_after_shutdown_no_responder_is_started_again(tcp_store, shc):
    handler = launcher(tcp_store, shc, slurm_env(task=1), 1, 1)
    handler.next_rendezvous()
    assert responder_threads() == 1
    assert handler.shutdown() is True
    wait_until(lambda: responder_threads() == 0, timeout=10)
    for _ in range(3):
        with pytest.raises(RendezvousClosedError):
            handler.next_rendezvous()
    assert responder_threads() == 0


def responder_threads():
    return sum(t.name == "nvrx-seghealth-verdicts" for t in threading.enumerate())
