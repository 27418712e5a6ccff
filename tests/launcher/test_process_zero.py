"""Process 0 of a unit (:class:`~nvrx_seghealth._launcher.process_zero.ProcessZero`): it
judges the decision file before each join, excludes its unit and marks its group, and
answers its siblings, at each attempt and, between rounds, from its responder.

Most tests run launchers as in ``test_sibling.py`` (real dynamic handlers on a real
TCPStore, each on its own thread). Those that break a piece of process 0's own work
build the coordinator alone, as its handler does, on a real TCPStore
(``make_coordinator``), and call it as the handler would: before joining, out of the
rendezvous, after joining.
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
from typing import cast

import pytest
import torch.distributed as dist
from torch.distributed.elastic.rendezvous.dynamic_rendezvous import DynamicRendezvousHandler

from harness.ports import free_port
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
from nvrx_seghealth._decision import decision_file
from nvrx_seghealth._errors import ExclusionReason
from nvrx_seghealth._launcher.events import parse_fields
from nvrx_seghealth._launcher.handoff import Verdict
from nvrx_seghealth._launcher.process_zero import RESPONDER_INTERVAL, ProcessZero

pytestmark = pytest.mark.usefixtures("release_handlers")


def process_zero(make_coordinator, **options) -> ProcessZero:
    """Process 0 of array task 1, built alone (``make_coordinator``)."""
    role = make_coordinator(slurm_env(task=1), **options)
    assert isinstance(role, ProcessZero)
    return role


def attempt(zero: ProcessZero) -> None:
    """One attempt of process 0's launcher, as its handler makes it around a round of
    one: before joining (which starts the responder), out of the rendezvous, joined."""
    zero.joining()
    zero.out_of_rendezvous()
    zero.joined(0, None)


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


def test_process_zero_answers_at_each_attempt(tcp_store, shc, tmp_path):
    handler = launcher(tcp_store, shc, slurm_env(task=1), 1, 1)
    view = sibling_view(tcp_store)
    request, _ = view.request()
    handler.next_rendezvous()
    assert view.wait(request, 0) is Verdict.HEALTHY
    os.mkdir(os.path.join(shc, f"segment_health_check.{ARRAY}.1"))  # not a regular file
    request, _ = view.request()
    handler.next_rendezvous()
    assert view.wait(request, 5) is Verdict.UNCHECKED
    os.rmdir(os.path.join(shc, f"segment_health_check.{ARRAY}.1"))
    publish_decision(shc, str(ARRAY), "1", "bad")
    request, _ = view.request()
    with pytest.raises(UnhealthyNodeException):
        handler.next_rendezvous()
    assert view.wait(request, 5) is Verdict.EXCLUDED
    request, _ = view.request()
    with pytest.raises(UnhealthyNodeException):
        handler.next_rendezvous()  # excluded for good ...
    assert view.wait(request, 0) is Verdict.EXCLUDED
    assert view.wait(request + 1000, 0) is Verdict.EXCLUDED  # ... for every request


def test_exclusion_sticks_even_if_the_decision_is_cleared(shc, make_coordinator):
    path = publish_decision(shc, str(ARRAY), "1", "bad")
    zero = process_zero(make_coordinator)
    with pytest.raises(UnhealthyNodeException):
        zero.joining()
    os.unlink(path)
    with pytest.raises(UnhealthyNodeException) as again:
        zero.joining()
    assert (again.value.reason, again.value.path) == (ExclusionReason.DECISION_FILE, path)
    assert zero.exclusion is again.value


def test_decision_is_consumed_at_the_next_rendezvous(tcp_store, shc):
    """A unit that joined round 0 healthy is excluded at its next ``next_rendezvous()``."""
    handlers = [launcher(tcp_store, shc, slurm_env(task=t), 2, 2) for t in (0, 1)]
    assert [j.result.world_size for j in join_all(handlers)] == [2, 2]
    publish_decision(shc, str(ARRAY), "1", "drained while running")
    with pytest.raises(UnhealthyNodeException):
        handlers[1].next_rendezvous()
    assert ReplacementGroupMarkers(tcp_store, RUN, str(ARRAY)).is_marked("1")


def test_failure_to_publish_is_a_warning_and_the_exclusion_stands(tcp_store, shc, caplog):
    publish_decision(shc, str(ARRAY), "1", "bad")
    handler = SegmentHealthRendezvousHandler(
        dynamic_handler(tcp_client(tcp_store), 1, 1),
        store=dead_store(),
        directory=shc,
        environ=slurm_env(task=1),
    )
    with captured() as telemetry, pytest.raises(UnhealthyNodeException):
        handler.next_rendezvous()
    actions = [f["action"] for f in telemetry.fields("fail_open")]
    assert "publish-marker" in actions and "publish-verdict" in actions


def test_a_failing_check_fails_open_with_one_warning_per_stat(
    make_coordinator, caplog, monkeypatch
):
    """Nothing but an exclusion leaves process 0 as an error: its launcher joins. Each
    of its two stats (before joining, right after) fails with one warning."""
    zero = process_zero(make_coordinator)

    def broken(**_):
        raise RuntimeError("a bug in the check")

    monkeypatch.setattr(zero.check, "evaluate", broken)
    with captured() as telemetry:
        attempt(zero)
    assert len(our_records(caplog, logging.WARNING)) == 2
    failed = telemetry.fields("fail_open")
    assert [(f["action"], f["error"].split(":")[0]) for f in failed] == [
        ("evaluate", "RuntimeError")
    ] * 2


# -- between rounds: the responder ---------------------------------------------------------


def count_stats(monkeypatch, path):
    """Record every stat of ``path`` (the helper call the decision layer makes)."""
    real_stat_within = decision_file.stat_within
    stats = []

    def counting_stat(target, timeout):
        if target == path:
            stats.append(time.monotonic())
        return real_stat_within(target, timeout)

    monkeypatch.setattr(decision_file, "stat_within", counting_stat)
    return stats


def test_a_sibling_restarting_alone_is_answered_while_process_zero_trains(
    tcp_store, shc, monkeypatch
):
    """Process 0 is outside the rendezvous (its workers run): it still answers, at once,
    with a fresh stat, so the sibling joins and pulls the others into a new round."""
    path = os.path.join(shc, f"segment_health_check.{ARRAY}.1")
    stats = count_stats(monkeypatch, path)
    process0, sibling = (
        launcher(tcp_store, shc, slurm_env(task=1, procid=p), 2, 2, AT_ONCE_BOUND) for p in (0, 1)
    )
    assert [j.result.world_size for j in join_all([process0, sibling])] == [2, 2]
    # the round's stat and the look after joining: the sibling asked while process 0 joined
    assert len(stats) == 2
    started = time.monotonic()
    restart = Join(sibling)  # the sibling's worker failed; process 0's still run
    wait_until(lambda: process0.num_nodes_waiting() == 1, timeout=AT_ONCE_BOUND)
    assert time.monotonic() - started < AT_ONCE_BOUND / 2  # not the hand-off's bound
    assert len(stats) == 3  # answered with a fresh stat, not the round's old verdict
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
    assert len(stats) == 2  # the stat before joining and the look after it: none for the request


def test_a_streak_of_failed_looks_is_one_warning_and_its_end_one_line(
    make_coordinator, caplog, monkeypatch
):
    """The responder looks every 0.2 s; a store that fails for a while costs one WARNING
    and one fail-open event for the whole streak, and one INFO line when it answers."""
    caplog.set_level(logging.INFO, logger="nvrx_seghealth")
    zero = process_zero(make_coordinator)
    attempt(zero)  # starts the responder
    assert zero.handoff is not None  # task 1's process 0
    read, failing, looks = zero.handoff.read, threading.Event(), []

    def flaky():
        if failing.is_set():
            looks.append(time.monotonic())
            raise RuntimeError("store gone for a while")
        return read()

    monkeypatch.setattr(zero.handoff, "read", flaky)
    caplog.clear()
    with captured() as telemetry:
        failing.set()
        wait_until(lambda: telemetry.fields("fail_open") and len(looks) >= 3, timeout=30)
        failing.clear()
        wait_until(lambda: our_records(caplog, logging.INFO), timeout=30)  # readable again
    assert [f["action"] for f in telemetry.fields("fail_open")] == ["read-requests"]
    assert len(our_records(caplog, logging.WARNING)) == 1
    assert len(our_records(caplog, logging.INFO)) == 1


def test_a_dead_store_is_asked_less_and_less_often_between_rounds(make_coordinator):
    """A store that died between rounds: each failed look doubles the responder's pause (up
    to RESPONDER_BACKOFF_LIMIT), so torch's store client does not print a warning five
    times a second for as long as the workers train."""
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-c", STORE_SERVER, str(port)], stdout=subprocess.PIPE, text=True
    )
    assert server.stdout is not None  # a pipe
    try:
        assert server.stdout.readline().strip() == "serving"
        # connecting may take long on a loaded machine; the short bound is for the calls
        master = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=CONNECT_TIMEOUT)
        master.set_timeout(STORE_TIMEOUT)
        zero = process_zero(make_coordinator, master=master)
        attempt(zero)  # starts the responder
        assert zero.handoff is not None  # task 1's process 0
        read, looks = zero.handoff.read, []

        def counted():
            looks.append(time.monotonic())
            return read()

        zero.handoff.read = counted  # type: ignore[method-assign]  # injected
        wait_until(lambda: len(looks) >= 2, timeout=30)
    finally:
        server.kill()
        server.wait()
        server.stdout.close()
    dead = len(looks)
    time.sleep(12 * RESPONDER_INTERVAL)  # 2.4 s: 12 looks without the back-off
    failed = looks[dead - 1 :]
    # Pauses of at least 0.2, 0.4, 0.8, 1.6 s: at most 4 looks fit (fewer when loaded).
    assert len(failed) <= 5
    pauses = [b - a for a, b in itertools.pairwise(failed)]
    assert all(p >= RESPONDER_INTERVAL * 2**k * 0.95 for k, p in enumerate(pauses))
    zero.stop()


STORE_TIMEOUT = datetime.timedelta(seconds=2)
CONNECT_TIMEOUT = datetime.timedelta(seconds=60)


STORE_SERVER = """
import datetime, sys, time
from torch.distributed import TCPStore
store = TCPStore("127.0.0.1", int(sys.argv[1]), is_master=True, wait_for_workers=False,
                 timeout=datetime.timedelta(seconds=30))
print("serving", flush=True)
time.sleep(3600)
"""


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


def test_a_fail_open_is_recorded_with_its_reason(shc, make_coordinator, monkeypatch):
    os.mkdir(os.path.join(shc, f"segment_health_check.{ARRAY}.1"))  # not a regular file
    with captured() as seen:
        zero = process_zero(make_coordinator)
        attempt(zero)

        def broken(**_):
            raise RuntimeError("a bug in the check")

        monkeypatch.setattr(zero.check, "evaluate", broken)
        attempt(zero)
    # the look after joining continues the first attempt's streak; a bug fails each stat
    assert seen.names() == [
        "installed",
        "fail_open",
        "verdict_published",
        "fail_open",
        "verdict_published",
        "fail_open",
    ]
    first, second, _ = seen.fields("fail_open")
    assert (first["reason"], first["trigger"]) == ("not-a-regular-file", "attempt")
    assert first["detail"] == "not a regular file: directory"
    assert (second["reason"], second["action"]) == ("wrapper-error", "evaluate")
    assert second["error"] == "RuntimeError: a bug in the check"
    assert [f["verdict"] for f in seen.fields("verdict_published")] == ["unchecked"] * 2
    assert seen.values("fail_open.not-a-regular-file") == [1]
    assert seen.values("fail_open.wrapper-error") == [1, 1]


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
