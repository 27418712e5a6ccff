"""The handler itself, around a real in-process ``DynamicRendezvousHandler`` on a real
TCPStore: what passes through to the inner handler, the settings it takes at
construction, how an excluded launcher shuts down and leaves its round. What each
launcher's coordinator does around a join is tested in ``test_process_zero.py``,
``test_sibling.py`` and ``test_roles.py``.

Each participant is one launcher: its own TCPStore client, its own c10d backend and
dynamic handler, its own Slurm-like environment, joining from its own thread.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, cast

import pytest
from torch.distributed.elastic.rendezvous import RendezvousClosedError
from torch.distributed.elastic.rendezvous.dynamic_rendezvous import DynamicRendezvousHandler

from harness.rendezvous import (
    ARRAY,
    RUN,
    Join,
    coordinator_of,
    dynamic_handler,
    join_all,
    launcher,
    our_records,
    participants,
    tcp_client,
)
from harness.slurmenv import slurm_env
from harness.telemetry import captured
from harness.waits import wait_until
from nvrx_seghealth import (
    ReplacementGroupMarkers,
    SegmentHealthRendezvousHandler,
    UnhealthyNodeException,
    publish_decision,
)
from nvrx_seghealth._errors import ConfigurationError

pytestmark = pytest.mark.usefixtures("release_handlers")


def test_shutdown_after_exclusion_leaves_the_rendezvous_open(tcp_store, shc):
    publish_decision(shc, str(ARRAY), "1", "bad")
    # At least two nodes: a world waits for both healthy units, however late one of
    # them arrives on a busy machine (with one, the first could form a world alone).
    handlers = [launcher(tcp_store, shc, slurm_env(task=t), 2, 3) for t in (0, 1, 2)]
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


def test_without_a_directory_the_wrapper_only_delegates(tcp_store, shc):
    publish_decision(shc, str(ARRAY), "1", "bad")
    ReplacementGroupMarkers(tcp_store, RUN, str(ARRAY)).publish("1", "marked")
    handlers = [launcher(tcp_store, None, slurm_env(task=1, procid=p), 2, 2) for p in (0, 1)]
    assert [coordinator_of(h) for h in handlers] == [None, None]  # no check, no markers
    assert [j.result.world_size for j in join_all(handlers)] == [2, 2]


def test_every_other_method_delegates(tcp_store, shc):
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
    assert handler.use_agent_store  # it serves its workers' store (test_agentstore.py)
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


def test_the_constructor_builds_through_from_settings_the_one_path(tcp_store, shc):
    """The constructor validates raw values and hands them to ``from_settings``, which
    builds every handler: a subclass that extends it extends both doors."""

    built: list[tuple[str | None, str]] = []

    class Counted(SegmentHealthRendezvousHandler):
        @classmethod
        def from_settings(cls, inner, settings, **given):
            built.append((settings and settings.directory, given["backend"]))
            return super().from_settings(inner, settings, **given)

    inner = dynamic_handler(tcp_client(tcp_store), 1, 1)
    handler = Counted(inner, store=None, directory=shc, environ=slurm_env(task=0))
    off = Counted(inner, store=None, directory=None, backend="segment-health")
    assert built == [(shc, "c10d"), (None, "segment-health")]
    assert (type(handler), type(off)) == (Counted, Counted)
    assert coordinator_of(handler) is not None and coordinator_of(off) is None


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
