"""The barrier rendezvous over the etcd-v3 store, against a real etcd: the same protocol
as on a TCPStore, each launcher with its own etcd client. A world of three forms with
ranks 0 to 2; all three join again and form round 1. Each launcher's heartbeat has a
store of its own (the etcd-v3 store's clone), a store written in Python."""

from __future__ import annotations

import contextlib
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from harness.services.etcd_v3 import open_v3_launcher
from nvrx_seghealth._rendezvous.barrier import BarrierRendezvousHandler, BarrierSettings

pytestmark = pytest.mark.etcd

#: Seconds a test waits for a round; far beyond the round's own timeouts.
BOUND = 120.0


def test_a_barrier_world_forms_and_forms_again_on_etcd_v3(etcd_v3_server) -> None:
    run = f"run-{uuid.uuid4().hex[:8]}"
    settings = BarrierSettings(run, 3, 3, join_timeout=BOUND, local_addr="127.0.0.1")
    with contextlib.ExitStack() as stack:
        stores = [
            stack.enter_context(open_v3_launcher(etcd_v3_server.endpoint, run))[1] for _ in range(3)
        ]
        handlers = [BarrierRendezvousHandler(store, settings) for store in stores]
        try:
            with ThreadPoolExecutor(max_workers=3) as pool:
                for round_number in (0, 1):
                    infos = list(pool.map(lambda h: h.next_rendezvous(), handlers, timeout=BOUND))
                    assert sorted(info.rank for info in infos) == [0, 1, 2], round_number
                    assert {info.world_size for info in infos} == {3}
        finally:
            handlers[0].shutdown()
            for handler in handlers:
                handler._heartbeat.stop()
