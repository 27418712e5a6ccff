"""Row 4: store and filesystem cost of one rendezvous round at scale.

5,008 launchers (313 array tasks x 16 nodes) run the real wrapper's ``next_rendezvous``
against one TCPStore, from several processes, each launcher on its own thread. The
inner rendezvous is a stand-in that returns once every launcher has entered it (or
was refused), as a real round completes: this row measures what the wrapper adds, not
torch's rendezvous; the stand-in's own calls go through a connection not counted.
Every store call and every ``os.stat`` of a decision file is counted. Two rounds: all
units healthy, and all 313 units excluded at once (313 concurrent marker publishers;
none may be lost). A third healthy round runs with the watch on: its launchers' agents
then ask ``num_nodes_waiting()`` every 0.1 s (torchrun's default ``--monitor-interval``)
for :data:`WATCH_SECONDS`, and the store calls of the watch's job-wide signal in the
round's store are counted. The rows of :mod:`.etcd_scale` follow: the same watch and
hand-off on a real etcd-v2, whose store directory keeps every run's keys.

Launcher ``P`` of task ``T`` runs in process ``(T + P) mod 8``: the 313 processes 0
are spread over all eight processes, so markers are published from eight processes at
once, and a task's siblings (in the other processes) ask process 0 as in a real job,
sometimes before it has answered. The wall time runs from
the moment every process is ready (torch imported, store connected, handlers built)
to the last result.
"""

from __future__ import annotations

import collections
import datetime
import multiprocessing
import os
import tempfile
import threading
import time

from harness.bench.measure import Row
from harness.rendezvous import CountingStore
from harness.slurmenv import slurm_env

from . import etcd_scale

TASKS, NODES, PROCESSES = 313, 16, 8
#: Seconds the simulating processes may take to import torch and build their handlers.
READY_TIMEOUT = 300.0
#: Store ops the wrapper may add per launcher per healthy round: two for every launcher
#: (process 0 stands and settles its answer; a sibling asks for it and looks at its
#: marker once it joined), plus the reads of a sibling that asks before process 0 has
#: answered.
ADDED_OPS_TARGET = 4.0
#: Seconds of training the watch's round is asked ``num_nodes_waiting()`` for, and the
#: agents' monitor interval.
WATCH_SECONDS, MONITOR_INTERVAL = 10.0, 0.1
#: The watch's signal may cost at most one store call per launcher per second.
WATCH_OPS_TARGET = 1.0


def _launchers(share: int) -> list[dict[str, str]]:
    return [
        slurm_env(task, procid, array_job=900, job=1000 + task)
        for task in range(TASKS)
        for procid in range(NODES)
        if (task + procid) % PROCESSES == share
    ]


def _round(port: int, directory: str, run_id: str, share: int, watch: bool, ready, results) -> None:
    import logging

    import torch.distributed as dist
    from torch.distributed.elastic.rendezvous import RendezvousHandler, RendezvousInfo

    from nvrx_seghealth import SegmentHealthRendezvousHandler, UnhealthyNodeException

    rounds = dist.TCPStore(
        "127.0.0.1", port, is_master=False, timeout=datetime.timedelta(seconds=120)
    )  # the stand-in rendezvous's own connection: its calls are not the wrapper's
    # The round's store (RendezvousInfo.store), where the watch's signal lives: counted
    # apart from the markers' and the hand-off's store.
    round_store = CountingStore(
        dist.TCPStore("127.0.0.1", port, is_master=False, timeout=datetime.timedelta(seconds=120))
    )

    class WholeRound(RendezvousHandler):
        """An inner handler that returns once every launcher has entered it, as a real
        round completes only when all its nodes joined (its cost is not measured)."""

        def get_backend(self):
            return "whole-round"

        def next_rendezvous(self):
            rounds.add(f"{run_id}/entered", 1)
            while rounds.add(f"{run_id}/entered", 0) < TASKS * NODES - rounds.add(
                f"{run_id}/refused", 0
            ):
                time.sleep(0.05)
            # No worker bootstraps from this round: no bootstrap store's address.
            return RendezvousInfo(round_store, 0, TASKS * NODES, None)  # type: ignore[arg-type]

        def is_closed(self):
            return False

        def set_closed(self):
            pass

        def num_nodes_waiting(self):
            return 0

        def get_run_id(self):
            return run_id

        def shutdown(self):
            return True

    store = CountingStore(
        dist.TCPStore("127.0.0.1", port, is_master=False, timeout=datetime.timedelta(seconds=120))
    )
    from nvrx_seghealth._decision import decision_file

    stats = 0
    real_stat_within = decision_file.stat_within

    def counting_stat(path, timeout):
        nonlocal stats
        if os.path.basename(path).startswith("segment_health_check."):
            stats += 1
        return real_stat_within(path, timeout)

    decision_file.stat_within = counting_stat  # the check's one stat (made in its helper process)
    # 5,008 exclusions would each log their lines to stderr; the counts are the result.
    logging.getLogger("nvrx_seghealth").addHandler(logging.NullHandler())
    logging.getLogger("nvrx_seghealth").propagate = False
    handlers = [
        SegmentHealthRendezvousHandler(
            WholeRound(),
            store=store,
            directory=directory,
            environ=env,
            # no look of process 0 falls in the measured seconds: only the signal counts
            watch_interval=10 * WATCH_SECONDS if watch else 0.0,
        )
        for env in _launchers(share)
    ]
    excluded = []

    def join(handler) -> None:
        try:
            handler.next_rendezvous()
        except UnhealthyNodeException:
            excluded.append(handler)
            rounds.add(f"{run_id}/refused", 1)

    threads = [threading.Thread(target=join, args=(h,), daemon=True) for h in handlers]
    ready.wait()  # every process has imported torch, connected and built its handlers
    started = time.perf_counter()
    for thread in threads:  # every launcher joins at once, as srun starts them
        thread.start()
    for thread in threads:
        thread.join()
    calls = dict(store.calls)  # before the responders look again after the round
    wall = time.perf_counter() - started
    if watch:  # the agents' monitor loops while the workers train
        told = collections.Counter(round_store.calls)  # each one's interval, as it joined
        deadline = time.monotonic() + WATCH_SECONDS
        while time.monotonic() < deadline:
            for handler in handlers:
                handler.num_nodes_waiting()
            time.sleep(MONITOR_INTERVAL)
        calls = {f"watch {name}": count for name, count in (round_store.calls - told).items()}
    for handler in handlers:
        handler.shutdown()
    results.put((share, wall, calls, stats, len(excluded)))


def _measure(directory: str, run_id: str, *, watch: bool = False) -> dict:
    import torch.distributed as dist

    master = dist.TCPStore(
        "127.0.0.1",
        0,
        is_master=True,
        wait_for_workers=False,
        timeout=datetime.timedelta(seconds=120),
    )
    context = multiprocessing.get_context("spawn")
    # A barrier, not a fixed pause: the processes take seconds (torch import, 626
    # handlers each) to get ready, and that set-up is not what this row measures.
    ready, results = context.Barrier(PROCESSES + 1, timeout=READY_TIMEOUT), context.Queue()
    workers = [
        context.Process(
            target=_round, args=(master.port, directory, run_id, share, watch, ready, results)
        )
        for share in range(PROCESSES)
    ]
    for worker in workers:
        worker.start()
    ready.wait()
    begun = time.perf_counter()
    outcomes = [results.get(timeout=600) for _ in workers]
    wall = time.perf_counter() - begun
    for worker in workers:
        worker.join(timeout=60)
    calls: collections.Counter[str] = collections.Counter()
    for _, _, counted, _, _ in outcomes:
        calls.update(counted)
    from nvrx_seghealth import ReplacementGroupMarkers

    return {
        "wall": wall,
        "slowest": max(o[1] for o in outcomes),
        "calls": calls,
        "stats": sum(o[3] for o in outcomes),
        "excluded": sum(o[4] for o in outcomes),
        "marked": len(ReplacementGroupMarkers(master, run_id, "900").marked_groups()),
    }


#: Launchers of the side-by-side round with the real c10d rendezvous inside.
INNER_TASKS, INNER_NODES = 4, 16


def _inner_side_by_side() -> dict[str, float]:
    """One real round: the wrapper around torch's c10d dynamic handler, 64 launchers.

    Each launcher has its own TCPStore connection; the wrapper's calls and the c10d
    backend's calls go through two counting proxies over it, so the two counts are
    of the same round. (5,008 real c10d participants are out of reach on one machine:
    every join rewrites one pickled state of all participants; per launcher, c10d's
    count only grows with the number of launchers.)
    """
    import threading

    import torch.distributed as dist
    from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import (
        C10dRendezvousBackend,
    )
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import (
        DynamicRendezvousHandler,
        RendezvousTimeout,
    )

    from nvrx_seghealth import SegmentHealthRendezvousHandler

    count = INNER_TASKS * INNER_NODES
    timeout = datetime.timedelta(seconds=120)
    master = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timeout)
    wrapper_calls: list[collections.Counter[str]] = []
    inner_calls: list[collections.Counter[str]] = []
    handlers = []
    with tempfile.TemporaryDirectory() as directory:
        for task in range(INNER_TASKS):
            for procid in range(INNER_NODES):
                client = dist.TCPStore("127.0.0.1", master.port, is_master=False, timeout=timeout)
                ours, theirs = CountingStore(client), CountingStore(client)
                inner = DynamicRendezvousHandler.from_backend(
                    "side-by-side",
                    client,
                    C10dRendezvousBackend(theirs, "side-by-side"),
                    count,
                    count,
                    local_addr="127.0.0.1",
                    timeout=RendezvousTimeout(last_call=datetime.timedelta(seconds=1)),
                )
                env = slurm_env(task, procid, array_job=900, job=1000 + task)
                handlers.append(
                    SegmentHealthRendezvousHandler(
                        inner, store=ours, directory=directory, environ=env
                    )
                )
                wrapper_calls.append(ours.calls)
                inner_calls.append(theirs.calls)
        errors: list[BaseException] = []

        def join(handler) -> None:
            try:
                handler.next_rendezvous()
            except BaseException as error:  # noqa: BLE001  (reported below)
                errors.append(error)

        threads = [threading.Thread(target=join, args=(h,)) for h in handlers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=300)
        for handler in handlers:
            handler.shutdown()
    if errors:
        raise RuntimeError(f"the side-by-side round failed: {errors[0]!r}")
    return {
        "launchers": count,
        "wrapper": sum(sum(c.values()) for c in wrapper_calls) / count,
        "inner": sum(sum(c.values()) for c in inner_calls) / count,
    }


def rows(quick: bool) -> list[Row]:
    # One round of each kind is already the measurement; quick shortens only etcd's rows.
    launchers = TASKS * NODES
    result = []
    with tempfile.TemporaryDirectory() as directory:
        healthy = _measure(directory, "healthy")
        from nvrx_seghealth import publish_decision

        for task in range(TASKS):
            publish_decision(directory, "900", str(task), "drained")
        excluded = _measure(directory, "excluded")
    with tempfile.TemporaryDirectory() as directory:
        watched = _measure(directory, "watched", watch=True)
    # Process 0 of a healthy unit stats before joining and right after; an excluded one
    # never joins.
    stats_per_unit = {"all healthy": 2, "all 313 units excluded": 1}
    for name, outcome in (("all healthy", healthy), ("all 313 units excluded", excluded)):
        ops = sum(outcome["calls"].values())
        result.append(
            Row(
                f"store ops per launcher per round, {name}",
                ops / launchers,
                "-",
                None,
                f"{launchers} launchers, {ops} store ops ({dict(outcome['calls'])}), "
                f"wall {outcome['wall']:.2f} s from {PROCESSES} processes "
                f"(slowest process {outcome['slowest']:.2f} s), "
                f"excluded {outcome['excluded']}, marked groups {outcome['marked']}",
            )
        )
        result.append(
            Row(
                f"decision-file stats per unit per round, {name}",
                outcome["stats"] / TASKS,
                f"= {stats_per_unit[name]}",
                outcome["stats"] == stats_per_unit[name] * TASKS,
                f"{outcome['stats']} stats for {TASKS} units",
            )
        )
    added = sum(healthy["calls"].values()) / launchers
    side = _inner_side_by_side()
    result.append(
        Row(
            "store ops the wrapper adds per launcher per healthy round, 5,008 launchers",
            added,
            f"<= {ADDED_OPS_TARGET:g}",
            added <= ADDED_OPS_TARGET,
            f"beside the real c10d rendezvous in one round of {side['launchers']} launchers: "
            f"wrapper {side['wrapper']:.2f}, c10d {side['inner']:.2f} ops per launcher",
        )
    )
    share = side["wrapper"] / side["inner"]
    result.append(
        Row(
            f"wrapper ops / c10d rendezvous ops, one healthy round of {side['launchers']} "
            "launchers (same proxies)",
            share,
            "-",
            None,  # c10d's count swings with the round's timing: no target holds (BENCHMARKS)
            "c10d's ops per launcher only grow with the launcher count (one shared state)",
        )
    )
    watch_ops = sum(watched["calls"].values())
    per_second = watch_ops / (launchers * WATCH_SECONDS)
    result.append(
        Row(
            "watch: store ops per launcher per second of training, 5,008 launchers",
            per_second,
            f"<= {WATCH_OPS_TARGET:g}",
            per_second <= WATCH_OPS_TARGET,
            f"{watch_ops} ops ({dict(watched['calls'])}) in {WATCH_SECONDS:g} s, each agent "
            f"asking every {MONITOR_INTERVAL:g} s",
        )
    )
    result.append(
        Row(
            "markers lost of 313 published at once",
            TASKS - excluded["marked"],
            "= 0",
            excluded["marked"] == TASKS,
            f"{excluded['marked']} of {TASKS} groups listed afterwards",
        )
    )
    result.extend(etcd_scale.rows(quick))  # the watch and the hand-off on etcd-v2
    return result
