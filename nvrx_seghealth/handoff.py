"""The hand-off: process 0 of an array task gives its verdict to its siblings before they join.

Without it, a sibling (``SLURM_PROCID`` > 0) may join the rendezvous before process 0
has stat'ed the decision file and published the task's marker; the round then counts
the sibling, and once it leaves, one more round is needed. With it:

* process 0, on each ``next_rendezvous()``, judges the artifact, publishes the marker
  when the task is excluded, and then publishes a *verdict*: it takes the next verdict
  number with the atomic ``add`` on ``count`` and writes ``verdict/<n>``;
* a sibling, on each ``next_rendezvous()``, waits for a verdict newer than the last one
  it took, bounded, takes the newest, and only then looks at the marker and joins.

Why attempts line up when launchers restart at different times:

* A sibling ahead of process 0 (it restarted first, or started first) finds no verdict
  newer than its last and waits until process 0 has judged this attempt.
* A sibling behind process 0 (it waited inside the rendezvous while process 0 went
  through more attempts) takes the newest verdict, never an older one, so a fresh
  verdict is never missed; the verdicts it skipped are of attempts it was not part of.
* No verdict admits a sibling of an excluded task: process 0 writes the marker before
  the verdict that follows its decision, and the sibling looks at the marker after
  taking any verdict. A healthy verdict can only be older than an exclusion whose
  marker is then already there.
* Keys are namespaced by ``SLURM_RESTART_COUNT`` as well, so a requeued task never
  takes a verdict of its previous life.
* Bounded everywhere: if process 0 is absent, slow, dead or runs without the check, a
  sibling waits at most the bound and then joins (fail open); the caller logs it.

The sibling polls with ``add(count, 0)`` and ``check`` and a growing pause rather than
the store's ``wait``: a timed-out ``TCPStore.wait`` leaves a pending reply on the
connection, and polling works the same on every store; no ``compare_set`` is needed.

Layout, under the markers' prefix ``nvrx_seghealth/<run_id>/<array_job_id>/``:
``verdict/<task_id>/<restart_count>/count`` and ``.../<n>`` (the verdict's name).

Works with any object offering ``set``, ``get``, ``add`` and ``check``; does not import
torch.
"""

from __future__ import annotations

import enum
import math
import time

from .allocation import validate_id
from .artifact import DEFAULT_STAT_TIMEOUT
from .markers import ReplacementGroupMarkers

__all__ = [
    "HANDOFF_MARGIN",
    "Verdict",
    "VerdictHandoff",
    "default_handoff_timeout",
    "validate_handoff_timeout",
]

#: Seconds a sibling waits for process 0 beyond process 0's own stat bound: srun starts
#: a step's launchers within about a second, but interpreter and torch start-up take
#: 2-5 s on a loaded node and a first TCPStore connect can stall 5 s.
HANDOFF_MARGIN = 20.0

_FIRST_PAUSE = 0.02
_LONGEST_PAUSE = 0.5


class Verdict(enum.Enum):
    """What process 0 decided for one attempt."""

    #: No decision file, or an empty one: the task joins.
    HEALTHY = "healthy"
    #: The decision file could not be read (fail open): the task joins.
    UNCHECKED = "unchecked"
    #: A non-empty decision file: the task stays out; its marker is already published.
    EXCLUDED = "excluded"


def default_handoff_timeout(stat_timeout: float | None) -> float:
    """The default bound of a sibling's wait: process 0's stat bound plus the margin."""
    return (DEFAULT_STAT_TIMEOUT if stat_timeout is None else stat_timeout) + HANDOFF_MARGIN


def validate_handoff_timeout(seconds: float) -> float:
    """Return ``seconds`` when it is a finite number >= 0 (``0`` disables the hand-off).

    Raises:
        ValueError: otherwise.
    """
    if not (isinstance(seconds, (int, float)) and math.isfinite(seconds) and seconds >= 0):
        raise ValueError(
            f"hand-off timeout must be a finite number of seconds >= 0 (0 disables the "
            f"hand-off), got {seconds!r}"
        )
    return float(seconds)


class VerdictHandoff:
    """The verdicts of one array task's process 0, for one life of the task.

    One instance per launcher: process 0 calls :meth:`publish`, a sibling
    :meth:`take`; the sibling's instance remembers the last verdict it took.

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
        self._taken = 0

    def publish(self, verdict: Verdict) -> int:
        """Process 0: publish ``verdict`` for the attempt about to join; return its number.

        Raises:
            Exception: whatever the store raised.
        """
        number = self.store.add(self.prefix + "count", 1)
        self.store.set(f"{self.prefix}{number}", verdict.value)
        return number

    def take(self, timeout: float) -> tuple[int, Verdict] | None:
        """Sibling: wait up to ``timeout`` s for a verdict newer than the last one taken.

        Returns ``(number, verdict)`` of the newest verdict, or ``None`` when none newer
        appeared in time.

        Raises:
            ValueError: the store holds a value that is not a verdict.
            Exception: whatever the store raised.
        """
        deadline = time.monotonic() + timeout
        pause = _FIRST_PAUSE
        while True:
            newest = self.store.add(self.prefix + "count", 0)
            # process 0 takes the number before it writes the verdict: wait for both.
            if newest > self._taken and self.store.check([f"{self.prefix}{newest}"]):
                verdict = Verdict(self.store.get(f"{self.prefix}{newest}").decode())
                self._taken = newest
                return newest, verdict
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            time.sleep(min(pause, remaining))
            pause = min(pause * 2, _LONGEST_PAUSE)
