"""What a ``publish-drained`` pass did, as typed events: one line each in ``--audit-log``.

The audit file is public (docs/operators.md, "one JSON line per ..."): each line is one JSON object
with sorted keys, ``time`` (ISO 8601 UTC, to the second), ``event`` (an
:class:`EventKind` token), ``job_id``, ``producer_id`` and the fields of its kind:

=================================================  ===================================
``event``                                          its other fields
=================================================  ===================================
``published``, ``updated``, ``cleared``,           ``task_id``, ``path``, ``text`` (the
``stale-cleared``                                  decision written, ``""`` when emptied)
``write-failed``                                   ``task_id``, ``path``, ``intended``
                                                   (the transition, or ``read``), ``error``
``conflict``                                       ``task_id``, ``path``, ``intended``,
                                                   ``found`` (what the file holds instead)
``unreadable``                                     ``task_id``, ``path``, ``error``
``pass-failed``                                    ``error``, ``failing_since`` (ISO time)
=================================================  ===================================

:class:`AuditEvent` refuses a field its kind does not carry and a missing one, so a line
always has exactly its kind's fields. Standard library only.
"""

from __future__ import annotations

import datetime
import enum
import json
from dataclasses import dataclass, field
from typing import Literal, overload

__all__ = ["READ", "TRANSITIONS", "AuditEvent", "EventKind", "PassResult", "iso_time"]

#: ``intended`` of a ``write-failed`` event whose read of the decision failed.
READ: Literal["read"] = "read"


class EventKind(str, enum.Enum):
    """The ``event`` token of an audit line."""

    PUBLISHED = "published"  # a decision written where none (or an empty one) was
    UPDATED = "updated"  # this producer's decision rewritten with other nodes
    CLEARED = "cleared"  # this producer's decision emptied: the task is healthy again
    STALE_CLEARED = "stale-cleared"  # emptied after --clear-after-failing (fail open)
    WRITE_FAILED = "write-failed"  # a read or write of a decision failed or hung
    CONFLICT = "conflict"  # the decision changed since the pass read it: not written
    UNREADABLE = "unreadable"  # a decision this producer cannot read, first met
    PASS_FAILED = "pass-failed"  # Slurm failed: nothing written

    @property
    def fields(self) -> tuple[str, ...]:
        """The fields a line of this kind carries besides ``time``, ``event``,
        ``job_id`` and ``producer_id``."""
        return _FIELDS[self]


#: A decision change: what was written.
TRANSITIONS = (
    EventKind.PUBLISHED,
    EventKind.UPDATED,
    EventKind.CLEARED,
    EventKind.STALE_CLEARED,
)
_FIELDS: dict[EventKind, tuple[str, ...]] = {
    **{kind: ("task_id", "path", "text") for kind in TRANSITIONS},
    EventKind.WRITE_FAILED: ("task_id", "path", "intended", "error"),
    EventKind.CONFLICT: ("task_id", "path", "intended", "found"),
    EventKind.UNREADABLE: ("task_id", "path", "error"),
    EventKind.PASS_FAILED: ("error", "failing_since"),
}
_OPTIONAL = ("task_id", "path", "text", "intended", "found", "error", "failing_since")


@overload
def iso_time(when: float) -> str: ...
@overload
def iso_time(when: None) -> None: ...
def iso_time(when: float | None) -> str | None:
    """``when`` (seconds since the epoch) as an ISO 8601 UTC time to the second;
    ``None`` stays ``None``."""
    if when is None:
        return None
    return datetime.datetime.fromtimestamp(when, datetime.timezone.utc).isoformat(
        timespec="seconds"
    )


@dataclass(frozen=True)
class AuditEvent:
    """One transition or failure of a pass.

    Attributes:
        kind: what happened. job_id, producer_id: whose.
        task_id, path: the task and its decision file (every kind but ``pass-failed``).
        text: the decision written, without its newline (transitions).
        intended: the transition that was not made, or :data:`READ` (``write-failed``,
            ``conflict``).
        found: the first line of what the file holds instead, or its kind (``conflict``).
        error: what failed (``write-failed``, ``unreadable``, ``pass-failed``).
        failing_since: since when passes fail, seconds since 1970 (``pass-failed``).

    Raises:
        ValueError: a field is given that ``kind`` does not carry, or one it carries is
            missing (:attr:`EventKind.fields`).
    """

    kind: EventKind
    job_id: str
    producer_id: str
    task_id: str | None = None
    path: str | None = None
    text: str | None = None
    intended: EventKind | Literal["read"] | None = None
    found: str | None = None
    error: str | None = None
    failing_since: float | None = None

    def __post_init__(self) -> None:
        given = {name for name in _OPTIONAL if getattr(self, name) is not None}
        if given != set(self.kind.fields):
            raise ValueError(
                f"an audit event {self.kind.value} carries {', '.join(self.kind.fields)}, "
                f"not {', '.join(sorted(given)) or 'nothing'}"
            )

    def as_record(self) -> dict[str, str]:
        """The audit line's fields but ``time``: ``event``, ``job_id``, ``producer_id``
        and those of its kind, each as the text written."""
        record = {"event": self.kind.value, "job_id": self.job_id, "producer_id": self.producer_id}
        for name in self.kind.fields:
            value = getattr(self, name)
            if name == "failing_since":
                value = iso_time(value)
            elif isinstance(value, EventKind):
                value = value.value
            record[name] = value
        return record

    def to_json(self, time: str) -> str:
        """The audit line at ``time`` (an :func:`iso_time`): sorted keys, a newline."""
        return json.dumps({"time": time, **self.as_record()}, sort_keys=True) + "\n"


@dataclass
class PassResult:
    """What one pass saw and did.

    Attributes:
        error: why the pass wrote nothing (a Slurm failure), else ``None``.
        unavailable: nodes of the job that count as unavailable, as seen.
        pending: nodes of the job in a watched state that has not counted yet.
        running: how many tasks of the job were running.
        events: the audit records of the transitions and failures.
        unchanged: running tasks whose decision needed no write.
        warnings: problems that did not fail the pass (a failed directory sync, an
            unreadable decision met for the first time, a state file not saved).
    """

    error: str | None = None
    unavailable: list[str] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)
    running: int = 0
    events: list[AuditEvent] = field(default_factory=list)
    unchanged: int = 0
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """The pass completed and every write succeeded."""
        return self.error is None and not any(
            event.kind is EventKind.WRITE_FAILED for event in self.events
        )
