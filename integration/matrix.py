"""Helpers for whole jobs that exclude a unit from a running job: who holds rank 0, who
waits as a spare, the store of a round.

Every helper reads recorded facts (worker records, torch's rendezvous state, the round's
store) and waits for a condition through :meth:`SimulatedJob.wait_until`, never for a
fixed time. Any rendezvous the harness runs works: c10d with the store in the harness or
in a launcher, or etcd-v2.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable

from simhelpers import JOINED

from nvrx_seghealth._demo import JobSpec, SimulatedJob, StartAfter
from nvrx_seghealth._demo.outcome import Round
from nvrx_seghealth._demo.rendezvous_state import read_endpoint

__all__ = [
    "REACH_TIMEOUT",
    "rank_zero_unit",
    "spare_after_round_zero",
    "spares",
    "wait_for_spares",
    "wait_for_world",
]

#: Seconds a job may take to reach a point a scenario acts at (a world formed, a spare
#: waiting): a cold start of six launchers on two busy cores takes 20-30 s.
REACH_TIMEOUT = 120.0
#: How long one read of torch's rendezvous state may wait for the store or etcd.
_READ_TIMEOUT = datetime.timedelta(seconds=30)


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
