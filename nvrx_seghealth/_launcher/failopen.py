"""The one way the wrapper runs its own work: :class:`FailOpen`.

Do no harm: a failure of the wrapper's own work (a stat, a store call, a bug) is one
WARNING and a ``fail_open`` event, and the launcher goes on as plain torchrun would.
What stops the launcher (torch's ``SignalException``, ``KeyboardInterrupt``,
``SystemExit``: :mod:`.signals`) passes through unchanged.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from .._rendezvous.signals import stops_the_launcher
from .events import DecisionRecorder

__all__ = ["FailOpen"]

log = logging.getLogger(__name__)

_T = TypeVar("_T")


class FailOpen:
    """Runs one launcher's own work; see the module documentation.

    Args:
        events: where a failure is recorded.
        where: what the launcher is, for messages (`` of array task 7_3``), or ``""``.
    """

    def __init__(self, events: DecisionRecorder, where: str = "") -> None:
        self._events = events
        self._where = where
        self._failing: set[str] = set()  # actions whose failures are warned once a streak

    def __call__(
        self,
        action: str,
        doing: str,
        call: Callable[..., _T],
        *args: object,
        streak: str | None = None,
    ) -> _T | None:
        """Run ``call(*args)``; on an error warn and return ``None`` (fail open).

        A failure is one WARNING ("could not ``doing``") and a ``fail_open`` event whose
        ``action`` is ``action``. With ``streak`` (what is true again once ``call``
        succeeds), only the first failure of a run of failures is warned, and the first
        success after it is one INFO.
        """
        try:
            result = call(*args)
        except Exception as error:  # fail open: do no harm (what stops the launcher passes)
            if stops_the_launcher(error):
                raise
            if streak is None or action not in self._failing:
                self._events.wrapper_error(action, error)
                log.warning(
                    "Segment health check could not %s%s (%s: %s) (fail open)",
                    doing,
                    self._where,
                    type(error).__name__,
                    error,
                )
            if streak is not None:
                self._failing.add(action)
            return None
        if streak is not None and action in self._failing:
            self._failing.discard(action)
            log.info("Segment health check: %s again", streak)
        return result
