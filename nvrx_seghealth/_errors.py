"""The package's exceptions: an exclusion, and a setting that cannot be used.

Standard library only.
"""

from __future__ import annotations

import enum
import functools
from typing import Any

from ._logfmt import FieldValue

__all__ = ["ConfigurationError", "ExclusionReason", "UnhealthyNodeException"]


class ConfigurationError(ValueError):
    """A segment-health setting is invalid; the message names the setting and the fix.

    Attributes:
        setting: the setting, as the user wrote it (``rdzv-conf
            segment_health_check_stat_timeout``, ``--ft-segment-health-check-dir``,
            ``environment variable NVRX_SEGMENT_HEALTH_CHECK_DIR``, ...), when one
            setting is at fault; else ``None``.
    """

    def __init__(self, message: str, *, setting: str | None = None) -> None:
        super().__init__(message)
        self.setting = setting


class ExclusionReason(str, enum.Enum):
    """What excluded a launcher: the stable token of :attr:`UnhealthyNodeException.reason`.

    The same token is the ``by`` field of the ``nvrx_seghealth.excluded`` event and the
    ``reason`` field of the launcher's ERROR line.
    """

    #: Process 0 found a non-empty decision file.
    DECISION_FILE = "decision-file"
    #: The replacement group's marker in the rendezvous store.
    MARKER = "marker"
    #: Process 0's ``excluded`` verdict, through the hand-off.
    VERDICT = "verdict"


class UnhealthyNodeException(Exception):
    """This launcher's allocation unit is excluded and must not join the rendezvous.

    Raised from ``next_rendezvous()``. It is deliberately *not* a
    ``RendezvousGracefulExitError`` (torchrun would exit 0) nor any other
    ``RendezvousError`` a launcher might retry: the launcher must exit non-zero so that
    ``srun --kill-on-bad-exit=1`` ends the unit's other tasks.

    Attributes:
        job_id: the unit's job id.
        task_id: the unit's task id.
        reason: what excluded it (a stable token; the message is for people).
        after_joining: whether the launcher had already joined the round it leaves
            (a marker seen only once the inner rendezvous returned).
        path: the decision file that excluded the unit (process 0), else ``None``.
        size: that file's size in bytes, else ``None``.
        marker: the text of the marker that excluded the launcher, else ``None``.
    """

    def __init__(
        self,
        message: str,
        *,
        job_id: str,
        task_id: str,
        reason: ExclusionReason,
        after_joining: bool = False,
        path: str | None = None,
        size: int | None = None,
        marker: str | None = None,
    ) -> None:
        super().__init__(message)
        self.job_id = job_id
        self.task_id = task_id
        self.reason = reason
        self.after_joining = after_joining
        self.path = path
        self.size = size
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        """Rebuild with the same keyword arguments: the exclusion survives ``pickle``
        (a launcher whose agent runs in another process) and ``copy``."""
        keywords = {
            name: getattr(self, name)
            for name in ("job_id", "task_id", "reason", "after_joining", "path", "size", "marker")
        }
        return functools.partial(type(self), **keywords), self.args, self.__dict__

    def fields(self) -> dict[str, FieldValue]:
        """The exclusion's stable tokens, as the launcher's ERROR line ends with them in
        logfmt (:func:`~._logfmt.format_fields`): ``reason``, ``after_joining``,
        ``job_id``, ``task_id``."""
        return {
            "reason": self.reason.value,
            "after_joining": self.after_joining,
            "job_id": self.job_id,
            "task_id": self.task_id,
        }
