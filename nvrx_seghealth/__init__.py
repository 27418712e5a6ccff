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
consumer's check, the producer's calls and the exceptions, which all derive from
:class:`SegmentHealthError` (the tree is drawn in ``_errors``). Every other module is
internal. ``import nvrx_seghealth`` does not import torch: the handler is imported when
first used, and the backend imports torch only when it builds a handler.

The names are loaded when first used (PEP 562): torch loads the backend's entry point,
and with it this package, in every process that imports torch's rendezvous package (every
``torchrun``, every worker that imports ``torch.distributed.checkpoint``), and such a
process needs the backend only. Using a name loads its module and binds the public names
of every module loaded by then; those of ``_errors``, which the backend loads anyway, are
bound at once. The exceptions are named by this package: a traceback says
``nvrx_seghealth.UnhealthyNodeException``, not the internal module that defines it.
"""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING, Any

from ._errors import (
    ConfigurationError,
    ExclusionReason,
    SegmentHealthError,
    UnhealthyNodeException,
)
from ._logfmt import parse_fields

if TYPE_CHECKING:
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
    from ._launcher.backend import BACKEND_NAME, register
    from ._launcher.check import SegmentHealthCheck, get_segment_health_check
    from ._launcher.handler import SegmentHealthRendezvousHandler
    from ._launcher.markers import ReplacementGroupMarkers

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
    "SegmentHealthError",
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

#: The modules of the names loaded when first used, and their public names.
_LAZY_MODULES = {
    "._decision.artifact": (
        "DEFAULT_STAT_TIMEOUT",
        "Decision",
        "DecisionConflict",
        "Outcome",
        "artifact_path",
        "clear_decision",
        "evaluate",
        "publish_decision",
    ),
    "._decision.unit": ("AllocationUnit", "InvalidIdentityError"),
    "._launcher.backend": ("BACKEND_NAME", "register"),
    "._launcher.check": ("SegmentHealthCheck", "get_segment_health_check"),
    "._launcher.handler": ("SegmentHealthRendezvousHandler",),
    "._launcher.markers": ("ReplacementGroupMarkers",),
}
_LAZY = {name: module for module, names in _LAZY_MODULES.items() for name in names}


def _public(value: Any) -> Any:
    """``value``; an exception class named by this package: tracebacks name the public
    package, not the internal module that defines it."""
    if isinstance(value, type) and issubclass(value, Exception):
        value.__module__ = __name__
    return value


for _exception in (SegmentHealthError, ConfigurationError, UnhealthyNodeException):
    _public(_exception)
del _exception


def __getattr__(name: str) -> Any:
    """Load ``name``'s module; bind the public names of every module loaded (PEP 562)."""
    try:
        module_name = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    importlib.import_module(module_name, __name__)
    for loaded, names in _LAZY_MODULES.items():  # e.g. unit's with artifact's: its errors
        module = sys.modules.get(__name__ + loaded)
        for public in names:
            if hasattr(module, public):  # not yet if the module is still being imported
                globals()[public] = _public(getattr(module, public))
    return globals()[name]


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
