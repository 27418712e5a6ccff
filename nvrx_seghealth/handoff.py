"""The hand-off: process 0 of an array task answers its siblings' requests for a verdict.

Without it, a sibling (``SLURM_PROCID`` > 0) may join the rendezvous before process 0
has stat'ed the decision file and published the task's marker; the round then counts
the sibling, and once it leaves, one more round is needed. With it, a sibling asks
before it joins and process 0 answers:

* a sibling, on each ``next_rendezvous()``, takes a fresh request number with the
  atomic ``add`` on ``requests`` (:meth:`VerdictHandoff.request`) and waits, bounded,
  until the published verdict covers it (:meth:`VerdictHandoff.wait`);
* process 0 publishes ``(n, verdict)`` as one integer, ``4 n + code``, in the
  ``answer`` key (:meth:`VerdictHandoff.answer`), where ``n`` is the highest request
  number it had read *before* the stat the verdict comes from. A verdict therefore
  covers a request only when its stat began after that request was made: a sibling
  never takes a verdict older than its own request. An exclusion is answered for
  every request, past and future (:data:`EVERY_REQUEST`): it is final for the life of
  the task, so a sibling that asks later is refused at once.

Process 0 answers at every ``next_rendezvous()`` and, between them, whenever a request
is pending (the handler polls :meth:`VerdictHandoff.requested` on a thread, so a
sibling that restarts alone is answered while process 0's workers run: process 0 does
not re-enter the rendezvous until a node waits in it, and the sibling does not wait in
it before it has a verdict). While process 0 is itself inside the rendezvous, it
answers with that attempt's verdict: the sibling joins the round process 0 admitted
itself to on that very stat, or a later one that process 0 judges again first.

* A sibling that has a verdict needs no marker: a healthy verdict covering its request
  comes from a stat made after it asked, exactly what process 0 itself joins on. The
  marker is for the launchers that have no verdict (no hand-off, or none in time).
* Keys are namespaced by ``SLURM_RESTART_COUNT`` as well, so a requeued task never
  takes a verdict of its previous life.
* Bounded everywhere: if process 0 is absent, slow, dead or runs without the check, a
  sibling waits at most the bound and then joins (fail open); the caller logs it.

Every call is one atomic ``add``: ``add(key, 0)`` reads a counter without blocking
(``get`` of a missing key blocks until the store timeout), so a healthy round costs
a sibling two store operations (ask, read the answer) and process 0 two (read the
requests, answer). The sibling polls with a growing pause rather than the store's
``wait``: a timed-out ``TCPStore.wait`` leaves a pending reply on the connection, and
polling works the same on every store; no ``compare_set`` is needed (torch's
``EtcdStore`` has none). Only process 0 changes the answer key.

Layout, under the markers' prefix ``nvrx_seghealth/<run_id>/<array_job_id>/``:
``verdict/<task_id>/<restart_count>/requests`` and ``.../answer`` (two counters).

Works with any object offering ``add``; does not import torch.
"""

from __future__ import annotations

import enum
import time

from .allocation import validate_id
from .markers import ReplacementGroupMarkers

__all__ = ["EVERY_REQUEST", "Verdict", "VerdictHandoff"]

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


#: The answer to every request, past and future: an exclusion is final for the life.
EVERY_REQUEST = 2**40
_CODES = {Verdict.HEALTHY: 1, Verdict.UNCHECKED: 2, Verdict.EXCLUDED: 3}
_VERDICTS = {code: verdict for verdict, code in _CODES.items()}


class VerdictHandoff:
    """The requests and answers of one array task, for one life of the task.

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
        self._answer = self.prefix + "answer"
        self._answered = 0  # process 0: the value it last gave the answer key

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
        ``verdict`` comes from, or be :data:`EVERY_REQUEST` for an exclusion.

        Raises:
            Exception: whatever the store raised.
        """
        target = covered * 4 + _CODES[verdict]
        value = self.store.add(self._answer, target - self._answered)
        if value != target:  # the key held another value than this instance last gave it
            self.store.add(self._answer, target - value)
        self._answered = target

    def wait(self, request: int, timeout: float) -> Verdict | None:
        """Sibling: wait up to ``timeout`` s for a verdict covering ``request``.

        Returns the verdict, or ``None`` when none covered the request in time.

        Raises:
            ValueError: the store holds a value that is not an answer.
            Exception: whatever the store raised.
        """
        deadline = time.monotonic() + timeout
        pause = _FIRST_PAUSE
        while True:
            value = self.store.add(self._answer, 0)
            covered, code = divmod(value, 4)
            if covered >= request:
                if code not in _VERDICTS:
                    raise ValueError(f"{self._answer!r} holds {value}, which is no answer")
                return _VERDICTS[code]
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            time.sleep(min(pause, remaining))
            pause = min(pause * 2, _LONGEST_PAUSE)
