"""In-process launchers on real torch stores: each one a real c10d-backed dynamic handler
with its own TCPStore client, wrapped by the package's handler, joining from its own
thread; the agent's monitor loop over a handler (:class:`Monitor`); and a launcher's
coordinator built alone (:func:`coordinator`), or read from its handler
(:func:`coordinator_of`); a store that counts its calls (:class:`CountingStore`).

Used by the launcher's and the demo's unit tests (``tests/launcher/``, ``tests/demo/``),
the etcd tests (``integration/etcd/``) and the store's benchmark (``bench/store_scale.py``).
"""

from __future__ import annotations

import datetime
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from torch.distributed import Store, TCPStore
from torch.distributed.elastic.rendezvous import RendezvousHandler
from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import C10dRendezvousBackend
from torch.distributed.elastic.rendezvous.dynamic_rendezvous import (
    DynamicRendezvousHandler,
    RendezvousTimeout,
)

from nvrx_seghealth import SegmentHealthRendezvousHandler
from nvrx_seghealth._demo.rendezvous_state import read_store
from nvrx_seghealth._launcher.coordinator import Coordinator
from nvrx_seghealth._launcher.events import DecisionRecorder
from nvrx_seghealth._launcher.handoff import VerdictHandoff
from nvrx_seghealth._launcher.markers import ReplacementGroupMarkers
from nvrx_seghealth._launcher.roles import coordinator_for
from nvrx_seghealth._settings.check_settings import check_settings
from nvrx_seghealth._settings.durations import DEFAULT_STAT_TIMEOUT

from .slurmenv import slurm_env
from .waits import AT_ONCE_BOUND

if TYPE_CHECKING:
    import pytest

    _StandIn = Store  # what type checkers see: a CountingStore stands in for a Store
else:
    _StandIn = object  # a pybind Store's own methods would hide __getattr__

__all__ = [
    "ARRAY",
    "RUN",
    "WATCH",
    "CountingStore",
    "Join",
    "Monitor",
    "coordinator",
    "coordinator_of",
    "dead_store",
    "dynamic_handler",
    "excluded",
    "join_all",
    "launcher",
    "our_records",
    "participants",
    "publish_concurrently",
    "rendezvous_round",
    "sibling_view",
    "tcp_client",
    "waiting_for_a_verdict",
    "watched",
]

#: The run id and the array job id of the launchers built here.
RUN = "run-1"
ARRAY = 1000
#: Seconds between process 0's looks in the watch's tests: the shortest there is.
WATCH = 0.5


class CountingStore(_StandIn):
    """Forwards to a real store and counts the calls by method (``calls``); it goes
    wherever a torch ``Store`` goes."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self.store, name)

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return method(*args, **kwargs)

        return counted


def tcp_client(master: TCPStore) -> TCPStore:
    """A new client connection to ``master``'s TCPStore server."""
    return TCPStore(
        "127.0.0.1", master.port, is_master=False, timeout=datetime.timedelta(seconds=30)
    )


def dynamic_handler(
    store: Store,
    min_nodes: int,
    max_nodes: int,
    *,
    run_id: str = RUN,
    join: float = 30,
    keep_alive_attempts: int = 30,
) -> DynamicRendezvousHandler:
    """A real c10d-backed dynamic handler, with short timeouts for a test.

    A node's heartbeat is last written when it joins; its first keep-alive comes one
    interval after the round completes, up to ``last_call`` later. With few attempts of
    one second, the first node to join can count as dead at the other's first keep-alive
    (measured with two: 8 of 8 pairs within 2 s; on a loaded machine even while a round
    forms, which shrinks its world), so the default allows 30 s of silence: no test here
    waits for a heartbeat to expire. Closing the rendezvous (``shutdown()``) may take
    :data:`~.common.AT_ONCE_BOUND` seconds: a CI run beside load saw 10 s run out while
    another launcher joined.
    """
    return DynamicRendezvousHandler.from_backend(
        run_id,
        store,
        C10dRendezvousBackend(store, run_id),
        min_nodes,
        max_nodes,
        local_addr="127.0.0.1",
        timeout=RendezvousTimeout(
            join=datetime.timedelta(seconds=join),
            last_call=datetime.timedelta(seconds=1),
            close=datetime.timedelta(seconds=AT_ONCE_BOUND),
        ),
        keep_alive_interval=1,
        keep_alive_max_attempt=keep_alive_attempts,
    )


def launcher(
    master: TCPStore,
    directory: str | None,
    env: dict[str, str],
    min_nodes: int = 2,
    max_nodes: int = 3,
    handoff_timeout: float | None = None,
    **kwargs: Any,
) -> SegmentHealthRendezvousHandler:
    """One launcher of the job around ``master``: the package's handler around a dynamic
    handler (``kwargs`` go to :func:`dynamic_handler`), in the Slurm environment ``env``."""
    store = tcp_client(master)
    return SegmentHealthRendezvousHandler(
        dynamic_handler(store, min_nodes, max_nodes, **kwargs),
        store=store,
        directory=directory,
        environ=env,
        handoff_timeout=handoff_timeout,
    )


def watched(
    master: TCPStore,
    directory: str,
    task: int,
    *,
    watch_interval: float = WATCH,
    nodes: tuple[int, int] = (2, 3),
    stat_timeout: float = DEFAULT_STAT_TIMEOUT,
    **env: Any,
) -> SegmentHealthRendezvousHandler:
    """A launcher of array task ``task`` with the watch on (``watch_interval``); ``env``
    goes to :func:`~harness.slurmenv.slurm_env`."""
    store = tcp_client(master)
    return SegmentHealthRendezvousHandler(
        dynamic_handler(store, *nodes),
        store=store,
        directory=directory,
        environ=slurm_env(task=task, **env),
        stat_timeout=stat_timeout,
        watch_interval=watch_interval,
    )


def coordinator(
    master: TCPStore,
    directory: str,
    env: dict[str, str],
    *,
    handoff_timeout: float | None = None,
    watch_interval: float = 0.0,
) -> Coordinator | None:
    """The coordinator a launcher of the job around ``master`` gets in the Slurm
    environment ``env``, built as the handler builds it
    (:func:`~nvrx_seghealth._launcher.roles.coordinator_for`), on its own store client;
    its events name a dynamic handler of the run. ``None``: the launcher has none."""
    store = tcp_client(master)
    settings = check_settings(
        directory, handoff_timeout=handoff_timeout, watch_interval=watch_interval
    )
    assert settings is not None, "a coordinator needs a directory"
    events = DecisionRecorder(dynamic_handler(store, 1, 1))
    return coordinator_for(settings, store=store, run_id=RUN, events=events, environ=env)


def coordinator_of(handler: SegmentHealthRendezvousHandler) -> Coordinator | None:
    """The coordinator ``handler`` asks around each join (``None``: it only delegates).
    A handler keeps it to itself; tests that drive a launcher through its handler read
    it here."""
    return handler._coordinator


def excluded(handler: SegmentHealthRendezvousHandler) -> bool:
    """Whether the unit of ``handler``'s launcher has been excluded."""
    role = coordinator_of(handler)
    return role is not None and role.exclusion is not None


def sibling_view(master: TCPStore, task: str = "1") -> VerdictHandoff:
    """The hand-off of array task ``task`` as its sibling sees it."""
    return VerdictHandoff(ReplacementGroupMarkers(master, RUN, str(ARRAY)), task, "0")


def dead_store() -> TCPStore:
    """A TCPStore client whose server is gone: every operation fails for real."""
    master = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    client = TCPStore(
        "127.0.0.1", master.port, is_master=False, timeout=datetime.timedelta(seconds=5)
    )
    del master
    return client


def participants(master: TCPStore, run_id: str = RUN) -> int:
    """How many nodes the rendezvous state in the store lists as participants."""
    return len(read_store(tcp_client(master), run_id).participants or ())


def rendezvous_round(master: TCPStore, run_id: str = RUN) -> int | None:
    """The round number in the rendezvous state (it advances only when a round re-forms)."""
    return read_store(tcp_client(master), run_id).round


def waiting_for_a_verdict(master: TCPStore, task: int) -> bool:
    """Whether a sibling of ``task`` has started polling for process 0's verdict."""
    return tcp_client(master).check([f"nvrx_seghealth/{RUN}/{ARRAY}/verdict/{task}/0"])


def our_records(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    """This package's log messages at ``level`` (torch's keep-alive timers of handlers
    from earlier tests may log at any time)."""
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == level and r.name.startswith("nvrx_seghealth")
    ]


#: The kind of handler a :class:`Join` joins with.
H = TypeVar("H", bound=RendezvousHandler)


class Join(Generic[H]):
    """``next_rendezvous()`` of one handler on its own thread; keeps the outcome.

    Attributes:
        result: the :class:`RendezvousInfo` it returned, else ``None``.
        error: what it raised, else ``None``. Both are typed ``Any``: a test reads the
            one it expects without first proving it is there.
    """

    def __init__(self, handler: H) -> None:
        self.handler = handler
        self.result: Any = None
        self.error: Any = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.result = self.handler.next_rendezvous()
        except BaseException as error:  # noqa: BLE001  (inspected by the test)
            self.error = error

    def wait(self, timeout: float = 60) -> Join[H]:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "next_rendezvous() did not return"
        return self


def join_all(handlers: Iterable[H], timeout: float = 60) -> list[Join[H]]:
    """Start ``next_rendezvous()`` on every handler at once; wait for all of them."""
    joins = [Join(h) for h in handlers]
    return [j.wait(timeout) for j in joins]


class Monitor:
    """An agent's monitor loop over one handler: it asks the handler's
    ``num_nodes_waiting()`` every ``interval`` seconds, as torch's agent does while its
    workers are healthy, until the answer is positive or ``limit`` seconds passed."""

    def __init__(
        self, handler: RendezvousHandler, interval: float = 0.1, limit: float = 60.0
    ) -> None:
        self.handler = handler
        #: (started, returned, answer) of every call.
        self.asked: list[tuple[float, float, int]] = []
        self._interval = interval
        self._limit = limit
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        deadline = time.monotonic() + self._limit
        while not self._stop.wait(self._interval) and time.monotonic() < deadline:
            started = time.monotonic()
            answer = self.handler.num_nodes_waiting()
            self.asked.append((started, time.monotonic(), answer))
            if answer > 0:
                return

    @property
    def restarted(self) -> bool:
        return any(answer > 0 for _, _, answer in self.asked)

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(30)


def publish_concurrently(
    store_for_thread: Callable[[], Store], run_id: str, array_job_id: str, groups: Sequence[str]
) -> list[Exception]:
    """Publish one marker per group, each from its own thread with its own store client.

    ``store_for_thread()`` returns a new client. All threads start publishing together;
    returns the errors raised (none expected).
    """
    barrier = threading.Barrier(len(groups))
    errors: list[Exception] = []

    def publish(group: str) -> None:
        try:
            markers = ReplacementGroupMarkers(store_for_thread(), run_id, array_job_id)
            barrier.wait(timeout=60)
            markers.publish(group, f"detail {group}")
        except Exception as error:  # noqa: BLE001  (returned to the test)
            errors.append(error)

    threads = [threading.Thread(target=publish, args=(g,)) for g in groups]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return errors
