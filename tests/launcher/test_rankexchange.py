"""torch's rank exchange (:mod:`nvrx_seghealth._launcher.rankexchange`): skipped with the
check on, so that a unit excluded right after joining may leave the round it joined.

Real dynamic handlers on a real TCPStore, each launcher on its own thread, as in
``test_process_zero_watch.py``.
"""

from __future__ import annotations

import logging
import os

import pytest

from harness.rendezvous import (
    ARRAY,
    RUN,
    Join,
    excluded,
    join_all,
    our_records,
    tcp_client,
    watched,
)
from harness.telemetry import captured
from harness.waits import wait_until
from nvrx_seghealth import SegmentHealthRendezvousHandler, UnhealthyNodeException, publish_decision
from nvrx_seghealth._demo.rendezvous_state import read_store
from nvrx_seghealth._launcher.rankexchange import IDENTICAL_ENV, skip_rank_exchange

pytestmark = pytest.mark.usefixtures("release_handlers")


@pytest.mark.parametrize(
    ("given", "skipped", "warned"), [(None, True, False), ("1", True, False), ("0", False, True)]
)
def test_the_exchange_is_skipped_unless_the_user_kept_it(
    monkeypatch, caplog, given, skipped, warned
):
    """Unset: set to ``1`` (one INFO line); the user's ``1``: kept; another value: kept,
    one WARNING that names it."""
    if given is None:
        monkeypatch.delenv(IDENTICAL_ENV, raising=False)
    else:
        monkeypatch.setenv(IDENTICAL_ENV, given)
    caplog.set_level(logging.INFO, logger="nvrx_seghealth")
    assert skip_rank_exchange() is skipped
    assert os.environ[IDENTICAL_ENV] == (given or "1")
    warnings = our_records(caplog, logging.WARNING)
    assert len(warnings) == int(warned), warnings
    if warned:
        assert f"{IDENTICAL_ENV}=0" in warnings[0]


def test_a_composed_handler_with_the_check_on_skips_the_exchange(tcp_store, shc, monkeypatch):
    """The registered backend and composition share the handler's one door."""
    monkeypatch.delenv(IDENTICAL_ENV, raising=False)
    watched(tcp_store, shc, 0, watch_interval=0, nodes=(1, 1))
    assert os.environ[IDENTICAL_ENV] == "1"


def test_a_handler_without_the_check_leaves_the_exchange_alone(tcp_store, monkeypatch):
    from harness.rendezvous import dynamic_handler

    monkeypatch.delenv(IDENTICAL_ENV, raising=False)
    SegmentHealthRendezvousHandler(
        dynamic_handler(tcp_client(tcp_store), 1, 1), store=None, directory=None
    )
    assert IDENTICAL_ENV not in os.environ


def test_with_the_exchange_kept_a_spare_marked_while_it_waits_stays_until_its_next_round(
    tcp_store, shc, monkeypatch
):
    """The user's ``TORCH_ELASTIC_WORKER_IDENTICAL=0``: the spare, marked while it waits
    and admitted to the next round, does not look again right after joining and stays in
    that round (rank 0's agent waits for its ``role_info``); its next rendezvous excludes
    it before joining. Leaving there would fail every agent after 60 s; a slow stat there
    would hold them past the store's read timeout."""
    monkeypatch.setenv(IDENTICAL_ENV, "0")
    monkeypatch.setenv("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")  # as the backend sets it
    handlers = [watched(tcp_store, shc, task, watch_interval=0, nodes=(1, 2)) for task in (0, 1, 2)]
    with captured() as seen:
        assert [j.error for j in join_all(handlers[:2])] == [None, None]
        spare = Join(handlers[2])
        wait_until(lambda: len(read_store(tcp_client(tcp_store), RUN).spares or ()) == 1)
        publish_decision(shc, str(ARRAY), "2", "drained while waiting")
        publish_decision(shc, str(ARRAY), "1", "drained during training")
        zero, one = join_all(handlers[:2])  # task 1's worker failed: both agents restart
        assert zero.error is None and isinstance(one.error, UnhealthyNodeException)
        spare.wait()
        assert spare.error is None and spare.result.world_size == 2  # it stayed
        assert not excluded(handlers[2])  # no look after joining
        again = Join(handlers[2]).wait()
        assert isinstance(again.error, UnhealthyNodeException) and again.result is None
        assert not again.error.after_joining
    assert {f["task_id"] for f in seen.fields("excluded")} == {"1", "2"}
