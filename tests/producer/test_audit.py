"""The audit file's lines (``publish-drained --audit-log``): a public format, pinned here
field by field, one line per event kind."""

from __future__ import annotations

import json
from typing import Any

import pytest

from nvrx_seghealth._producer.audit import READ, AuditEvent, EventKind

WHEN = "2024-05-01T12:00:00+00:00"
COMMON = {"time": WHEN, "job_id": "500", "producer_id": "ops"}
TASK: dict[str, Any] = {"task_id": "3", "path": "/d/segment_health_check.500.3"}


@pytest.mark.parametrize(
    "kind,fields,line",
    [
        *(
            (kind, {"text": "x"}, {"event": kind.value, **TASK, "text": "x"})
            for kind in (
                EventKind.PUBLISHED,
                EventKind.UPDATED,
                EventKind.CLEARED,
                EventKind.STALE_CLEARED,
            )
        ),
        (
            EventKind.WRITE_FAILED,
            {"intended": EventKind.CLEARED, "error": "no space"},
            {"event": "write-failed", **TASK, "intended": "cleared", "error": "no space"},
        ),
        (
            EventKind.WRITE_FAILED,
            {"intended": READ, "error": "EIO"},
            {"event": "write-failed", **TASK, "intended": "read", "error": "EIO"},
        ),
        (
            EventKind.CONFLICT,
            {"intended": EventKind.PUBLISHED, "found": "marked by ops"},
            {"event": "conflict", **TASK, "intended": "published", "found": "marked by ops"},
        ),
        (
            EventKind.UNREADABLE,
            {"error": "EACCES"},
            {"event": "unreadable", **TASK, "error": "EACCES"},
        ),
    ],
)
def test_each_kind_writes_exactly_its_fields(kind, fields, line):
    event = AuditEvent(kind, "500", "ops", **TASK, **fields)
    text = event.to_json(WHEN)
    assert text.endswith("\n") and text.count("\n") == 1
    assert json.loads(text) == {**COMMON, **line}
    assert list(json.loads(text)) == sorted(json.loads(text))


def test_a_failed_pass_writes_since_when_as_an_iso_time():
    event = AuditEvent(
        EventKind.PASS_FAILED, "500", "ops", error="sinfo: exit 1", failing_since=1714564800.0
    )
    assert json.loads(event.to_json(WHEN)) == {
        **COMMON,
        "event": "pass-failed",
        "error": "sinfo: exit 1",
        "failing_since": WHEN,
    }


@pytest.mark.parametrize(
    "kind,fields",
    [
        (EventKind.PUBLISHED, {**TASK}),  # no text
        (EventKind.UNREADABLE, {**TASK, "error": "EIO", "text": "x"}),  # a field too many
        (EventKind.PASS_FAILED, {"error": "x"}),  # no failing_since
    ],
)
def test_an_event_without_its_kinds_fields_is_refused(kind, fields):
    with pytest.raises(ValueError, match=kind.value):
        AuditEvent(kind, "500", "ops", **fields)
