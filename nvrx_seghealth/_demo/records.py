"""What each simulated worker records about itself, and how the harness reads it back.

One JSON file per worker process, ``<results>/<launcher>.<pid>.json``, replaced
atomically each time the worker reaches a milestone (started, joined the process
group, each step done, finished), so the harness can watch a round form while it runs.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["LAUNCHER_ENV", "WorkerRecord", "read_records", "write_record"]

#: Environment variable naming a worker's launcher (set by the harness for each agent,
#: inherited by its workers).
LAUNCHER_ENV = "NVRX_SIM_LAUNCHER"


@dataclass(frozen=True)
class WorkerRecord:
    """Facts one worker process knows about itself.

    Attributes:
        launcher: the label of the launcher that started it (``task1.proc0``).
        array_task: ``SLURM_ARRAY_TASK_ID``, ``None`` in a regular job.
        procid: ``SLURM_PROCID`` of its launcher.
        pid: the worker's process id.
        rank: global rank. world_size: global world size.
        group_rank: its launcher's rank in the rendezvous.
        group_world_size: launchers in the rendezvous round.
        round: the rendezvous round that formed this world (0-based); ``None`` when
            torch's rendezvous state could not be read (:mod:`.rendezvous_state`).
        restart_count: ``TORCHELASTIC_RESTART_COUNT`` (failure restarts only;
            membership changes do not count).
        started_at: wall-clock time the worker started.
        initialized_at: when the gloo process group formed, else ``None``.
        computed_at: when its collective-free compute phase ended, else ``None`` (no
            such phase in its round, or it was stopped during it).
        steps_done: the all-reduce steps it has completed so far.
        finished_at: when all steps completed, else ``None``.
        all_reduce_ok: every all-reduce summed to ``world_size``; ``None`` until done.
    """

    launcher: str
    array_task: int | None
    procid: int
    pid: int
    rank: int
    world_size: int
    group_rank: int
    group_world_size: int
    round: int | None
    restart_count: int
    started_at: float
    initialized_at: float | None = None
    computed_at: float | None = None
    steps_done: int = 0
    finished_at: float | None = None
    all_reduce_ok: bool | None = None

    @property
    def completed(self) -> bool:
        """Finished every step with correct all-reduce results."""
        return self.finished_at is not None and bool(self.all_reduce_ok)


def write_record(directory: Path, record: WorkerRecord) -> None:
    """Atomically (re)write ``record`` in ``directory``."""
    path = directory / f"{record.launcher}.{record.pid}.json"
    temp = path.with_suffix(".tmp")
    temp.write_text(json.dumps(dataclasses.asdict(record)))
    os.replace(temp, path)


def read_records(directory: Path) -> list[WorkerRecord]:
    """Every record in ``directory``, oldest start first."""
    records = [WorkerRecord(**json.loads(p.read_text())) for p in directory.glob("*.json")]
    return sorted(records, key=lambda r: (r.started_at, r.launcher))
