"""The package's exceptions: an exclusion, and a setting that cannot be used.

Standard library only.
"""

from __future__ import annotations

__all__ = ["ConfigurationError", "UnhealthyNodeException"]


class ConfigurationError(ValueError):
    """A segment-health setting is invalid; the message names the setting and the fix."""


class UnhealthyNodeException(Exception):
    """This launcher's allocation unit is excluded and must not join the rendezvous.

    Raised from ``next_rendezvous()``. It is deliberately *not* a
    ``RendezvousGracefulExitError`` (torchrun would exit 0) nor any other
    ``RendezvousError`` a launcher might retry: the launcher must exit non-zero so that
    ``srun --kill-on-bad-exit=1`` ends the unit's other tasks.

    Attributes:
        job_id: the unit's job id.
        task_id: the unit's task id.
        path: the decision file that excluded the unit (process 0), else ``None``.
        size: that file's size in bytes, else ``None``.
    """

    def __init__(
        self,
        message: str,
        *,
        job_id: str,
        task_id: str,
        path: str | None = None,
        size: int | None = None,
    ) -> None:
        super().__init__(message)
        self.job_id = job_id
        self.task_id = task_id
        self.path = path
        self.size = size
