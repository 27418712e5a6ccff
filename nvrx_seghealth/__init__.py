"""Keep an unhealthy Slurm allocation unit out of PyTorch elastic rendezvous.

An external producer writes a *decision* file for an allocation unit: an array task, or
a whole regular job. Before each rendezvous, the unit's launcher with ``SLURM_PROCID=0``
stats it. A non-empty regular file keeps the unit out of training; anything unreadable
lets it proceed with a WARNING. docs/concepts.md defines the words used here.

The public API is what this module exports, pinned by tests/test_public_api.py:

- the rendezvous handler and its backend;
- the consumer's check, :class:`Decision` and :class:`Outcome`;
- the producer's calls;
- the exceptions, which all derive from :class:`SegmentHealthError`.

Every other module is internal. ``import nvrx_seghealth`` does not import torch.

The names are loaded when first used (PEP 562). torch loads the backend's entry point,
and so this package, in every process that imports its rendezvous package. Most of those
need the backend only. The exceptions are named by this package: a traceback says
``nvrx_seghealth.UnhealthyNodeException``, not the internal module that defines it.
"""

from __future__ import annotations

import importlib
import sys
import warnings
from typing import TYPE_CHECKING, Any

from ._errors import (
    ConfigurationError,
    ExclusionReason,
    SegmentHealthError,
    UnhealthyNodeException,
)
from ._logfmt import parse_fields

if TYPE_CHECKING:
    from ._decision.decision_file import (
        DEFAULT_STAT_TIMEOUT,
        Decision,
        DecisionConflict,
        Outcome,
        clear_decision,
        decision_file_path,
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
    "clear_decision",
    "decision_file_path",
    "evaluate",
    "get_segment_health_check",
    "parse_fields",
    "publish_decision",
    "register",
]

#: The modules of the names loaded when first used, and their public names.
_LAZY_MODULES = {
    "._decision.decision_file": (
        "DEFAULT_STAT_TIMEOUT",
        "Decision",
        "DecisionConflict",
        "Outcome",
        "clear_decision",
        "decision_file_path",
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

#: Old names that still work for one release, each with a DeprecationWarning, and the
#: public name that replaces it. They are not in ``__all__``: ``import *`` skips them.
_DEPRECATED = {"artifact_path": "decision_file_path"}


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
    """Load ``name``'s module; bind the public names of every module loaded (PEP 562).

    A deprecated name warns on every use and returns its new name's value; it is never
    bound, so the next use warns too.
    """
    if name in _DEPRECATED:
        new = _DEPRECATED[name]
        warnings.warn(
            f"nvrx_seghealth.{name} is deprecated and will be removed in the next release; "
            f"use nvrx_seghealth.{new}",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(sys.modules[__name__], new)
    try:
        module_name = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    importlib.import_module(module_name, __name__)
    for loaded, names in _LAZY_MODULES.items():  # e.g. unit's with decision_file's: its errors
        module = sys.modules.get(__name__ + loaded)
        for public in names:
            if hasattr(module, public):  # not yet if the module is still being imported
                globals()[public] = _public(getattr(module, public))
    return globals()[name]


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
