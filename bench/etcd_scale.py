"""Row 4 on etcd-v2: what the watch and the hand-off cost against a real etcd.

torch's store directory (``/torch/elastic/store``) keeps every key of every run that
used the etcd, and torch's ``EtcdStore`` reads all of it for one ``check`` or ``get``.
Measured side by side in one run, against one etcd (:func:`harness.services.etcd.running_etcd`),
torch's ``EtcdStore`` ("before") and the backend's store (:class:`OneKeyEtcdStore`,
"now"):

* one look of the watch (``check`` of its key through a round's ``PrefixStore``, the
  key absent, as on every look while nothing is excluded) with :data:`SIZES` old keys
  in the directory: median milliseconds and the bytes etcd answered;
* a trained round of :data:`TASKS` array tasks of :data:`NODES` launchers (torch's real
  etcd-v2 rendezvous in one process, the wrapper with the watch on), every agent asking
  ``num_nodes_waiting()`` every 0.1 s for :data:`WATCH_SECONDS`, with the largest size
  of old keys: per launcher per second, the requests to the store directory, their
  bytes and the writes among them (the watch's looks, and process 0's looks for its
  siblings' verdict requests every 0.2 s). Every request of each launcher's etcd client
  is recorded (:class:`harness.services.etcd.Traffic`).

What it takes from the launcher is named in each module's ``__all__``: the watch's key and
look interval (``watch.EXCLUDED_KEY``, ``LOOK_INTERVAL``), process 0's responder interval
(``process_zero.RESPONDER_INTERVAL``), and the inner rendezvous creators the backend uses
(``registry.create``, then torch's ``create_handler`` as the backend calls it).
"""

from __future__ import annotations

import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from typing import cast

from harness.bench.measure import Row, interleaved_samples
from harness.services.etcd import (
    STORE,
    EtcdServer,
    EtcdUnavailable,
    Request,
    Traffic,
    plant_old_keys,
    running_etcd,
)
from harness.slurmenv import slurm_env

#: Old keys in the store directory for the look's cost (planted in turn).
SIZES = (0, 1000, 5000)
#: The round: array tasks, launchers per task, and how long the agents ask.
TASKS, NODES = 4, 2
WATCH_SECONDS, MONITOR_INTERVAL = 10.0, 0.1
#: Writes to etcd the wrapper may make while a healthy world trains.
WRITES_TARGET = 0.0
#: Bytes of etcd's answer about one key (the store directory at 1,000 keys: 200 kB).
ONE_KEY_BYTES = 1000


def rows(quick: bool) -> list[Row]:
    """The rows; one ``n/a`` row when no etcd can be started here."""
    try:
        with running_etcd("bench") as server:
            looks = _look_rows(server, quick)
            return looks + _round_rows(server, WATCH_SECONDS / 2 if quick else WATCH_SECONDS)
    except EtcdUnavailable as error:
        return [Row("etcd-v2: the watch's cost", None, "-", None, f"not measured: {error}")]


def _look_rows(server: EtcdServer, quick: bool) -> list[Row]:
    import torch.distributed as dist
    from torch.distributed.elastic.rendezvous.etcd_store import EtcdStore

    from nvrx_seghealth._launcher.watch import EXCLUDED_KEY
    from nvrx_seghealth._rendezvous.etcd_reads import OneKeyEtcdStore

    stores = {"before": EtcdStore, "now": OneKeyEtcdStore}
    traffic: dict[str, Traffic] = {}
    looks: dict[str, Callable[[], float]] = {}
    for name, kind in stores.items():
        client = server.client()
        traffic[name] = Traffic(client)
        underlying = kind(client, STORE)  # kept: the PrefixStore calls it back by reference
        round_store = dist.PrefixStore("torch.rendezvous.bench.0", underlying)

        def look(store=round_store, underlying=underlying) -> float:
            started = time.perf_counter()
            assert not store.check([EXCLUDED_KEY])
            return time.perf_counter() - started

        looks[name] = look
    result, planted = [], 0
    for size in SIZES:
        plant_old_keys(server, range(planted, size))
        planted = size
        marks = {name: len(t.since()) for name, t in traffic.items()}
        samples = interleaved_samples(looks, 10 if quick else 40)
        ms = {name: 1000 * statistics.median(values) for name, values in samples.items()}
        size_of = {
            name: statistics.median(r.size for r in traffic[name].since(marks[name]))
            for name in stores
        }
        result.append(
            Row(
                f"etcd-v2: one watch look with {size:,} old keys in the store, now / before "
                "(ratio of ms)",
                ms["now"] / ms["before"],
                f"now: one key answered (< {ONE_KEY_BYTES:,} bytes)",
                size_of["now"] < ONE_KEY_BYTES,
                f"now {ms['now']:.2f} ms, {size_of['now']:.0f} bytes answered; before "
                f"(torch's check) {ms['before']:.2f} ms, {size_of['before']:,.0f} bytes "
                f"(medians of {len(samples['now'])} interleaved looks each)",
            )
        )
    return result


def _round_rows(server: EtcdServer, seconds: float) -> list[Row]:
    from nvrx_seghealth._launcher.process_zero import RESPONDER_INTERVAL
    from nvrx_seghealth._launcher.watch import LOOK_INTERVAL

    launchers = TASKS * NODES
    # What the same wrapper makes on c10d: store calls per launcher per second; looks
    # in progress at the window's start and end may be counted too.
    c10d_calls = 1 / LOOK_INTERVAL + (TASKS / launchers) / RESPONDER_INTERVAL
    bound = c10d_calls * (1 + 1 / seconds)
    measured = {name: _trained_round(server, name, seconds) for name in ("before", "now")}
    per = launchers * seconds
    result = []
    for name, (requests, size, writes, proposals) in measured.items():
        result.append(
            Row(
                f"etcd-v2, {SIZES[-1]:,} old keys, {launchers} launchers training, {name}: "
                "the wrapper's etcd requests per launcher per second",
                len(requests) / per,
                f"<= {bound:.2f}: its {c10d_calls:g} store calls a second on c10d, one "
                "second more for the window's edges"
                if name == "now"
                else "-",
                len(requests) / per <= bound if name == "now" else None,
                f"{size / per / 1000:,.1f} kB/s and {writes / per:.2f} writes/s per launcher "
                f"({len(requests)} requests, {size / 1e6:,.1f} MB, {writes} writes in "
                f"{seconds:g} s); raft proposals in etcd, torch's keep-alive included: "
                f"{proposals / seconds:.1f}/s",
            )
        )
    writes_now = measured["now"][2] / per
    result.append(
        Row(
            "etcd-v2: the wrapper's writes per launcher per second while a healthy world "
            "trains, now",
            writes_now,
            f"= {WRITES_TARGET:g}",
            writes_now == WRITES_TARGET,
            f"before {measured['before'][2] / per:.2f} (process 0's add(key, 0): a create "
            f"that fails and a compare-and-swap); watch look every {LOOK_INTERVAL:g} s per "
            f"launcher, process 0's look for verdict requests every {RESPONDER_INTERVAL:g} s, "
            f"agents asking every {MONITOR_INTERVAL:g} s",
        )
    )
    return result


def _trained_round(
    server: EtcdServer, name: str, seconds: float
) -> tuple[list[Request], int, int, int]:
    """One world of ``TASKS * NODES`` launchers, built ``name`` (before/now), asked for
    ``seconds``: the wrapper's requests (to the store directory) in that window, their
    bytes, the writes among them, and the raft proposals etcd committed meanwhile."""
    from torch.distributed.elastic.rendezvous import RendezvousParameters
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import create_handler
    from torch.distributed.elastic.rendezvous.etcd_rendezvous_backend import create_backend
    from torch.distributed.elastic.rendezvous.etcd_store import EtcdStore

    from nvrx_seghealth import SegmentHealthRendezvousHandler
    from nvrx_seghealth._rendezvous import registry

    run = f"bench-{name}-{uuid.uuid4().hex[:8]}"
    launchers = TASKS * NODES  # a world that can lose one task
    params = RendezvousParameters(
        "etcd-v2", server.endpoint, run, launchers - NODES, launchers, last_call_timeout=1
    )
    handlers, traffic = [], []
    with tempfile.TemporaryDirectory() as directory:
        for task in range(TASKS):
            for procid in range(NODES):
                if name == "now":  # the backend's etcd-v2 backend and store
                    etcd_backend, store = registry.create(params)
                else:  # torch's etcd-v2 backend and store as they come
                    etcd_backend, store = create_backend(params)
                inner = create_handler(store, etcd_backend, params)
                traffic.append(Traffic(cast(EtcdStore, store).client))
                env = slurm_env(task, procid, array_job=900, job=1000 + task)
                handlers.append(
                    SegmentHealthRendezvousHandler(
                        inner, store=store, directory=directory, environ=env, watch_interval=60
                    )
                )
        joins = [threading.Thread(target=h.next_rendezvous) for h in handlers]
        for thread in joins:
            thread.start()
        for thread in joins:
            thread.join(timeout=300)
        marks = [len(t.since()) for t in traffic]
        proposals = server.proposals()
        deadline = time.monotonic() + seconds

        def agent(handler) -> None:  # its monitor loop while the workers train
            while time.monotonic() < deadline:
                handler.num_nodes_waiting()
                time.sleep(MONITOR_INTERVAL)

        agents = [threading.Thread(target=agent, args=(h,)) for h in handlers]
        for thread in agents:
            thread.start()
        time.sleep(max(0.0, deadline - time.monotonic()))
        window = [r for t, mark in zip(traffic, marks) for r in t.since(mark) if r.in_store]
        proposals = server.proposals() - proposals
        for thread in agents:
            thread.join()
        for handler in handlers:
            handler.shutdown()
    writes = sum(1 for r in window if r.method != "GET")
    return window, sum(r.size for r in window), writes, proposals
