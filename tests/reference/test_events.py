"""The events and metrics page (docs/reference/events.md) is what the recorder records.

- The decisions table names every :class:`EventName`, and no other.
- Each decision the recorder builds alone carries only fields its row names.
- ``trigger``, ``when``, the fail-open reasons and the metrics are the code's tokens.
"""

from __future__ import annotations

import re

import pytest

from harness.docs import ROOT
from harness.telemetry import captured
from nvrx_seghealth import AllocationUnit, Decision, ExclusionReason, Outcome
from nvrx_seghealth._errors import Exclusion, When
from nvrx_seghealth._launcher import events
from nvrx_seghealth._launcher.events import (
    DecisionRecorder,
    EventName,
    FailOpenReason,
    MetricName,
    parse_fields,
)

PAGE = "docs/reference/events.md"
_CODE = re.compile(r"`([^`]+)`")


class _Run:
    """What the recorder asks of the handler it wraps: the run id."""

    def get_run_id(self) -> str:
        return "run-1"


def _table(header: str) -> dict[str, list[str]]:
    text = (ROOT / PAGE).read_text()
    lines = text[text.index(header) :].split("\n\n", 1)[0].splitlines()[2:]
    rows = {}
    for line in lines:
        first, *cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        rows[first.strip("`")] = cells
    return rows


def _decisions() -> dict[str, list[str]]:
    return _table("| `name` | when | fields after `job_id`, `task_id` |")


def test_the_decisions_table_names_every_event():
    assert set(_decisions()) == {name.value for name in EventName}


def _recorded() -> dict[str, set[str]]:
    """The fields of each decision as the recorder builds it, without its caller's."""
    recorder = DecisionRecorder(_Run())  # type: ignore[arg-type]
    recorder.unit = AllocationUnit("5", "1", is_array=True)
    path = "/shared/job/segment_health_check.5.1"
    with captured() as telemetry:
        recorder.installed("/shared/job")
        recorder.judged(Decision(path, Outcome.CLEAR, "empty", 0), 0.001, events.ATTEMPT)
        recorder.marker_published("group-0")
        recorder.verdict_published("healthy", 1, True, events.REQUEST)
        recorder.verdict_waited("healthy", 1, 0.5)
        recorder.verdict_waited(None, 2, 30.0)  # no verdict: a fail-open
        recorder.world_restart(True, 1.5)
        recorder.excluded(
            Exclusion(ExclusionReason.DECISION_FILE, When.AFTER_JOINING, "x", path=path, size=3)
        )
    found: dict[str, set[str]] = {}
    for event in telemetry.ours():
        fields = set(parse_fields(event.message)) - {"job_id", "task_id"}
        found.setdefault(event.name, set()).update(fields)
    return found


def test_each_decision_carries_only_fields_its_row_names():
    recorded = _recorded()
    assert set(recorded) == {name.value for name in EventName}, "a decision was not recorded"
    rows = _decisions()
    for name, fields in recorded.items():
        named = set(_CODE.findall(rows[name][1]))
        assert fields <= named, f"{name}: fields the page does not name: {fields - named}"


def test_trigger_when_and_reasons_are_the_code_s():
    text = (ROOT / PAGE).read_text()
    sentence = text[text.index("`trigger` is") :].split(". ", 1)[0]
    triggers = {events.ATTEMPT, events.REQUEST, events.JOINED, events.WATCH}
    assert set(_CODE.findall(sentence)) - {"trigger"} == triggers
    excluded = _decisions()[EventName.EXCLUDED.value][1]
    when = {member.token for member in When}
    assert when <= set(_CODE.findall(excluded))
    assert {reason.value for reason in ExclusionReason} <= set(_CODE.findall(excluded))
    fail_open = _decisions()[EventName.FAIL_OPEN.value][1]
    reasons = {reason.value for reason in FailOpenReason}
    assert reasons <= set(_CODE.findall(fail_open))


@pytest.mark.parametrize("metric", list(MetricName))
def test_the_metrics_table_is_the_code_s(metric):
    rows = _table("| name | value |")
    if metric is MetricName.FAIL_OPEN:
        (cell,) = rows[f"{metric.value}.<reason>"]
        listed = set(_CODE.findall(cell))
        assert listed == {f"{metric.value}.{reason.value}" for reason in FailOpenReason}
    else:
        assert metric.value in rows
    assert len(rows) == len(MetricName)
