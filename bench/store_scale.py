"""Row 4: store and filesystem cost of one rendezvous round at scale.

5,008 launchers (313 array tasks x 16 nodes) run the real wrapper's ``next_rendezvous``
against one TCPStore, from several processes. The inner rendezvous is replaced by one
that returns at once: this row measures what the wrapper adds, not torch's rendezvous.
Every store call and every ``os.stat`` of a decision file is counted. Two rounds: all
units healthy, and all 313 units excluded at once (313 concurrent marker publishers;
none may be lost).

Launcher ``P`` of task ``T`` runs in process ``(T + P) mod 8``, task after task: the
313 processes 0 are spread over all eight processes, so markers are published from
eight processes at once, and a task's siblings (in the other processes) meet process
0's verdict as in a real job, sometimes before it is there. The wall time runs from
the moment every process is ready (torch imported, store connected, handlers built)
to the last result.
"""

from __future__ import annotations

import collections
import datetime
import multiprocessing
import os
import tempfile
import time

from .common import Row

TASKS, NODES, PROCESSES = 313, 16, 8
#: Seconds the simulating processes may take to import torch and build their handlers.
READY_TIMEOUT = 300.0


class CountingStore:
    """Forwards to a real store and counts the calls by method."""

    def __init__(self, store) -> None:
        self.store = store
        self.calls: collections.Counter[str] = collections.Counter()

    def __getattr__(self, name):
        method = getattr(self.store, name)

        def counted(*args, **kwargs):
            self.calls[name] += 1
            return method(*args, **kwargs)

        return counted


def _launchers(share: int) -> list[dict[str, str]]:
    return [
        {
            "SLURM_ARRAY_JOB_ID": "900",
            "SLURM_ARRAY_TASK_ID": str(task),
            "SLURM_JOB_ID": str(1000 + task),
            "SLURM_PROCID": str(procid),
        }
        for task in range(TASKS)
        for procid in range(NODES)
        if (task + procid) % PROCESSES == share
    ]


def _round(port: int, directory: str, run_id: str, share: int, ready, results) -> None:
    import logging

    import torch.distributed as dist
    from torch.distributed.elastic.rendezvous import RendezvousHandler, RendezvousInfo

    from nvrx_seghealth import SegmentHealthRendezvousHandler, UnhealthyNodeException

    class Immediate(RendezvousHandler):
        """An inner handler that admits at once (the rendezvous is not measured here)."""

        def get_backend(self):
            return "immediate"

        def next_rendezvous(self):
            return RendezvousInfo(None, 0, 1, None)

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
    stats = 0
    real_stat = os.stat

    def counting_stat(path, *args, **kwargs):
        nonlocal stats
        if os.path.basename(os.fspath(path)).startswith("segment_health_check."):
            stats += 1
        return real_stat(path, *args, **kwargs)

    os.stat = counting_stat
    # 5,008 exclusions would each log their lines to stderr; the counts are the result.
    logging.getLogger("nvrx_seghealth").addHandler(logging.NullHandler())
    logging.getLogger("nvrx_seghealth").propagate = False
    handlers = [
        SegmentHealthRendezvousHandler(Immediate(), store=store, directory=directory, environ=env)
        for env in _launchers(share)
    ]
    ready.wait()  # every process has imported torch, connected and built its handlers
    started = time.perf_counter()
    excluded = 0
    for handler in handlers:
        try:
            handler.next_rendezvous()
        except UnhealthyNodeException:
            excluded += 1
    results.put((share, time.perf_counter() - started, dict(store.calls), stats, excluded))


def _measure(directory: str, run_id: str) -> dict:
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
        context.Process(target=_round, args=(master.port, directory, run_id, share, ready, results))
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


def rows(quick: bool) -> list[Row]:
    del quick  # one round of each kind is already the measurement
    launchers = TASKS * NODES
    result = []
    with tempfile.TemporaryDirectory() as directory:
        healthy = _measure(directory, "healthy")
        from nvrx_seghealth import publish_decision

        for task in range(TASKS):
            publish_decision(directory, "900", str(task), "drained")
        excluded = _measure(directory, "excluded")
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
                "= 1",
                outcome["stats"] == TASKS,
                f"{outcome['stats']} stats for {TASKS} units",
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
    return result
