"""One retry policy for a rendezvous on a replicated service: :class:`RetryPolicy`.

A replicated service (etcd) stops answering writes for about a second while it elects
a leader, and a member that dies drops the calls it held. A launcher whose rendezvous
or store call fails then would end the job. The policy runs such a call again until
it answers or a deadline passes:

- which errors are transient is the adaptation's to say (``transient``); any other
  error, and what stops the launcher (:mod:`.signals`), passes through at once;
- a call's deadline is ``timeout`` seconds after it starts, attempts included, or
  sooner if the caller's own (:func:`deadline_scope`) ends first. The client bounds each
  attempt by what is left (:func:`time_left`). A call that waits on purpose (a watch)
  is ``bounded=False``: its deadline runs from its first transient failure;
- the waits between attempts double from :data:`FIRST_WAIT` to :data:`LONGEST_WAIT`;
- an *episode* runs while any call is being retried: its first failure is one WARNING
  (``retry=start``, the member and the error as logfmt fields), and the end of its
  last call one INFO (``retry=end``, ``answered=true`` or ``false``);
- past the deadline the call raises :class:`Unreachable`, naming the member, the
  error and the timeout.

A call is only safe to run again when its operation is: a read, a write guarded by a
revision, or an operation that first settles what its lost attempt did. The
adaptation builds such operations (etcd-v2: :mod:`.etcd_v2`); this module knows no
service.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from .._errors import SegmentHealthError
from .._logfmt import format_fields
from .signals import stops_the_launcher

__all__ = [
    "FIRST_WAIT",
    "LONGEST_WAIT",
    "RetryPolicy",
    "Unreachable",
    "deadline_scope",
    "time_left",
]

log = logging.getLogger(__name__)

_T = TypeVar("_T")

#: Seconds before the second attempt of a call.
FIRST_WAIT = 0.05
#: The longest wait between two attempts, in seconds.
LONGEST_WAIT = 1.0


#: The calling thread's deadline (``end``, a :func:`time.monotonic` time), if any.
_scope = threading.local()


class Unreachable(SegmentHealthError, ConnectionError):
    """The service did not answer a call within the policy's timeout."""


@contextmanager
def deadline_scope(end: float | None) -> Iterator[None]:
    """Within the block, the calling thread's calls end by ``end`` (an outer scope's
    earlier end wins); ``None``: no new bound."""
    outer: float | None = getattr(_scope, "end", None)
    _scope.end = outer if end is None else end if outer is None else min(outer, end)
    try:
        yield
    finally:
        _scope.end = outer


def time_left(longest: float) -> float:
    """Seconds left until the calling thread's deadline, at most ``longest``."""
    end: float | None = getattr(_scope, "end", None)
    return longest if end is None else min(longest, end - time.monotonic())


class RetryPolicy:
    """Runs the calls of one launcher on one service; see the module documentation.

    Args:
        service: what the service is, for messages (``etcd``).
        timeout: seconds a call is retried after its first transient failure (> 0).
        transient: whether an error is transient (a call that fails with it may answer
            if run again).
        member: the member the calls go to now, for messages (an error with a
            ``member`` attribute names the one that failed instead).
    """

    def __init__(
        self,
        service: str,
        timeout: float,
        transient: Callable[[Exception], bool],
        member: Callable[[], str],
    ) -> None:
        if not timeout > 0:
            raise ValueError(f"the retry timeout must be positive, not {timeout!r}")
        self.service = service
        self.timeout = timeout
        self._transient = transient
        self._member = member
        self._lock = threading.Lock()
        self._since: float | None = None  # when the episode began; None between episodes
        self._retrying = 0  # calls of the episode not answered yet

    def call(self, what: str, operation: Callable[[], _T], *, bounded: bool = True) -> _T:
        """``operation()``, run again on a transient error until it answers.

        ``what`` names the call in messages (``set_state``, ``add``). ``bounded``: the
        deadline counts from the call's start, attempts included; else from its first
        transient failure (a call that waits on purpose).

        Raises:
            Unreachable: the call failed transiently until its deadline.
        """
        start = time.monotonic()
        outer: float | None = getattr(_scope, "end", None)
        end = start + self.timeout if bounded else None
        deadline: float | None = None
        wait = FIRST_WAIT
        answered = False
        try:
            with deadline_scope(end):
                while True:
                    try:
                        result = operation()
                        answered = True
                        return result
                    except Exception as error:
                        if stops_the_launcher(error) or not self._transient(error):
                            raise
                        now = time.monotonic()
                        # the member that failed, if the error names it (the client moved on)
                        member = str(getattr(error, "member", "") or self._member())
                        if deadline is None:
                            deadline = end if end is not None else now + self.timeout
                            deadline = deadline if outer is None else min(deadline, outer)
                            self._failed(what, member, error, now)
                        if now >= deadline:
                            raise Unreachable(
                                f"{self.service} did not answer {what} within "
                                f"{now - start:.3g} s (read_timeout {self.timeout:g} s; last "
                                f"member asked: {member}; {type(error).__name__}: {error})"
                            ) from error
                        time.sleep(min(wait, deadline - now))
                        wait = min(2 * wait, LONGEST_WAIT)
        finally:
            if deadline is not None:
                self._ended(what, answered)

    def _failed(self, what: str, member: str, error: Exception, now: float) -> None:
        """A call failed for the first time: it joins the episode, or begins one (WARNING)."""
        with self._lock:
            self._retrying += 1
            if self._since is not None:
                return
            self._since = now
        log.warning(
            "%s did not answer; retrying for up to %g s: %s",
            self.service,
            self.timeout,
            format_fields(
                {
                    "retry": "start",
                    "service": self.service,
                    "member": member,
                    "call": what,
                    "error": type(error).__name__,
                    "detail": str(error),
                }
            ),
        )

    def _ended(self, what: str, answered: bool) -> None:
        """A call of the episode answered or gave up; the last one ends it (INFO)."""
        with self._lock:
            self._retrying -= 1
            if self._retrying or self._since is None:
                return
            since, self._since = self._since, None
        log.info(
            "%s %s: %s",
            self.service,
            "answers again" if answered else "retries no more",
            format_fields(
                {
                    "retry": "end",
                    "service": self.service,
                    "member": self._member(),
                    "call": what,
                    "answered": answered,
                    "seconds": round(time.monotonic() - since, 3),
                }
            ),
        )
