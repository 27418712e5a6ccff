"""A simulated launcher's TorchElastic telemetry, in two JSON-lines files.

When a job records telemetry (:attr:`.spec.JobSpec.record_telemetry`), each launcher
runs its agent through :mod:`.agent`, which calls :func:`route_to_files` before
torchrun starts: torch's rendezvous events (the dynamic rendezvous's own and the
segment-health wrapper's, :mod:`nvrx_seghealth._launcher.events`) go to one file, the
``nvrx_seghealth`` metrics to another, as an operator's launcher would route them to a
collector. The harness reads them back with :func:`read_events` and
:func:`read_metrics`.

Lines: ``{"time": <epoch s>, "event": <torch's RdzvEvent as JSON>}`` and
``{"time": <epoch s>, "group": ..., "name": ..., "value": ...}``.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._logfmt import parse_fields

__all__ = [
    "EVENTS_FILE_ENV",
    "METRICS_FILE_ENV",
    "RecordedEvent",
    "RecordedMetric",
    "read_events",
    "read_metrics",
    "route_to_files",
]

#: Environment variables naming one launcher's events and metrics files.
EVENTS_FILE_ENV = "NVRX_SIM_EVENTS_FILE"
METRICS_FILE_ENV = "NVRX_SIM_METRICS_FILE"

#: This package's events (their names start with it).
_OURS = "nvrx_seghealth."


@dataclass(frozen=True)
class RecordedEvent:
    """One recorded rendezvous event (torch's ``RdzvEvent`` fields) and when it was.

    Attributes:
        time: wall-clock time of the recording.
        name, run_id, message, hostname, pid, node_state, rank, local_id: torch's fields.
    """

    time: float
    name: str
    run_id: str
    message: str
    hostname: str
    pid: int
    node_state: str
    rank: int | None
    local_id: int | None

    @property
    def ours(self) -> bool:
        """Recorded by the segment-health wrapper (not by torch's dynamic rendezvous)."""
        return self.name.startswith(_OURS)

    @property
    def decision(self) -> str:
        """The wrapper's event name without its prefix (``excluded``), else the name."""
        return self.name.removeprefix(_OURS)

    @property
    def fields(self) -> dict[str, str]:
        """The wrapper's fields from ``message`` (``by``, ``reason``, ...)."""
        return parse_fields(self.message) if self.ours else {}


@dataclass(frozen=True)
class RecordedMetric:
    """One metric data point put through ``torch.distributed.elastic.metrics``."""

    time: float
    group: str
    name: str
    value: Any


def route_to_files(events_path: Path, metrics_path: Path) -> None:
    """In this process: torch's rendezvous events to ``events_path``, the
    ``nvrx_seghealth`` metrics to ``metrics_path``. Call it before torch records any
    event (torch builds its events logger once, at the first event)."""
    from torch.distributed.elastic import metrics
    from torch.distributed.elastic.events import handlers

    from .._launcher.events import EVENT_DESTINATION, METRIC_GROUP

    events = logging.FileHandler(events_path, delay=True)
    events.setFormatter(_EventLine())
    handlers._log_handlers[EVENT_DESTINATION] = events

    class MetricLines(metrics.MetricHandler):
        def emit(self, metric_data: metrics.MetricData) -> None:
            line = json.dumps(
                {
                    "time": metric_data.timestamp,
                    "group": metric_data.group_name,
                    "name": metric_data.name,
                    "value": metric_data.value,
                }
            )
            with open(metrics_path, "a") as out:
                out.write(line + "\n")

    metrics.configure(MetricLines(), METRIC_GROUP)


class _EventLine(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return json.dumps({"time": record.created, "event": json.loads(record.getMessage())})


def _lines(path: Path | None) -> list[dict[str, Any]]:
    if path is None or not path.exists():
        return []
    lines = path.read_text(errors="replace").splitlines()
    # The last line may be half written while the launcher runs.
    return [json.loads(line) for line in lines if line.endswith("}")]


def read_events(path: Path | None) -> list[RecordedEvent]:
    """The events recorded in ``path`` so far (none when it does not exist)."""
    return [
        RecordedEvent(
            time=line["time"],
            **{
                key: line["event"][key]
                for key in ("name", "run_id", "message", "hostname", "pid", "node_state",
                            "rank", "local_id")
            },
        )
        for line in _lines(path)
    ]  # fmt: skip


def read_metrics(path: Path | None) -> list[RecordedMetric]:
    """The metric data points recorded in ``path`` so far."""
    return [RecordedMetric(**line) for line in _lines(path)]
