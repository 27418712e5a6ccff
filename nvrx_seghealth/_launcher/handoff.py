"""The hand-off: process 0 of an array task answers its siblings' requests for a verdict.

A sibling asks before each ``next_rendezvous()`` and waits, bounded, for an answer that
covers its request. Process 0 answers with a verdict and the highest request it had read
before the stat behind that verdict. The rules:

* A verdict covers a request only when its stat began after the request was made.
* While process 0 is inside the rendezvous, its answer stands for every request made meanwhile.
* An exclusion stands for good: a sibling that asks later is refused at once.
* Between rounds, process 0 answers new requests with a fresh stat, from a thread.
* Keys carry ``SLURM_RESTART_COUNT``: a requeued task never takes its previous life's verdict.
* Every change is one atomic ``add`` on one counter per task life; no ``compare_set``.
* Process 0 then sets ``<key>/answered/<n>`` for each request ``n`` it newly answers. A
  sibling waits on its key for up to :data:`BLOCKING_WAIT` seconds, then polls the counter.

The key, under the markers' prefix ``nvrx_seghealth/<run_id>/<array_job_id>/``, is
``verdict/<task_id>/<restart_count>``. Why a sibling asks, and what it costs:
docs/concepts.md. Works with any torch store (``add``; ``wait`` and ``multi_set`` too).
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from .._rendezvous.signals import stops_the_launcher
from .._rendezvous.waits import wait_for
from .markers import ReplacementGroupMarkers

__all__ = [
    "BLOCKING_WAIT",
    "EVERY_REQUEST",
    "Answer",
    "CounterReads",
    "Verdict",
    "VerdictHandoff",
    "decode",
]

#: Seconds a sibling blocks on its request's key before it polls. The wait holds the
#: sibling's store client (a TCPStore serves one call at a time), so a keep-alive of the
#: round before waits as long at most. On a TCPStore, a wait that runs out costs two
#: warning lines of torch's client.
BLOCKING_WAIT = 1.0
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
    """A store that reads an ``add`` counter without writing it.

    On etcd an ``add`` is a compare-and-swap, one raft write, and process 0 looks for
    requests every 0.2 s while the job trains. A plain read is served by the member the
    client talks to. It is never behind an ``add`` made through that member, but may be
    behind one made through another. Process 0 that reads fewer requests answers fewer;
    the rest wait for its next look. A sibling that reads an older answer takes it only
    if it stood then, and looks at its marker once joined.
    """

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
    ever lost), every read one read of it. A read never blocks: a ``get`` of a missing key
    would wait for the store's timeout, so it is an ``add`` of 0, or a plain read on a
    store that offers one (:class:`CounterReads`).

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
        self._answered = 0  # process 0: the highest request whose key it set

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
        stand. Then the keys of the requests it newly answers are set, in one call.

        Raises:
            Exception: whatever the store raised (the answer may be published already:
                the siblings then find it by polling).
        """
        target = answer.encoded()
        value = self.store.add(self.key, target - self._given)
        held = value >> _REQUEST_BITS << _REQUEST_BITS
        if held != target:  # the counter held another answer than this instance gave
            value = self.store.add(self.key, target - held)
        self._given = target
        requested = value & _REQUESTS
        answered = requested if answer.standing else min(answer.covered, requested)
        if answered > self._answered:
            woken = range(self._answered + 1, answered + 1)
            # Store.multi_set is not in torch's stubs
            self.store.multi_set(  # type: ignore[attr-defined]
                [self.answered_key(n) for n in woken], ["1"] * len(woken)
            )
            self._answered = answered
        return requested

    def answered_key(self, request: int) -> str:
        """The key process 0 sets once it answered request number ``request``."""
        return f"{self.key}/answered/{request}"

    def wait(self, request: int, timeout: float) -> Verdict | None:
        """Sibling: wait up to ``timeout`` s for an answer covering ``request``.

        Returns the verdict, or ``None`` when no answer covered the request in time. It
        blocks on the request's key up to :data:`BLOCKING_WAIT` seconds (a signal ends
        that wait at once), then polls the counter with a growing pause: process 0 may
        be slow, absent, or of a release that sets no key.

        Raises:
            ValueError: the counter holds no answer.
            Exception: whatever the store raised.
        """
        deadline = time.monotonic() + timeout
        self._block_on(request, min(timeout, BLOCKING_WAIT))
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

    def _block_on(self, request: int, timeout: float) -> None:
        """Wait up to ``timeout`` s for the key of ``request``. A store whose wait
        failed is left to the poll that follows: it reads the counter, and raises if
        the store is broken. What stops the launcher passes."""
        if timeout <= 0:
            return
        try:
            wait_for(self.store, [self.answered_key(request)], timeout)
        except Exception as error:
            if stops_the_launcher(error):
                raise
