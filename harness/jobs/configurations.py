"""The configurations the docs offer, and helpers for whole jobs that exclude a unit
from a running job: who holds rank 0, who waits as a spare, the store of a round.

A :class:`Configuration` is one way to run the ``segment-health`` backend: where the
rendezvous store lives (:data:`STORE_HOST`: c10d with ``nvrx-seghealth store-host``-like
store outside every unit, ``is_host=false``; :data:`BARRIER`: ``inner_backend=barrier``
on such a store; :data:`ETCD`: ``inner_backend=etcd-v2``; :data:`ETCD_V3`:
``inner_backend=etcd-v3``, the v2 API off; :data:`IN_LAUNCHER`: c10d with the store in a
launcher, ``is_host=true``), the watch off or on, and one or two launchers per unit.
:meth:`Configuration.spec` builds its job; :func:`plain_c10d` the same job on plain
``c10d`` with the store outside every unit.

Every helper reads recorded facts (worker records, torch's rendezvous state, the round's
store, ``/proc``) and waits for a condition through :meth:`SimulatedJob.wait_until`,
never for a fixed time.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import signal
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nvrx_seghealth._decision.boundedstat import HELPER_TAG
from nvrx_seghealth._demo import JobSpec, SimulatedJob, StartAfter
from nvrx_seghealth._demo.outcome import JobResult, Round
from nvrx_seghealth._demo.rendezvous_state import etcd_rendezvous, read_endpoint
from nvrx_seghealth._launcher.handoff import VerdictHandoff
from nvrx_seghealth._launcher.markers import ReplacementGroupMarkers
from nvrx_seghealth._launcher.watch import ARRIVED_KEY
from nvrx_seghealth._rendezvous.barrier import keys as barrier_keys

from .simjob import JOINED

__all__ = [
    "BARRIER",
    "CONFIGURATIONS",
    "ETCD",
    "ETCD_PLACEMENTS",
    "ETCD_V3",
    "HOST",
    "IN_LAUNCHER",
    "REACH_TIMEOUT",
    "STORE_HOST",
    "WATCH_SECONDS",
    "Configuration",
    "arrived",
    "barrier_arrivals",
    "handoff_request_pending",
    "healthy_world_after",
    "plain_c10d",
    "rank_zero_unit",
    "spare_after_round_zero",
    "spares",
    "stop_stat_helper",
    "wait_for_spares",
    "wait_for_world",
]

#: Where the rendezvous store lives.
STORE_HOST = "store-host"
#: The barrier rendezvous on a store outside every unit: the placement is its name.
BARRIER = "barrier"
ETCD = "etcd-v2"
ETCD_V3 = "etcd-v3"
#: The placements in etcd: the placement is the inner backend's name.
ETCD_PLACEMENTS = (ETCD, ETCD_V3)
IN_LAUNCHER = "in-launcher"
#: The launcher that serves the c10d store in :data:`IN_LAUNCHER` configurations.
HOST = "task0.proc0"
#: The watch interval of the configurations with the watch on.
WATCH_SECONDS = 1.0
#: Seconds a job may take to reach a point a scenario acts at (a world formed, a spare
#: waiting): a cold start of six launchers on two busy cores takes 20-30 s.
REACH_TIMEOUT = 120.0
#: How long one read of torch's rendezvous state, or of a round's store, may wait.
_READ_TIMEOUT = datetime.timedelta(seconds=30)


@dataclass(frozen=True)
class Configuration:
    """One way to run the backend (see the module documentation).

    Attributes:
        placement: :data:`STORE_HOST`, :data:`BARRIER`, :data:`ETCD`, :data:`ETCD_V3` or
            :data:`IN_LAUNCHER`.
        watch: ``segment_health_check_watch_interval`` is :data:`WATCH_SECONDS` (or off).
        launchers: launchers per unit (``srun -N``).
    """

    placement: str
    watch: bool
    launchers: int

    @property
    def name(self) -> str:
        """E.g. ``etcd-v2/watch/2-per-unit``."""
        watch = "watch" if self.watch else "no-watch"
        return f"{self.placement}/{watch}/{self.launchers}-per-unit"

    def spec(self, etcd_endpoint: str | None, **fields: Any) -> JobSpec:
        """A ``segment-health`` job of this configuration: ``fields`` are further
        :class:`JobSpec` fields. No launcher is told ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE``:
        the backend decides, as for a user who never heard of it.

        Raises:
            ValueError: an etcd configuration without ``etcd_endpoint``.
        """
        in_etcd = self.placement in ETCD_PLACEMENTS
        if in_etcd != (etcd_endpoint is not None):
            raise ValueError("an etcd endpoint is required by, and only for, etcd-v2 and etcd-v3")
        named = in_etcd or self.placement == BARRIER  # the placement is the inner backend
        return JobSpec(
            nodes_per_task=self.launchers,
            inner_backend=self.placement if named else "c10d",
            etcd_endpoint=etcd_endpoint,
            store_in_launcher=HOST if self.placement == IN_LAUNCHER else None,
            watch_interval=WATCH_SECONDS if self.watch else 0.0,
            disable_shared_store=None,
            **fields,
        )


#: Every configuration of the matrix. A launcher hosting the store is run with one
#: launcher per unit: the docs offer it only with a warning (its unit's exclusion
#: takes the store down), and what two launchers per unit add is the store-host's.
CONFIGURATIONS: tuple[Configuration, ...] = (
    *(
        Configuration(placement, watch, launchers)
        for placement in (STORE_HOST, BARRIER, ETCD, ETCD_V3)
        for watch in (False, True)
        for launchers in (1, 2)
    ),
    *(Configuration(IN_LAUNCHER, watch, 1) for watch in (False, True)),
)


def plain_c10d(spec: JobSpec) -> JobSpec:
    """``spec`` on plain ``c10d``, the store outside every unit, as a torch user must run
    it after a restart: with ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`` (pytorch#135712)."""
    return dataclasses.replace(
        spec,
        backend="c10d",
        inner_backend="c10d",
        etcd_endpoint=None,
        store_in_launcher=None,
        watch_interval=0.0,
        disable_shared_store="1",
        start_delays={},
    )


def spare_after_round_zero(spec: JobSpec, unit: int) -> dict[str, StartAfter]:
    """Hold every launcher of ``unit`` back until round 0 is complete, so that they wait
    as spares (torch's redundancy list) beside the running world."""
    first = spec.label(min(u for u in spec.units if u != unit), 0)
    return {
        spec.label(unit, procid): StartAfter(first, JOINED) for procid in range(spec.nodes_per_task)
    }


def wait_for_world(job: SimulatedJob, after: int | None = None) -> Round:
    """Advance ``job`` until a round numbered above ``after`` (any, for ``None``) has
    formed; return it."""
    job.wait_until(
        lambda: job.ended or job.result().formed_after(after) is not None,
        REACH_TIMEOUT,
        "a world" if after is None else f"a world after round {after}",
    )
    world = job.result().formed_after(after)
    if world is None:
        raise TimeoutError(f"the job ended before a world formed; files: {job.paths.workdir}")
    return world


def rank_zero_unit(world: Round) -> int:
    """The array task whose launcher held rank 0 in ``world`` (torch ranks launchers by
    their node descriptors; the worker of group rank 0 records its task)."""
    (unit,) = {w.array_task for w in world.workers if w.group_rank == 0}
    assert unit is not None, "a job array's workers record their array task"
    return unit


def spares(job: SimulatedJob) -> frozenset[str] | None:
    """The launchers in torch's redundancy list now, read from the live rendezvous state
    (``None``: unknown)."""
    snapshot = read_endpoint(job.spec.rendezvous, job.endpoint, job.run_id, _READ_TIMEOUT)
    if snapshot.spares is None:
        return None
    by_pid = {launcher.pid: label for label, launcher in job.launchers.items()}
    return frozenset(by_pid[pid] for pid in snapshot.spares if pid in by_pid)


def wait_for_spares(job: SimulatedJob, labels: Iterable[str]) -> None:
    """Advance ``job`` until every launcher of ``labels`` waits as a spare."""
    wanted = frozenset(labels)

    def waiting() -> bool:
        found = spares(job)
        return found is not None and wanted <= found

    job.wait_until(waiting, REACH_TIMEOUT, f"{', '.join(sorted(wanted))} waiting as spares")


def healthy_world_after(result: JobResult, at: float, excluded: int) -> Round | None:
    """The first world that formed after wall-clock time ``at`` without unit ``excluded``."""
    return next(
        (
            r
            for r in result.rounds
            if r.formed_at is not None and r.formed_at > at and excluded not in r.units
        ),
        None,
    )


@contextmanager
def _base_store(job: SimulatedJob) -> Iterator[Any]:
    """A client of the rendezvous store of ``job`` (the harness's, a launcher's or etcd)
    for the length of a block; an etcd-v3 client is closed at its end."""
    if job.spec.etcd_endpoint is not None:
        store = etcd_rendezvous(job.spec.rendezvous, job.endpoint, job.run_id)[1]
        try:
            yield store
        finally:
            if job.spec.rendezvous == "etcd-v3":  # torch's etcd-v2 store has no close
                store.close()
        return
    if job.spec.harness_hosts_store:
        yield job.store.client()
        return
    from torch.distributed import TCPStore

    host, port = job.endpoint.rsplit(":", 1)
    yield TCPStore(host, int(port), is_master=False, timeout=_READ_TIMEOUT)


def arrived(job: SimulatedJob, round_number: int) -> int:
    """How many members of round ``round_number`` have reached the watch's restart
    barrier, read from that round's store (torch's own key prefix of a round)."""
    from torch.distributed import PrefixStore

    with _base_store(job) as base:  # held: a store in Python must outlive its prefix
        store = PrefixStore(f"torch.rendezvous.{job.run_id}.{round_number}", base)
        return int(store.add(ARRIVED_KEY, 0))


def barrier_arrivals(job: SimulatedJob, round_number: int) -> int:
    """How many launchers took a slot in the barrier rendezvous' round ``round_number``
    (read from the store): each waits there until the round is decided."""
    with _base_store(job) as store:
        key = f"{barrier_keys.prefix(job.run_id)}/{barrier_keys.Round(round_number).arrivals}"
        return int(store.add(key, 0))


def handoff_request_pending(job: SimulatedJob, unit: int) -> bool:
    """A sibling of ``unit`` has asked for a verdict that nobody answered yet: it waits in
    the hand-off (read from the store, at Slurm restart count 0)."""
    with _base_store(job) as store:
        markers = ReplacementGroupMarkers(store, job.run_id, str(job.spec.array_job_id))
        requested, answer = VerdictHandoff(markers, str(unit), "0").read()
    return requested > 0 and not answer.covers(requested)


def stop_stat_helper(job: SimulatedJob, label: str) -> int:
    """SIGSTOP the stat helper of launcher ``label``'s agent (a child tagged
    :data:`HELPER_TAG`), so that its next stat waits out its bound as on a hung mount;
    returns its PID. It stays in the launcher's process group: stopping the job kills it.

    Raises:
        LookupError: the agent has no stat helper.
    """
    pid = job.launchers[label].pid
    children = [
        int(child)
        for task in Path(f"/proc/{pid}/task").iterdir()
        for child in (task / "children").read_text().split()
    ]
    for child in children:
        try:
            command = Path(f"/proc/{child}/cmdline").read_bytes()
        except OSError:
            continue
        if HELPER_TAG.encode() in command:
            os.kill(child, signal.SIGSTOP)
            return child
    raise LookupError(f"{label} (pid {pid}) has no stat helper among {children}")
