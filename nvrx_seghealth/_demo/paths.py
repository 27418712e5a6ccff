"""Where a simulated job keeps its files, all under one work directory."""

from __future__ import annotations

from pathlib import Path

__all__ = ["RunPaths", "read_log"]


class RunPaths:
    """The directories of one simulated job, created on construction.

    Attributes:
        workdir: the root. logs: one log per launcher plus the store's.
        decisions: the decision directory. results: worker records.
        elastic: torchrun's own ``--log-dir`` (error files), one sub-directory per launcher.
        telemetry: each launcher's recorded events and metrics (:mod:`.telemetry`).
    """

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.logs = workdir / "logs"
        self.decisions = workdir / "decisions"
        self.results = workdir / "results"
        self.elastic = workdir / "torchelastic"
        self.telemetry = workdir / "telemetry"
        for directory in (self.logs, self.decisions, self.results, self.elastic, self.telemetry):
            directory.mkdir(parents=True, exist_ok=True)


def read_log(path: Path) -> str:
    """The text of a log file so far; empty when it does not exist yet."""
    return path.read_text(errors="replace") if path.exists() else ""
