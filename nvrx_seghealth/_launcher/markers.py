"""Replacement-group markers: which array tasks are excluded, kept in the rendezvous store.

Process 0 of an unhealthy array task *publishes* a marker for its replacement group. The
task's other launchers look it up before they join and again right after, and stay out
when it is there. The markers live in the store the rendezvous already shares.

Layout, under ``nvrx_seghealth/<run_id>/<array_job_id>/``, so that runs and array jobs
can share one store:

* ``group/<task_id>``: the marker, whose value is the publisher's diagnostic line. A
  lookup is one ``check`` of this key, never a blocking ``get``.
* ``count`` and ``slot/<n>``: a registry for listing. A publisher takes a slot with the
  atomic ``add``, so no ``compare_set`` is needed (torch's ``EtcdStore`` has none).

Markers are never erased during a run: with ``--no-requeue`` an excluded task does not
come back under the same id. Works with any object offering ``set``, ``get``, ``add``
and ``check``; does not import torch.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Protocol

from .._decision.unit import validate_id

__all__ = ["ReplacementGroupMarkers", "StoreLike"]


class StoreLike(Protocol):
    """The subset of ``torch.distributed.Store`` that markers and the hand-off use."""

    def set(self, key: str, value: str) -> None: ...

    def get(self, key: str) -> bytes: ...

    def add(self, key: str, amount: int) -> int: ...

    def check(self, keys: list[str]) -> bool: ...

    def wait(self, keys: list[str], timeout: timedelta, /) -> None: ...


class ReplacementGroupMarkers:
    """The markers of one array job in one rendezvous run.

    Args:
        store: the rendezvous store (un-prefixed, shared by all launchers).
        run_id: the rendezvous run id (``--rdzv-id``).
        array_job_id: ``SLURM_ARRAY_JOB_ID`` of the array.

    Every id given (``array_job_id``, each ``group``) enters here: a plain string is
    validated, a :class:`~.._decision.unit.SlurmId` (an
    :class:`~.._decision.unit.AllocationUnit`'s) is taken as it is.

    Raises:
        ValueError: ``run_id`` is empty.
        InvalidIdentityError: an id is not decimal digits (here or in a method).
    """

    def __init__(self, store: StoreLike, run_id: str, array_job_id: str) -> None:
        if not run_id:
            raise ValueError("run_id must be a non-empty string")
        validate_id("array_job_id", array_job_id)
        self.store = store
        self.prefix = f"nvrx_seghealth/{run_id}/{array_job_id}/"

    def _group_key(self, group: str) -> str:
        return f"{self.prefix}group/{validate_id('group', group)}"

    def is_marked(self, group: str) -> bool:
        """Whether ``group`` is marked. One non-blocking ``check``."""
        return self.store.check([self._group_key(group)])

    def detail(self, group: str) -> str | None:
        """The publisher's diagnostic line for ``group``, or ``None`` when unmarked."""
        key = self._group_key(group)
        if not self.store.check([key]):
            return None
        return self.store.get(key).decode(errors="replace")

    def publish(self, group: str, detail: str) -> bool:
        """Mark ``group`` excluded, with ``detail`` as its diagnostic line.

        The marker key is written first, so lookups see it as early as possible; then
        a listing slot is taken. Returns ``False`` when the group was already marked
        (nothing written), ``True`` otherwise.

        Raises:
            RuntimeError: the marker is not visible in the store after writing.
            Exception: whatever the store raised.
        """
        key = self._group_key(group)
        if self.store.check([key]):
            return False
        self.store.set(key, detail)  # the store keeps its UTF-8 bytes
        slot = f"{self.prefix}slot/{self.store.add(self.prefix + 'count', 1)}"
        # An exact str: torch's EtcdStore refuses a subclass such as SlurmId.
        self.store.set(slot, str(group))
        # A round trip after the writes: some stores answer ``set`` with no reply, and
        # the publisher is about to exit.
        if not self.store.check([key, slot]):
            raise RuntimeError(f"marker {key!r} is not visible in the store after publishing")
        return True

    def marked_groups(self) -> list[str]:
        """Every marked group, in numeric order, duplicates removed.

        Costs one ``add`` plus a ``check`` and a ``get`` per slot; meant for operators
        and hosts, not for every launcher on every round.
        """
        count = self.store.add(self.prefix + "count", 0)
        groups = set()
        for index in range(1, count + 1):
            slot = f"{self.prefix}slot/{index}"
            # A publisher may have taken the slot number and not yet written it.
            if self.store.check([slot]):
                groups.add(self.store.get(slot).decode())
        return sorted(groups, key=int)
