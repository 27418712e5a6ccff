"""Rows 15 and 17: one rendezvous round of in-process launchers, etcd-v3 against etcd-v2.

Each launcher is a real ``DynamicRendezvousHandler`` on its own backend and store, as
torchrun builds them: the package's ``create_backend`` for etcd-v3, torch's for etcd-v2
(each launcher its own etcd client). All join from their own threads at once, on one
etcd 3.4 serving both APIs, with torch's default keep-alive (5 s) and
``min_nodes = max_nodes``: the round closes when the last launcher joins. Measured: the
seconds until every ``next_rendezvous()`` returned, and every request each client sent
(counted around the clients' request methods in this process: :class:`Requests`).
Row 15 runs a small round, interleaved; row 17 runs 100 and 300 launchers (1,000 would
not form: 300 did not in 4 minutes, on either backend, on 2 cores).
"""

from __future__ import annotations

import collections
import datetime
import functools
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from torch.distributed import Store
from torch.distributed.elastic.rendezvous.dynamic_rendezvous import (
    DynamicRendezvousHandler,
    RendezvousBackend,
    RendezvousTimeout,
)

from harness.bench.measure import Row, interleaved_samples, median_or_none, ratio_or_none
from harness.rendezvous import Join
from harness.services.etcd import EtcdServer, running_etcd
from harness.services.etcd_v3 import v3_launcher, v3_params

#: The backends compared, the first against the second.
BACKENDS = ("etcd-v3", "etcd-v2")
#: The etcd client methods that each send one request (etcd-v3: the room's client).
V3_REQUESTS = ("range", "txn", "put", "delete", "grant", "keep_alive", "revoke", "watch")
#: Seconds a round may take before the row reports it unformed (300 launchers in one
#: process on 2 loaded cores did not form in 10 minutes).
ROUND_BOUND = 240.0
#: Each launcher's ``read_timeout``: launchers of an unformed round end this soon after
#: their etcd stops, before the next measurement starts.
READ_TIMEOUT = 10


class Requests:
    """Counts every request the etcd clients of this process send, by kind, while open.

    etcd-v3: each call of the room's ``EtcdClient`` methods that send one HTTP request
    (:data:`V3_REQUESTS`; the client never resends on its own). etcd-v2: each
    ``api_execute`` of python-etcd's client (one HTTP request), by HTTP method.
    """

    def __init__(self) -> None:
        self.counts: collections.Counter[str] = collections.Counter()
        self._lock = threading.Lock()

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def _counted(self, kind: Callable[..., str], method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def counted(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                self.counts[kind(*args, **kwargs)] += 1
            return method(*args, **kwargs)

        return counted

    @contextmanager
    def counting(self) -> Iterator[Requests]:
        """Count the requests of every client of this process until the block ends."""
        import etcd

        from nvrx_seghealth._rendezvous.etcd_v3.client import EtcdClient

        patched: list[tuple[type, str, Any]] = []
        for name in V3_REQUESTS:
            patched.append((EtcdClient, name, getattr(EtcdClient, name)))
            setattr(EtcdClient, name, self._counted(lambda *a, n=name, **k: n, patched[-1][2]))
        execute = etcd.Client.api_execute
        patched.append((etcd.Client, "api_execute", execute))
        etcd.Client.api_execute = self._counted(
            lambda client, path, method, *a, **k: f"{method} v2", execute
        )
        try:
            yield self
        finally:
            for owner, name, original in patched:
                setattr(owner, name, original)


@dataclass(frozen=True)
class RoundFacts:
    """One round: its seconds (``None``: not every launcher joined within
    :data:`ROUND_BOUND`), the launchers that joined, the seconds counted and the requests
    sent in them, by kind."""

    launchers: int
    seconds: float | None
    joined: int
    window: float
    requests: dict[str, int]

    @property
    def per_launcher(self) -> float:
        return sum(self.requests.values()) / self.launchers

    @property
    def rate(self) -> float | None:
        """Requests per second sent while the round formed."""
        return sum(self.requests.values()) / self.window


def _handler(backend: str, endpoint: str, run_id: str, nodes: int) -> DynamicRendezvousHandler:
    """One launcher's handler, torch's defaults except generous join and close bounds."""
    state: RendezvousBackend
    store: Store
    if backend == "etcd-v3":
        state, store = v3_launcher(endpoint, run_id, read_timeout=READ_TIMEOUT)
    else:
        from torch.distributed.elastic.rendezvous.etcd_rendezvous_backend import create_backend

        params = v3_params(endpoint, run_id, nodes, nodes, read_timeout=READ_TIMEOUT)
        params.backend = "etcd-v2"
        state, store = create_backend(params)
    return DynamicRendezvousHandler.from_backend(
        run_id,
        store,
        state,
        nodes,
        nodes,
        local_addr="127.0.0.1",
        timeout=RendezvousTimeout(
            join=datetime.timedelta(seconds=ROUND_BOUND),
            close=datetime.timedelta(seconds=60),
        ),
    )


def one_round(backend: str, server: EtcdServer, launchers: int) -> RoundFacts:
    """Build ``launchers`` handlers of a new run, join them all at once, count requests
    until every one returned or :data:`ROUND_BOUND` passed (launchers still joining end
    once the caller stops ``server``)."""
    run_id = f"bench-{uuid.uuid4().hex[:8]}"
    handlers = [_handler(backend, server.endpoint, run_id, launchers) for _ in range(launchers)]
    requests = Requests()
    with requests.counting():
        started = time.monotonic()
        joins = [Join(handler) for handler in handlers]
        for join in joins:
            join.thread.join(max(0.0, started + ROUND_BOUND - time.monotonic()))
        window = time.monotonic() - started
        counts = dict(requests.counts)
        # torch's keep-alive timers would go on writing into the next measurement
        for handler in handlers:
            handler._stop_heartbeats()
    joined = sum(1 for j in joins if not j.thread.is_alive() and j.error is None)
    seconds = window if joined == launchers else None
    return RoundFacts(launchers, seconds, joined, window, counts)


def _by_kind(requests: dict[str, int], launchers: int) -> str:
    return ", ".join(f"{kind} {count / launchers:.1f}" for kind, count in sorted(requests.items()))


def _seconds(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f} s"


#: Launchers of row 15's round, and its interleaved repetitions, quick and full.
SMALL = {True: 8, False: 16}
REPETITIONS = {True: 2, False: 3}


def request_rows(quick: bool) -> list[Row]:
    """Row 15: requests per launcher in one healthy round, etcd-v3 against etcd-v2."""
    launchers = SMALL[quick]
    with running_etcd("v3-rounds", release="3.4", v2=True) as server:
        samples = interleaved_samples(
            {b: functools.partial(one_round, b, server, launchers) for b in BACKENDS},
            REPETITIONS[quick],
        )
    per_launcher = {b: median_or_none(f.per_launcher for f in samples[b]) for b in BACKENDS}
    times = {b: median_or_none(f.seconds for f in samples[b]) for b in BACKENDS}
    detail = "; ".join(
        f"{b}: {per_launcher[b]:.1f} per launcher (runs "
        f"{', '.join(f'{f.per_launcher:.1f}' for f in samples[b])}; last run by kind: "
        f"{_by_kind(samples[b][-1].requests, launchers)}), round {_seconds(times[b])}"
        for b in BACKENDS
    )
    return [
        Row(
            f"etcd requests per launcher in one healthy round of {launchers}: etcd-v3 / etcd-v2",
            ratio_or_none(per_launcher["etcd-v3"], per_launcher["etcd-v2"]),
            "-",
            None,
            detail + f" ({REPETITIONS[quick]} interleaved runs each, one etcd 3.4.23)",
        )
    ]


#: Launchers of row 17's rounds, quick and full.
SIZES = {True: (100,), False: (100, 300)}


def _scale_detail(backend: str, facts: RoundFacts) -> str:
    outcome = (
        f"round in {facts.seconds:.1f} s"
        if facts.seconds is not None
        else f"no round in {facts.window:.0f} s ({facts.joined} of {facts.launchers} returned)"
    )
    return (
        f"{backend}: {outcome}, {facts.rate:.0f} requests/s, {facts.per_launcher:.1f} "
        f"per launcher ({_by_kind(facts.requests, facts.launchers)})"
    )


def scale_rows(quick: bool) -> list[Row]:
    """Row 17: the time and request rate of one round of many launchers, v3 against v2."""
    rows = []
    for launchers in SIZES[quick]:
        facts: dict[str, RoundFacts] = {}
        for backend in BACKENDS:  # each on a new etcd: history and leases of the other gone
            with running_etcd("v3-scale", release="3.4", v2=True) as server:
                facts[backend] = one_round(backend, server, launchers)
            if facts[backend].seconds is None:
                time.sleep(READ_TIMEOUT + 5)  # its launchers still joining give up
        v3, v2 = facts["etcd-v3"], facts["etcd-v2"]
        rows.append(
            Row(
                f"one round of {launchers} in-process launchers, seconds: etcd-v3 / etcd-v2",
                ratio_or_none(v3.seconds, v2.seconds),
                "-",
                None,
                "; ".join(_scale_detail(b, f) for b, f in facts.items()),
            )
        )
    return rows
