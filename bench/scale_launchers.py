"""One worker process of :mod:`.barrier_scale`: its share of the N launchers.

Each launcher is a thread with its own TCPStore client (two for barrier's designs: its
waits have their own), connected before the start instant, 32 at a time. Every client
is a :class:`~harness.bench.storecount.CountedStore` with the launcher's tally, put in
through torch's ``_create_tcp_store``, so the handler and the backend under it are both
counted. Handlers are built one at a time: segment-health reads the launcher's Slurm
variables from ``os.environ`` while it is built. Each process 0 of a unit has its own
stat helper, started before the start instant (:class:`OwnStatHelpers`). Launcher ``i`` is ``SLURM_PROCID``
``i % 4`` of array task ``i // 4``, in process ``(task + procid) % P``. A launcher's
counts stop at its own return; a launcher that has not returned by the give-up is
counted until then.
"""

from __future__ import annotations

import collections
import os
import queue
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.bench.storecount import CountedStore, Tally
from harness.slurmenv import slurm_env

__all__ = ["NO_HANDOFF", "UNIT", "Job", "Round", "inner_of", "launchers_of", "run_share"]

#: Launchers per allocation unit (one array task).
UNIT = 4
#: Connections opened at once per process before the start (opening is not timed).
CONNECTING = 32
#: The array job id every launcher's Slurm variables name.
ARRAY_JOB = 900
#: The suffix of a segment-health design whose siblings join without process 0's verdict
#: (``segment_health_check_handoff_timeout=0``, the spec's fallback).
NO_HANDOFF = "-no-handoff"


def inner_of(design: str) -> str:
    """The rendezvous a design runs on: ``c10d``, ``barrier`` or ``nvrx``."""
    return design.removeprefix("seghealth-").removesuffix(NO_HANDOFF)


@dataclass(frozen=True)
class Job:
    """One trial: ``size`` launchers of ``design`` over ``processes`` processes.

    ``min_nodes`` is ``size`` unless a unit is to be excluded in a second round
    (``rounds == 2``). ``nvrx_dir``: where NVRx is installed (``nvrx`` only).
    """

    design: str
    port: int
    run_id: str
    size: int
    min_nodes: int
    processes: int
    directory: str
    give_up: float
    rounds: int
    nvrx_dir: str


@dataclass
class Round:
    """One process's outcome of one round, put on the trial's queue."""

    share: int
    launchers: int
    returned: int
    excluded: int
    errors: dict[str, int]
    last: float
    calls: dict[str, int]
    bytes: int
    cpu: float


def launchers_of(share: int, size: int, processes: int) -> list[int]:
    """The launchers process ``share`` runs."""
    return [i for i in range(size) if (i // UNIT + i % UNIT) % processes == share]


def _connector(port: int, count: int) -> Any:
    """``count`` TCPStore clients opened now, 32 at a time; a function that hands out one
    (and opens another once they are used up)."""
    import datetime

    from torch.distributed import TCPStore

    def connect(_: object = None) -> TCPStore:
        timeout = datetime.timedelta(seconds=300)
        return TCPStore("127.0.0.1", port, is_master=False, timeout=timeout)

    made: queue.SimpleQueue[TCPStore] = queue.SimpleQueue()
    with ThreadPoolExecutor(max_workers=CONNECTING) as pool:
        for client in pool.map(connect, range(count)):
            made.put(client)

    def supply() -> TCPStore:
        try:
            return made.get_nowait()
        except queue.Empty:
            return connect()

    return supply


class OwnStatHelpers:
    """Each launcher's own stat helper, as each launcher process has one in a job.

    The package keeps one idle helper per process (``_decision.helperprocess``): 8 to 32
    launchers of one process stating at once would start a helper each, a ``python``
    start-up (tens of ms of CPU) that no real launcher pays. This stands in for the
    package's helper client: a thread uses the client of the launcher it runs for
    (:meth:`use`); the threads a launcher starts itself (its responder) use the shared one.
    """

    def __init__(self) -> None:
        from nvrx_seghealth._decision import boundedstat

        self._module = boundedstat
        self._shared = boundedstat._client
        self._local = threading.local()
        boundedstat._client = self  # type: ignore[assignment]

    def new(self) -> Any:
        """A helper client of its own for the next launcher (started by its handler)."""
        from nvrx_seghealth._decision.helperprocess import HelperClient

        stat = self._module
        return HelperClient("stat", ["-c", stat._HELPER_CODE], stat.HELPER_TAG)

    def use(self, client: Any) -> None:
        """This thread's stats go to ``client`` from now on (``None``: the shared one)."""
        self._local.client = client

    def _client(self) -> Any:
        return getattr(self._local, "client", None) or self._shared

    def start(self) -> None:
        self._client().start()

    def call(self, key: str, request: bytes, timeout: float, *, subject: str = "") -> bytes:
        return bytes(self._client().call(key, request, timeout, subject=subject))


def _params(job: Job, backend: str, index: int, **extra: str) -> Any:
    from torch.distributed.elastic.rendezvous import RendezvousParameters

    return RendezvousParameters(
        backend=backend,
        endpoint=f"127.0.0.1:{job.port}",
        run_id=job.run_id,
        min_nodes=job.min_nodes,
        max_nodes=job.size,
        local_addr="127.0.0.1",
        is_host="false",
        join_timeout="600",
        last_call_timeout="1",
        read_timeout="300",
        **extra,
    )


def _builder(job: Job, supply: Any) -> Any:
    """A function that builds launcher ``i``'s handler over a client counted in a tally."""
    from torch.distributed.elastic.rendezvous import c10d_rendezvous_backend
    from torch.distributed.elastic.rendezvous.registry import handler_registry

    from nvrx_seghealth._launcher.backend import register

    current: list[Tally] = []
    helpers = OwnStatHelpers() if job.design.startswith("seghealth-") else None
    clients: list[tuple[OwnStatHelpers, Any]] = []

    def counted_store(params: Any) -> CountedStore:
        return CountedStore(supply(), current[-1], supply)

    c10d_rendezvous_backend._create_tcp_store = counted_store  # type: ignore[assignment]
    register()
    from . import nvrx_stubs

    nvrx = nvrx_stubs.load(Path(job.nvrx_dir)) if job.design == "nvrx" else None

    def build(index: int, tally: Tally) -> Any:
        current.append(tally)
        if helpers is not None:
            client = helpers.new() if index % UNIT == 0 else None
            clients.append((helpers, client))
            helpers.use(client)
        if job.design == "c10d":
            return handler_registry.create_handler(_params(job, "c10d", index))
        if job.design == "barrier":
            from nvrx_seghealth._rendezvous.barrier.creator import create_handler

            return create_handler(_params(job, "barrier", index))
        if job.design == "nvrx":
            assert nvrx is not None
            host = {"is_store_host": "1"} if index == 0 else {}
            return nvrx_stubs.handler(
                nvrx, counted_store(None), _params(job, "c10d", index, **host)
            )
        inner = inner_of(job.design)
        handoff = {"segment_health_check_handoff_timeout": "0"} if NO_HANDOFF in job.design else {}
        env = slurm_env(index // UNIT, index % UNIT, array_job=ARRAY_JOB, job=1000 + index // UNIT)
        os.environ.update(env)
        params = _params(
            job,
            "segment-health",
            index,
            inner_backend=inner,
            segment_health_check_dir=job.directory,
            **handoff,
        )
        return handler_registry.create_handler(params)

    return build, (clients if helpers is not None else None)


def _join(
    handlers: list[Any],
    tallies: list[Tally],
    start: float,
    give_up: float,
    share: int,
    stats: list[tuple[OwnStatHelpers, Any]] | None,
) -> Round:
    """Every handler's ``next_rendezvous()`` at ``start``; the outcome at the last return
    or at the give-up."""
    from nvrx_seghealth import UnhealthyNodeException

    ends: list[float] = []
    excluded: list[int] = []
    errors: collections.Counter[str] = collections.Counter()
    lock = threading.Lock()
    cpu = os.times()

    def join(handler: Any, tally: Tally, stat: tuple[OwnStatHelpers, Any] | None) -> None:
        if stat is not None:
            helpers, client = stat
            helpers.use(client)
        time.sleep(max(0.0, start - time.monotonic()))
        try:
            handler.next_rendezvous()
        except UnhealthyNodeException:
            with lock:
                excluded.append(1)
        except Exception as error:  # noqa: BLE001  (counted: a trial that fails is missing)
            with lock:
                errors[type(error).__name__] += 1
        else:
            end = time.monotonic()
            with lock:
                ends.append(end)
        finally:
            tally.freeze()

    threads = [
        threading.Thread(target=join, args=triple, daemon=True)
        for triple in zip(handlers, tallies, stats or [None] * len(handlers))  # type: ignore[list-item]
    ]
    for thread in threads:
        thread.start()
    deadline = start + give_up
    for thread in threads:
        thread.join(timeout=max(0.0, deadline - time.monotonic()))
    used = os.times()
    calls: collections.Counter[str] = collections.Counter()
    moved = 0
    for tally in tallies:
        counted, size = tally.freeze()
        calls.update(counted)
        moved += size
    with lock:
        return Round(
            share=share,
            launchers=len(handlers),
            returned=len(ends),
            excluded=len(excluded),
            errors=dict(errors),
            last=max(ends, default=0.0),
            calls=dict(calls),
            bytes=moved,
            cpu=used.user + used.system - cpu.user - cpu.system,
        )


def _wait_for(value: Any) -> float:
    while value.value == 0.0:
        time.sleep(0.01)
    return float(value.value)


def run_share(job: Job, share: int, ready: Any, starts: list[Any], out: Any) -> None:
    """Process ``share``'s launchers: build, wait for each round's start, join; put one
    :class:`Round` per round on ``out``."""
    threading.stack_size(1 << 20)  # 4,096 launchers' threads: 1 MiB stacks, not 8
    os.environ["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
    import logging

    logging.getLogger("nvrx_seghealth").setLevel(logging.WARNING)
    mine = launchers_of(share, job.size, job.processes)
    per_launcher = 2 if inner_of(job.design) == "barrier" else 1
    build, stats = _builder(job, _connector(job.port, per_launcher * len(mine)))
    tallies = [Tally() for _ in mine]
    handlers = [build(index, tally) for index, tally in zip(mine, tallies)]
    ready.wait()
    for number in range(job.rounds):
        start = _wait_for(starts[number])
        for tally in tallies:
            tally.calls.clear()
            tally.bytes, tally.frozen = 0, False
        out.put(_join(handlers, tallies, start, job.give_up, share, stats))
    out.close()
    out.join_thread()
    os._exit(0)  # handlers' threads (heartbeats, keep-alives) end with the process
