"""What a launcher tells: torch's rendezvous events and this package's metrics routed to
lists, as an application configures torch's telemetry (its events destination and
``metrics.configure``), and the stable tokens of an exclusion's ERROR line.

torch builds its events logger once, with the handler it finds at the first event;
:func:`captured` replaces both and restores torch's defaults afterwards.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from torch.distributed.elastic import events as torch_events
from torch.distributed.elastic import metrics as torch_metrics
from torch.distributed.elastic.events import RdzvEvent, handlers

from nvrx_seghealth import ExclusionReason, UnhealthyNodeException
from nvrx_seghealth._errors import When
from nvrx_seghealth._launcher.events import EVENT_DESTINATION, METRIC_GROUP, parse_fields
from nvrx_seghealth._logfmt import format_fields

__all__ = ["Telemetry", "captured", "exclusion_tokens", "routed"]


def exclusion_tokens(
    job_id: str,
    task_id: str,
    reason: str = "decision-file",
    *,
    after_joining: bool = False,
    when: When | None = None,
) -> str:
    """The stable tokens an exclusion's ERROR line carries (``reason=... job_id=...``);
    ``when`` defaults to what ``after_joining`` says (right after joining, or before)."""
    if when is None:
        when = When.AFTER_JOINING if after_joining else When.BEFORE_JOINING
    error = UnhealthyNodeException(
        "",
        job_id=job_id,
        task_id=task_id,
        reason=ExclusionReason(reason),
        after_joining=when.joined,
        when=when,
    )
    return format_fields(error.fields())


class _EventList(logging.Handler):
    def __init__(self, events: list[RdzvEvent]) -> None:
        super().__init__()
        self.events = events

    def emit(self, record: logging.LogRecord) -> None:
        self.events.append(RdzvEvent.deserialize(record.getMessage()))


class _MetricList(torch_metrics.MetricHandler):
    def __init__(self, metrics: list[torch_metrics.MetricData]) -> None:
        self.metrics = metrics

    def emit(self, metric_data: torch_metrics.MetricData) -> None:
        self.metrics.append(metric_data)


@dataclass
class Telemetry:
    """Everything recorded while the capture was on."""

    events: list[RdzvEvent] = field(default_factory=list)
    metrics: list[torch_metrics.MetricData] = field(default_factory=list)

    def ours(self, task: str | None = None) -> list[RdzvEvent]:
        """This package's events (of array task ``task`` when given), in order."""
        return [
            e
            for e in self.events
            if e.name.startswith("nvrx_seghealth.")
            and (task is None or parse_fields(e.message).get("task_id") == task)
        ]

    def names(self, task: str | None = None) -> list[str]:
        return [e.name.removeprefix("nvrx_seghealth.") for e in self.ours(task)]

    def fields(self, name: str, task: str | None = None) -> list[dict[str, str]]:
        """The fields of every ``nvrx_seghealth.<name>`` event."""
        return [
            parse_fields(e.message) for e in self.ours(task) if e.name == f"nvrx_seghealth.{name}"
        ]

    def values(self, name: str) -> list[object]:
        """The values put for metric ``name`` of this package's group."""
        return [m.value for m in self.metrics if m.group_name == METRIC_GROUP and m.name == name]


@contextmanager
def routed(events: logging.Handler, metrics: torch_metrics.MetricHandler) -> Iterator[None]:
    """torch's rendezvous events to ``events``, this package's metrics to ``metrics``."""
    original = handlers._log_handlers[EVENT_DESTINATION]
    torch_events._events_loggers.pop(EVENT_DESTINATION, None)
    handlers._log_handlers[EVENT_DESTINATION] = events
    torch_metrics.configure(metrics, METRIC_GROUP)
    try:
        yield
    finally:
        torch_metrics.configure(torch_metrics.NullMetricHandler(), METRIC_GROUP)
        handlers._log_handlers[EVENT_DESTINATION] = original
        logger = torch_events._events_loggers.pop(EVENT_DESTINATION, None)
        if logger is not None:
            logger.removeHandler(events)


@contextmanager
def captured() -> Iterator[Telemetry]:
    """Everything recorded inside the block, in :class:`Telemetry`."""
    telemetry = Telemetry()
    with routed(_EventList(telemetry.events), _MetricList(telemetry.metrics)):
        yield telemetry
