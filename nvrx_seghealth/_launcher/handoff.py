"""The hand-off: process 0 of an array task answers its siblings' requests for a verdict.

Without it, a sibling (``SLURM_PROCID`` > 0) may join the rendezvous before process 0
has stat'ed the decision file and published the task's marker; the round then counts
the sibling, and once it leaves, one more round is needed. With it, a sibling asks
before it joins and process 0 answers:

* a sibling, on each ``next_rendezvous()``, takes a fresh request number
  (:meth:`VerdictHandoff.request`) and waits, bounded, until process 0's answer covers
  it (:meth:`VerdictHandoff.wait`);
* process 0's answer (:class:`Answer`) is a verdict and the highest request number
  ``covered`` that it had read *before* the stat the verdict comes from. A verdict
  therefore covers a request only when its stat began after that request was made: a
  sibling never takes a verdict older than its own request.
* While process 0 is inside the rendezvous, its answer *stands*: it covers every
  request made meanwhile, with that attempt's verdict. A sibling asking then joins the
  round process 0 admitted itself to on that very stat (or a later one that process 0
  judges again first), and its request returns the answer at once: one store call.
  When process 0 leaves the rendezvous it settles the answer on the requests made so
  far. An exclusion stands for good: a sibling that asks later is refused at once.
* Between its attempts (its workers run) process 0 answers new requests with a fresh
  stat: the handler looks for them on a thread, so a sibling that restarts alone is
  answered although process 0 does not re-enter the rendezvous until a node waits in
  it, and the sibling does not wait in it before it has a verdict.
* A healthy verdict covering a request comes from a stat made after the sibling asked,
  so the sibling never joins on an older decision than its own request. It does not
  bind process 0's next attempt: a verdict given between rounds comes from a stat that
  process 0 does not join on (process 0 stats again when its agent restarts it), so
  every sibling also looks at its group's marker once it has joined
  (:mod:`.coordinator`). Without a verdict (no hand-off, or none in time) it looks
  at the marker before joining as well.
* Keys are namespaced by ``SLURM_RESTART_COUNT`` as well, so a requeued task never
  takes a verdict of its previous life.
* Bounded everywhere: if process 0 is absent, slow, dead or runs without the check, a
  sibling waits at most the bound and then joins (fail open); the caller logs it.

Everything lives in one counter per task life, changed only with the atomic ``add``:
siblings add 1 to its low bits, process 0 adds the change of its answer to the bits
above. It is read without blocking (a ``get`` of a missing key blocks until the store
timeout): with ``add(key, 0)``, or, on a store that offers it (:class:`CounterReads`,
the backend's etcd-v2 store), with ``read_counter``, a plain read: on etcd ``add`` is a
compare-and-swap, one raft write, and process 0 looks for requests every 0.2 s for the
whole training. Such a read is served by the etcd member the client talks to: never
behind an ``add`` made through that member, possibly behind one made through another
(or just before the client switched members, which it does when one fails). Process 0
that reads fewer requests than were made answers fewer (the rest at its next look); a
sibling that reads, after a switch, an answer from before its request takes it only if
it stood then, and looks at its marker once it has joined, as every sibling does.
A healthy round costs process 0 two store calls (stand, settle) and a sibling one (its
request, answered by the standing answer) plus a few reads when it is ahead of process
0. The sibling polls with a growing pause rather than the store's ``wait``: a timed-out
``TCPStore.wait`` leaves a pending reply on the connection, and polling works the same
on every store; no ``compare_set`` is needed (torch's ``EtcdStore`` has none).

Key, under the markers' prefix ``nvrx_seghealth/<run_id>/<array_job_id>/``:
``verdict/<task_id>/<restart_count>``.

Works with any object offering ``add``; does not import torch.
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from .markers import ReplacementGroupMarkers

__all__ = ["EVERY_REQUEST", "Answer", "CounterReads", "Verdict", "VerdictHandoff", "decode"]

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


_CODES = {Verdict.HEALTHY: 1, Verdict.UNCHECKED: 2, Verdict.EXCLUDED: 3}
_VERDICTS = {code: verdict for verdict, code in _CODES.items()}

# One counter per task life: requests in the low bits, process 0's answer above them.
_REQUEST_BITS = 24
_REQUESTS = (1 << _REQUEST_BITS) - 1
#: ``covered`` of an answer that covers every request, past and future.
EVERY_REQUEST = _REQUESTS


@runtime_checkable
class CounterReads(Protocol):
    """A store that reads an ``add`` counter without writing it."""

    def read_counter(self, key: str) -> int:
        """The counter's value, ``0`` when never added to."""
        ...


@dataclass(frozen=True)
class Answer:
    """Process 0's answer as the counter holds it.

    Attributes:
        verdict: the verdict, ``None`` before process 0 first answered.
        covered: the highest request number the verdict answers.
        standing: process 0 is inside the rendezvous on this verdict: it answers every
            request made while it stands (and an exclusion stands for good).
    """

    verdict: Verdict | None
    covered: int = 0
    standing: bool = False

    def covers(self, request: int) -> bool:
        """Whether this answer answers request number ``request``."""
        return self.verdict is not None and (self.standing or self.covered >= request)

    def encoded(self) -> int:
        """The answer's part of the counter."""
        code = 0 if self.verdict is None else _CODES[self.verdict]
        return (self.covered << 3 | int(self.standing) << 2 | code) << _REQUEST_BITS


def decode(value: int) -> tuple[int, Answer]:
    """``(requests made, answer)`` from the counter's value (as a store holds it).

    Raises:
        ValueError: the value holds no answer.
    """
    bits = value >> _REQUEST_BITS
    code = bits & 3
    if code == 0 and bits:
        raise ValueError(f"the hand-off counter holds {value}, which is no answer")
    return value & _REQUESTS, Answer(_VERDICTS.get(code), bits >> 3, bool(bits & 4))


class VerdictHandoff:
    """The requests and answers of one array task, for one life of the task.

    One instance per launcher: process 0 calls :meth:`read` and :meth:`publish`, a
    sibling :meth:`request` and :meth:`wait`. Every change is one atomic ``add`` on one
    counter (siblings add to its low bits, process 0 to its high bits, so no update is
    ever lost), every read one read of it.

    Args:
        markers: the array job's markers (they give the store and the namespace).
        group: the replacement group (:attr:`~.._decision.unit.AllocationUnit.replacement_group`).
        restart_count: the unit's
            :attr:`~.._decision.unit.AllocationUnit.restart_count`.

    Both were validated where they entered (:class:`~.._decision.unit.SlurmId`) and are
    taken as they are.
    """

    def __init__(self, markers: ReplacementGroupMarkers, group: str, restart_count: str) -> None:
        self.store = markers.store
        self.key = f"{markers.prefix}verdict/{group}/{restart_count}"
        self._given = 0  # process 0: the encoded answer it last gave

    def read(self) -> tuple[int, Answer]:
        """``(requests made so far, the current answer)``; writes nothing on a store
        that reads counters (:class:`CounterReads`).

        Raises:
            ValueError: the counter holds no answer.
            Exception: whatever the store raised.
        """
        store = self.store
        if isinstance(store, CounterReads):
            return decode(store.read_counter(self.key))
        return decode(store.add(self.key, 0))

    def request(self) -> tuple[int, Answer]:
        """Sibling: ask for a verdict; ``(the request's number, the current answer)``.

        Raises:
            ValueError: the counter holds no answer.
            Exception: whatever the store raised.
        """
        return decode(self.store.add(self.key, 1))

    def publish(self, answer: Answer) -> int:
        """Process 0: make ``answer`` the current answer; return the requests made so far.

        ``answer.covered`` must have been read (:meth:`read`, or this method's return
        value) before the stat that ``answer.verdict`` comes from, or the answer must
        stand.

        Raises:
            Exception: whatever the store raised.
        """
        target = answer.encoded()
        value = self.store.add(self.key, target - self._given)
        held = value >> _REQUEST_BITS << _REQUEST_BITS
        if held != target:  # the counter held another answer than this instance gave
            value = self.store.add(self.key, target - held)
        self._given = target
        return value & _REQUESTS

    def wait(self, request: int, timeout: float) -> Verdict | None:
        """Sibling: wait up to ``timeout`` s for an answer covering ``request``.

        Returns the verdict, or ``None`` when no answer covered the request in time.

        Raises:
            ValueError: the counter holds no answer.
            Exception: whatever the store raised.
        """
        deadline = time.monotonic() + timeout
        pause = _FIRST_PAUSE
        while True:
            _, answer = self.read()
            if answer.covers(request):
                return answer.verdict
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            time.sleep(min(pause, remaining))
            pause = min(pause * 2, _LONGEST_PAUSE)
