"""A launcher's heartbeat: one WARNING per spell of failed writes, and a thread that ends
with its handler, over real TCPStores on 127.0.0.1."""

from __future__ import annotations

import dataclasses
import gc
import logging
import time
from datetime import timedelta

import pytest
from torch.distributed import TCPStore

from harness.rendezvous import tcp_client
from harness.waits import wait_until
from nvrx_seghealth._rendezvous.barrier import BarrierRendezvousHandler, BarrierSettings
from nvrx_seghealth._rendezvous.barrier.heartbeat import Heartbeat

#: Seconds a test waits for what it expects; far beyond a beat.
BOUND = 60.0
INTERVAL = 0.05
NOT_WRITTEN = "barrier rendezvous heartbeat not written"


def _not_written(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if NOT_WRITTEN in r.getMessage()]


def test_a_store_gone_for_many_beats_is_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="nvrx_seghealth")
    master = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, use_libuv=True)
    client = TCPStore("127.0.0.1", master.port, is_master=False, timeout=timedelta(seconds=5))
    heartbeat = Heartbeat(client, "node", INTERVAL)
    heartbeat.start()
    try:
        del master  # the server stops: every later write fails
        wait_until(lambda: _not_written(caplog), BOUND)
        time.sleep(40 * INTERVAL)  # many more beats fail, unless the machine is slow
        assert len(_not_written(caplog)) == 1
    finally:
        heartbeat.stop()


def test_the_heartbeat_ends_once_its_handler_is_gone() -> None:
    master = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, use_libuv=True)
    settings = BarrierSettings("job", 1, 1, join_timeout=BOUND, keep_alive_interval=INTERVAL)
    settings = dataclasses.replace(settings, local_addr="127.0.0.1")
    handler = BarrierRendezvousHandler(tcp_client(master), settings)
    handler.next_rendezvous()  # a world of one: the heartbeat beats
    thread = handler._heartbeat._thread
    assert thread is not None and thread.is_alive()
    del handler
    gc.collect()
    thread.join(BOUND)
    assert not thread.is_alive()
