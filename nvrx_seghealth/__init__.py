"""Keep an unhealthy Slurm allocation unit out of PyTorch elastic rendezvous.

An external producer writes a *decision* file for an allocation unit (an array task,
or a whole regular job); before each rendezvous the launcher with ``SLURM_PROCID=0`` of
the unit stats it, and a non-empty regular file keeps the unit out of training.

Glossary:

* **decision**: what the producer wrote for one unit, the file
  ``<directory>/segment_health_check.<job_id>.<task_id>``, and what one ``stat`` of it
  says (:class:`Decision`): a non-empty regular file excludes the unit; an empty file
  or none lets it proceed; anything unreadable lets it proceed with a WARNING (fail
  open).
* **verdict**: process 0's answer to the other launchers of its array task (healthy,
  unchecked or excluded), handed over through the rendezvous store, so they need not
  join a round to learn that their unit is out.
* **marker**: the key process 0 of an excluded array task publishes in the rendezvous
  store, marking its replacement group unhealthy; every launcher of the task that has
  no verdict looks at it before and after joining.
* **exclusion**: a launcher refusing the rendezvous, raised as
  :class:`UnhealthyNodeException` whose ``reason`` (:class:`ExclusionReason`) says what
  excluded it: the decision file, the marker or the verdict. The launcher exits non-zero
  and ``srun --kill-on-bad-exit=1`` ends the unit.
* **outcome**: what one ``stat`` of a decision file found (:class:`Outcome`): unhealthy,
  clear, absent, unreadable, not a regular file.

The public API is what this module exports: the rendezvous handler and its backend, the
consumer's check, the producer's calls and the exceptions. Every other module is
internal. ``import nvrx_seghealth`` does not import torch: the handler is imported when
first used, and the backend imports torch only when it builds a handler.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._decision.artifact import (
    DEFAULT_STAT_TIMEOUT,
    Decision,
    DecisionConflict,
    Outcome,
    artifact_path,
    clear_decision,
    evaluate,
    publish_decision,
)
from ._decision.unit import AllocationUnit, InvalidIdentityError
from ._errors import ConfigurationError, ExclusionReason, UnhealthyNodeException
from ._launcher.backend import BACKEND_NAME, register
from ._launcher.check import SegmentHealthCheck, get_segment_health_check
from ._launcher.markers import ReplacementGroupMarkers
from ._logfmt import parse_fields

if TYPE_CHECKING:
    from ._launcher.handler import SegmentHealthRendezvousHandler

__all__ = [
    "BACKEND_NAME",
    "DEFAULT_STAT_TIMEOUT",
    "AllocationUnit",
    "ConfigurationError",
    "Decision",
    "DecisionConflict",
    "ExclusionReason",
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
    "parse_fields",
    "publish_decision",
    "register",
]

# Tracebacks name the public package, not the internal module that defines them.
for _exception in (
    ConfigurationError,
    DecisionConflict,
    InvalidIdentityError,
    UnhealthyNodeException,
):
    _exception.__module__ = __name__
del _exception


def __getattr__(name: str) -> Any:
    if name == "SegmentHealthRendezvousHandler":
        from ._launcher.handler import SegmentHealthRendezvousHandler

        return SegmentHealthRendezvousHandler
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
