"""The hand-off: process 0 of an array task answers its siblings' requests for a verdict.

Without it, a sibling (``SLURM_PROCID`` > 0) may join the rendezvous before process 0
has stat'ed the decision file and published the task's marker; the round then counts
the sibling, and once it leaves, one more round is needed. With it, a sibling asks
before it joins and process 0 answers:

* a sibling, on each ``next_rendezvous()``, takes a fresh request number with the
  atomic ``add`` on ``requests`` (:meth:`VerdictHandoff.request`) and waits, bounded,
  until the published verdict covers it (:meth:`VerdictHandoff.wait`);
* process 0 publishes ``"<n> <verdict>"`` in one key (:meth:`VerdictHandoff.answer`),
  where ``n`` is the highest request number it had read *before* the stat the verdict
  comes from. A verdict therefore covers a request only when its stat began after that
  request was made: a sibling never takes a verdict older than its own request.

Process 0 answers at every ``next_rendezvous()`` and, between them, whenever a request
is pending (the handler polls :meth:`VerdictHandoff.requested` on a thread, so a
sibling that restarts alone is answered while process 0's workers run: process 0 does
not re-enter the rendezvous until a node waits in it, and the sibling does not wait in
it before it has a verdict). While process 0 is itself inside the rendezvous, it
answers with that attempt's verdict: the sibling joins the round process 0 admitted
itself to on that very stat, or a later one that process 0 judges again first.

* No verdict admits a sibling of an excluded task: process 0 publishes the marker
  before the verdict that follows its decision, and the sibling looks at the marker
  after taking any verdict.
* Keys are namespaced by ``SLURM_RESTART_COUNT`` as well, so a requeued task never
  takes a verdict of its previous life.
* Bounded everywhere: if process 0 is absent, slow, dead or runs without the check, a
  sibling waits at most the bound and then joins (fail open); the caller logs it.

The sibling polls with ``check`` and ``get`` and a growing pause rather than the
store's ``wait``: a timed-out ``TCPStore.wait`` leaves a pending reply on the
connection, and polling works the same on every store; no ``compare_set`` is needed
(torch's ``EtcdStore`` has none). Only process 0 writes the verdict key.

Layout, under the markers' prefix ``nvrx_seghealth/<run_id>/<array_job_id>/``:
``verdict/<task_id>/<restart_count>/requests`` (a counter) and ``.../verdict``.

Works with any object offering ``set``, ``get``, ``add`` and ``check``; does not import
torch.
"""

from __future__ import annotations

import enum
import time

from .allocation import validate_id
from .markers import ReplacementGroupMarkers

__all__ = ["Verdict", "VerdictHandoff"]

_FIRST_PAUSE = 0.02
_LONGEST_PAUSE = 0.1


class Verdict(enum.Enum):
    """What process 0 decided for one attempt."""

    #: No decision file, or an empty one: the task joins.
    HEALTHY = "healthy"
    #: The decision file could not be read (fail open): the task joins.
    UNCHECKED = "unchecked"
    #: A non-empty decision file: the task stays out; its marker is already published.
    EXCLUDED = "excluded"


class VerdictHandoff:
    """The requests and verdicts of one array task, for one life of the task.

    One instance per launcher: process 0 calls :meth:`requested` and :meth:`answer`,
    a sibling :meth:`request` and :meth:`wait`.

    Args:
        markers: the array job's markers (they give the store and the namespace).
        group: the array task id.
        restart_count: ``SLURM_RESTART_COUNT`` (``"0"`` when unset).

    Raises:
        InvalidIdentityError: ``group`` or ``restart_count`` is not a decimal id.
    """

    def __init__(self, markers: ReplacementGroupMarkers, group: str, restart_count: str) -> None:
        validate_id("group", group)
        validate_id("restart_count", restart_count)
        self.store = markers.store
        self.prefix = f"{markers.prefix}verdict/{group}/{restart_count}/"
        self._requests = self.prefix + "requests"
        self._verdict = self.prefix + "verdict"

    def request(self) -> int:
        """Sibling: ask for a verdict; return the request's number (1, 2, ...).

        Raises:
            Exception: whatever the store raised.
        """
        return self.store.add(self._requests, 1)

    def requested(self) -> int:
        """Process 0: the highest request number made so far (``0``: none).

        Raises:
            Exception: whatever the store raised.
        """
        return self.store.add(self._requests, 0)

    def answer(self, covered: int, verdict: Verdict) -> None:
        """Process 0: publish ``verdict`` for every request up to number ``covered``.

        ``covered`` must have been read with :meth:`requested` before the stat that
        ``verdict`` comes from.

        Raises:
            Exception: whatever the store raised.
        """
        self.store.set(self._verdict, f"{covered} {verdict.value}")

    def wait(self, request: int, timeout: float) -> Verdict | None:
        """Sibling: wait up to ``timeout`` s for a verdict covering ``request``.

        Returns the verdict, or ``None`` when none covered the request in time.

        Raises:
            ValueError: the store holds a value that is not a verdict.
            Exception: whatever the store raised.
        """
        deadline = time.monotonic() + timeout
        pause = _FIRST_PAUSE
        while True:
            if self.store.check([self._verdict]):
                covered, _, name = self.store.get(self._verdict).decode().partition(" ")
                if int(covered) >= request:
                    return Verdict(name)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            time.sleep(min(pause, remaining))
            pause = min(pause * 2, _LONGEST_PAUSE)
