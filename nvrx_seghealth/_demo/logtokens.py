"""The stable tokens in a simulated launcher's log, read without matching its wording.

A launcher's log holds its torchrun agent's output and its workers'. Two kinds of line
carry logfmt fields (:func:`~nvrx_seghealth._logfmt.parse_fields`) meant to be read back:

- the segment-health wrapper's exclusion, one ERROR line per excluded launcher:
  ``Segment health check: <message>; reason=<token> after_joining=<true|false>
  job_id=<j> task_id=<t>``, ending with the fields of
  :meth:`~nvrx_seghealth._errors.UnhealthyNodeException.fields`, whose ``reason`` is an
  :class:`~nvrx_seghealth._errors.ExclusionReason`;
- the simulated worker (:mod:`.worker`) taking its broken node down:
  ``fault=broken-node`` (:data:`FAULT_FIELD`, :data:`BROKEN_NODE_FAULT`).

The human text around the fields may change freely.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from .._errors import ExclusionReason
from .._logfmt import parse_fields

__all__ = ["BROKEN_NODE_FAULT", "FAULT_FIELD", "Exclusion", "broke_its_node", "exclusion"]

#: The field of the worker's ERROR line when it takes its broken node down, and its
#: value there.
FAULT_FIELD = "fault"
BROKEN_NODE_FAULT = "broken-node"

_REASONS = {reason.value: reason for reason in ExclusionReason}
_BOOLEANS = {"true": True, "false": False}


@dataclass(frozen=True)
class Exclusion:
    """How the wrapper excluded a launcher, as its ERROR line's fields say.

    Attributes:
        reason: what excluded it.
        after_joining: it had joined the round it left (a marker seen only once the
            inner rendezvous returned); ``False``: it never joined.
    """

    reason: ExclusionReason
    after_joining: bool


def _fields(log: str) -> Iterator[dict[str, str]]:
    for line in log.splitlines():
        if "=" in line:
            yield parse_fields(line)


def exclusion(log: str) -> Exclusion | None:
    """The first exclusion recorded in ``log``, ``None`` if there is none.

    A line counts when its ``reason`` is an :class:`~nvrx_seghealth._errors.ExclusionReason`
    token and its ``after_joining`` is ``true`` or ``false``.
    """
    for fields in _fields(log):
        reason = _REASONS.get(fields.get("reason", ""))
        after_joining = _BOOLEANS.get(fields.get("after_joining", ""))
        if reason is not None and after_joining is not None:
            return Exclusion(reason, after_joining)
    return None


def broke_its_node(log: str) -> bool:
    """Whether a worker in ``log`` took its broken node down (``fault=broken-node``)."""
    return any(fields.get(FAULT_FIELD) == BROKEN_NODE_FAULT for fields in _fields(log))
