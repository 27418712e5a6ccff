"""Keep an unhealthy Slurm allocation unit out of PyTorch elastic rendezvous.

The artifact and identity layers (``allocation``, ``artifact``, ``check``, ``markers``,
``errors``, ``config``) need only the standard library. The rendezvous layers need torch:
``handler`` is imported lazily from here and ``backend`` imports torch only when it
builds a handler, so ``import nvrx_seghealth`` does not import torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .allocation import AllocationUnit, InvalidIdentityError
from .artifact import (
    DEFAULT_STAT_TIMEOUT,
    Decision,
    Outcome,
    artifact_path,
    clear_decision,
    evaluate,
    publish_decision,
)
from .backend import BACKEND_NAME, register
from .check import SegmentHealthCheck, get_segment_health_check
from .config import ConfigurationError
from .errors import UnhealthyNodeException
from .markers import ReplacementGroupMarkers

if TYPE_CHECKING:
    from .handler import SegmentHealthRendezvousHandler

__all__ = [
    "BACKEND_NAME",
    "DEFAULT_STAT_TIMEOUT",
    "AllocationUnit",
    "ConfigurationError",
    "Decision",
    "InvalidIdentityError",
    "Outcome",
    "ReplacementGroupMarkers",
    "SegmentHealthCheck",
    "SegmentHealthRendezvousHandler",
    "UnhealthyNodeException",
    "artifact_path",
    "clear_decision",
    "evaluate",
    "get_segment_health_check",
    "publish_decision",
    "register",
]


def __getattr__(name: str) -> Any:
    if name == "SegmentHealthRendezvousHandler":
        from .handler import SegmentHealthRendezvousHandler

        return SegmentHealthRendezvousHandler
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
