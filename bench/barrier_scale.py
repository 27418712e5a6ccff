"""Time to the first world of N launchers: torch's ``c10d`` beside ``barrier``.

N launchers are threads spread over :data:`PROCESSES` processes, each with its own
TCPStore client and a handler built from the same ``RendezvousParameters`` as torchrun
builds it (``min = max = N``, ``is_host=false``). One TCPStore server (libuv) serves
them all from this process. Once every process has built its handlers, all launchers
call ``next_rendezvous()`` at one ``CLOCK_MONOTONIC`` instant; the time is from that
instant to the last launcher's return. Opening the connections is not timed.

* Repetitions are interleaved (:func:`~harness.bench.measure.interleaved_samples`); each
  trial has its own run id and fresh processes, over one store server per size.
* A trial that does not form its world in ``--give-up`` seconds is recorded as
  missing; ``c10d`` is then not tried at larger sizes (it livelocked at 512 here).
* ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1``, as for every design of the scale note.

``python -m bench.barrier_scale [--sizes 64,128,...] [--repetitions 2] [--give-up 120]``
prints a Markdown table: each size's times and the ratio barrier / c10d.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import multiprocessing
import os
import queue
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from harness.bench.measure import Row, interleaved_samples, median_or_none, table

PROCESSES = 8
DESIGNS = ("c10d", "barrier")
#: Seconds every process may take to import torch and build its handlers.
READY_TIMEOUT = 600.0


def _handler(design: str, port: int, run_id: str, size: int) -> Any:
    from torch.distributed.elastic.rendezvous import RendezvousParameters
    from torch.distributed.elastic.rendezvous.registry import handler_registry

    params = RendezvousParameters(
        backend=design,
        endpoint=f"127.0.0.1:{port}",
        run_id=run_id,
        min_nodes=size,
        max_nodes=size,
        local_addr="127.0.0.1",
        is_host="false",
        join_timeout="600",
        last_call_timeout="1",
        read_timeout="300",
    )
    if design == "barrier":
        from nvrx_seghealth._rendezvous.barrier.creator import create_handler

        return create_handler(params)
    return handler_registry.create_handler(params)


def _process(
    design: str, port: int, run_id: str, size: int, share: int, start: Any, ready: Any, out: Any
) -> None:
    """One process's launchers: build them, wait for the start instant, join; put
    ``(returned, last return)`` on ``out``."""
    os.environ["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
    count = len(range(share, size, PROCESSES))
    with ThreadPoolExecutor(max_workers=max(count, 1)) as pool:
        handlers = list(pool.map(lambda _: _handler(design, port, run_id, size), range(count)))
        ready.wait()
        while start.value == 0.0:
            time.sleep(0.01)

        def join(handler: Any) -> float | None:
            time.sleep(max(0.0, start.value - time.monotonic()))
            try:
                handler.next_rendezvous()
            except Exception:  # noqa: BLE001  (a trial that fails is recorded as missing)
                return None
            return time.monotonic()

        ends = list(pool.map(join, handlers))
        done = [end for end in ends if end is not None]
        out.put((len(done), max(done, default=0.0)))
        out.close()
        out.join_thread()
        os._exit(0)  # handlers' threads (heartbeats, keep-alives) end with the process


def trial(design: str, port: int, size: int, give_up: float, number: int) -> float | None:
    """Seconds for ``size`` launchers of ``design`` to form one world, or ``None``."""
    context = multiprocessing.get_context("spawn")
    start = context.Value("d", 0.0)
    ready = context.Barrier(PROCESSES + 1)
    out = context.Queue()
    run_id = f"{design}-{size}-{number}"
    processes = [
        context.Process(
            target=_process, args=(design, port, run_id, size, share, start, ready, out)
        )
        for share in range(PROCESSES)
    ]
    for process in processes:
        process.start()
    try:
        ready.wait(timeout=READY_TIMEOUT)
        t0 = time.monotonic() + 0.5
        start.value = t0
        results = []
        for _ in processes:
            try:
                results.append(out.get(timeout=max(1.0, t0 + give_up - time.monotonic())))
            except queue.Empty:
                return None
        if sum(count for count, _ in results) < size:
            return None
        return max(end for _, end in results) - t0
    finally:
        for process in processes:
            if process.is_alive():
                process.kill()
            process.join()


_trials = itertools.count()


def _timed(design: str, port: int, size: int, give_up: float) -> float | None:
    return trial(design, port, size, give_up, next(_trials))


def rows(sizes: list[int], repetitions: int, give_up: float) -> list[Row]:
    """One row per size: barrier's time over c10d's, medians of interleaved repetitions."""
    from torch.distributed import TCPStore

    made: list[Row] = []
    c10d_gave_up = False
    for size in sizes:
        server = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, use_libuv=True)
        variants = {
            design: functools.partial(_timed, design, server.port, size, give_up)
            for design in DESIGNS
            if not (design == "c10d" and c10d_gave_up)
        }
        samples = interleaved_samples(variants, repetitions)
        c10d = median_or_none(samples.get("c10d", [None]))
        barrier = median_or_none(samples["barrier"])
        c10d_gave_up = c10d is None
        ratio = None if c10d is None or barrier is None else barrier / c10d
        each = "; ".join(
            f"{design} " + ", ".join("-" if s is None else f"{s:.2f} s" for s in values)
            for design, values in samples.items()
        )
        made.append(Row(f"barrier / c10d, time to first world, N={size}", ratio, "-", None, each))
        print(made[-1].line(), flush=True)
    return made


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="64,128,256,512,1024")
    parser.add_argument("--repetitions", type=int, default=2)
    parser.add_argument("--give-up", type=float, default=120.0)
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    print(table(rows(sizes, args.repetitions, args.give_up)))


if __name__ == "__main__":
    main()
