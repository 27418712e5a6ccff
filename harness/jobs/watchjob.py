"""A job of real torchrun agents in which a decision is written while the world trains.

Array job :data:`~harness.jobs.launcherjob.ARRAY_JOB` has three units (array tasks 0, 1, 2, one
launcher each) for a world of three (``--nnodes=3:3``) and a spare, task :data:`SPARE`,
started once the first world formed (so it waits beside it, in torch's redundancy list).
The launchers meet through an ``nvrx-seghealth store-host`` on 127.0.0.1
(``is_host=false``) and run :mod:`harness.programs.watch_train` (a gloo collective every step).
Unit :data:`LAGGED`'s agent looks at its workers only every :data:`LAG_MONITOR_INTERVAL`
seconds (``--monitor-interval``): it learns of anything late, as an agent on a busy node
does. Once the spare is up, unit :data:`~harness.jobs.launcherjob.MARKED` is marked (a
producer's ``publish_decision``); with :attr:`Variant.stall`, its worker first stops calling the
collective, so every peer blocks in it until the gloo timeout. A variant may change the
shape (:attr:`Variant.units`, :attr:`Variant.spare`, :attr:`Variant.lagged`) and run some
tasks without the watch (:attr:`Variant.unwatched`).

The job then runs until a world without the marked unit formed or :attr:`Variant.window`
seconds passed since the mark, whichever is first; then its workers are told to stop
(:mod:`harness.programs.watch_train`'s stop file) and the launchers get :attr:`Variant.end_timeout`
seconds to end before the rest is stopped. :class:`Outcome` holds what every launcher
printed and how it ended. Used by ``integration/watch/`` and ``bench/watch.py``.

:func:`run_join_job` marks unit :data:`~harness.jobs.launcherjob.MARKED` while it waits in
the rendezvous; unit 0 starts, the round forms, the marked unit leaves right after joining.
:func:`run_spare_job` marks the spare while it waits, then one unit's worker fails once.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from harness.ports import free_port
from harness.programs import WATCH_TRAIN
from nvrx_seghealth._demo.rendezvous_state import RendezvousSnapshot, read_endpoint
from nvrx_seghealth._logfmt import parse_fields

from .launcherjob import (
    JOB_TIMEOUT,
    MARKED,
    StoreHost,
    launcher_env,
    mark_task,
    slurm_task,
    store_host,
)

__all__ = [
    "LAGGED",
    "LAG_MONITOR_INTERVAL",
    "MARKED",
    "SPARE",
    "UNITS",
    "Formed",
    "Outcome",
    "Variant",
    "run_job",
    "run_join_job",
    "run_spare_job",
]

#: The units of the first world, and the spare task.
UNITS = (0, 1, 2)
SPARE = 3
#: The unit whose agent learns late, and its ``--monitor-interval`` in seconds.
LAGGED = 2
LAG_MONITOR_INTERVAL = 3.0
#: Seconds the spare gets to start and wait beside the world before the mark.
SPARE_SETTLE = 5.0
#: Seconds a launcher still running at the end gets between SIGTERM and SIGKILL.
STOP_GRACE = 30.0


@dataclass(frozen=True)
class Variant:
    """One way to run the job.

    Attributes:
        name: how reports call it.
        backend: ``segment-health`` or ``c10d``.
        watch_interval: ``segment_health_check_watch_interval`` in seconds; 0: the key is
            not given (the watch is off).
        unwatched: tasks given ``segment_health_check_watch_interval=0`` whatever
            :attr:`watch_interval` (a setting that differs between launchers).
        units: the tasks of the first world (``--nnodes=N:N``, N of them).
        spare: the spare task, started once the first world formed.
        lagged: the task whose agent learns late (``None``: none).
        stall: the marked unit's worker stops calling the collective before the mark.
        gloo_timeout: the process group's timeout (``init_process_group(timeout=)``).
        max_restarts: torchrun's ``--max-restarts``.
        min_nodes: the smallest world (``--nnodes=MIN:N``); ``None``: N, the units.
        last_call: seconds a round that has its smallest world waits for more
            (``last_call_timeout``).
        sharing_off: ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`` in the launchers'
            environment (plain c10d as the segment-health backend bootstraps workers).
        fails: the task whose worker fails once (:func:`run_spare_job`; ``None``: none).
        window: the longest the job runs after the mark before its workers are told to
            stop (the job "trains on the unit to its end").
        end_timeout: seconds the launchers get to end once told to stop.
    """

    name: str
    backend: str = "segment-health"
    watch_interval: float = 0.0
    unwatched: tuple[int, ...] = ()
    units: tuple[int, ...] = UNITS
    spare: int = SPARE
    lagged: int | None = LAGGED
    stall: bool = False
    gloo_timeout: float = 120.0
    max_restarts: int = 0
    min_nodes: int | None = None
    last_call: float = 1.0
    sharing_off: bool = False
    fails: int | None = None
    window: float = 20.0
    end_timeout: float = 60.0

    def rdzv_conf(self, decisions: Path, task: int) -> str:
        """The ``--rdzv-conf`` value of ``task``'s launcher."""
        settings = ["is_host=false", f"last_call_timeout={self.last_call:g}"]
        if self.backend == "segment-health":
            settings.append(f"segment_health_check_dir={decisions}")
            interval = 0.0 if task in self.unwatched else self.watch_interval
            if interval > 0 or task in self.unwatched:
                settings.append(f"segment_health_check_watch_interval={interval:g}")
        return ",".join(settings)

    @property
    def tasks(self) -> tuple[int, ...]:
        """Every task of the job: the units, then the spare."""
        return (*self.units, self.spare)


@dataclass(frozen=True)
class Formed:
    """One worker's process group formed (``watch-train formed``)."""

    task: int
    rank: int
    tasks: tuple[int, ...]
    restart: str
    t: float


@dataclass(frozen=True)
class Outcome:
    """How one job went.

    Attributes:
        variant: how it ran.
        marked_at: when the decision was written (seconds since the epoch).
        stopped: the tasks whose launcher was still running :attr:`Variant.end_timeout`
            seconds after its workers were told to stop; it was then stopped (SIGTERM).
        returncodes: each task's launcher exit status (negative: ended by that signal).
        outputs: everything each task's launcher and its workers printed.
        markers: the replacement groups marked in the store when the job ended.
    """

    variant: Variant
    marked_at: float
    stopped: frozenset[int]
    returncodes: Mapping[int, int]
    outputs: Mapping[int, str]
    markers: tuple[str, ...]

    def formed(self) -> list[Formed]:
        """Every ``watch-train formed`` record of the job, in time order."""
        return sorted(
            (record for task, text in self.outputs.items() for record in _formed(task, text)),
            key=lambda record: record.t,
        )

    def worlds(self) -> list[tuple[int, ...]]:
        """The tasks of each world that formed (every rank reported), in the order the
        worlds formed; each world's tasks ascending. Which task gets which rank is
        torch's choice: on one host its rendezvous ranks launchers by process id, and
        process ids wrap around (at 32768 here)."""
        seen: list[tuple[int, ...]] = []
        for record in self.formed():
            tasks = tuple(sorted(record.tasks))
            if tasks not in seen:
                seen.append(tasks)
        return seen

    def starts(self, task: int) -> int:
        """How many times ``task``'s workers started and formed a process group."""
        return sum(record.task == task for record in self.formed())

    def reformed_after(self) -> float | None:
        """Seconds from the mark until every rank of the first world without the marked
        unit formed; ``None`` when none formed."""
        return _reformed_at(self.formed(), self.marked_at)

    def output_tail(self) -> dict[int, str]:
        """The end of each launcher's output, for an assertion's message."""
        return {task: text[-3000:] for task, text in self.outputs.items()}


def _formed(task: int, text: str) -> list[Formed]:
    records = []
    for line in text.splitlines():
        if line.startswith("watch-train formed "):
            fields = parse_fields(line)
            records.append(
                Formed(
                    task=task,
                    rank=int(fields["rank"]),
                    tasks=tuple(int(t) for t in fields["tasks"].split(",")),
                    restart=fields["restart"],
                    t=float(fields["t"]),
                )
            )
    return records


def _reformed_at(records: list[Formed], marked_at: float) -> float | None:
    after = [r for r in records if MARKED not in r.tasks and r.t >= marked_at]
    if not after:
        return None
    world = after[0].tasks
    ranks = [r for r in after if r.tasks == world]
    if len({r.rank for r in ranks}) < len(world):
        return None
    return max(r.t for r in ranks[: len(world)]) - marked_at


def _torchrun(variant: Variant, endpoint: str, decisions: Path, task: int) -> list[str]:
    nodes = len(variant.units)
    argv = [
        "torchrun",
        f"--nnodes={variant.min_nodes or nodes}:{nodes}",
        "--nproc-per-node=1",
        f"--rdzv-backend={variant.backend}",
        f"--rdzv-endpoint={endpoint}",
        f"--rdzv-id=watch-{variant.name}",
        f"--rdzv-conf={variant.rdzv_conf(decisions, task)}",
        f"--max-restarts={variant.max_restarts}",
    ]
    if task == variant.lagged:
        argv.append(f"--monitor-interval={LAG_MONITOR_INTERVAL:g}")
    return [*argv, str(WATCH_TRAIN)]


def _read(log: Path) -> str:
    return log.read_text(errors="replace") if log.exists() else ""


def _stop(processes: Iterable[subprocess.Popen[bytes]]) -> None:
    """Stop every launcher still running as a scheduler does: SIGTERM, so that its agent
    stops its workers (they run in sessions of their own), then SIGKILL after
    :data:`STOP_GRACE` seconds."""
    alive = [process for process in processes if process.poll() is None]
    for process in alive:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE
    for process in alive:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=max(0.1, deadline - time.monotonic()))
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


class _Launchers:
    """The launchers of one job in ``workdir``: each task's torchrun, its log, its end."""

    def __init__(self, variant: Variant, workdir: Path) -> None:
        self.variant = variant
        self.decisions = workdir / "segment-health-check"
        self.decisions.mkdir(parents=True)
        self.stop_file, self.stall_file = workdir / "stop", workdir / "stall"
        self.fail_file = workdir / "fail"
        self.logs = {task: workdir / f"task{task}.log" for task in variant.tasks}
        self.running: dict[int, subprocess.Popen[bytes]] = {}
        self._workdir = workdir

    def start(self, task: int, endpoint: str) -> None:
        variant = self.variant
        settings = {
            "WATCH_TRAIN_STOP_FILE": str(self.stop_file),
            "WATCH_TRAIN_GLOO_TIMEOUT": f"{variant.gloo_timeout:g}",
        }
        if variant.stall and task == MARKED:
            settings["WATCH_TRAIN_STALL_FILE"] = str(self.stall_file)
        if task == variant.fails:
            settings["WATCH_TRAIN_FAIL_FILE"] = str(self.fail_file)
        if variant.sharing_off:
            settings["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
        with self.logs[task].open("wb") as sink:
            self.running[task] = subprocess.Popen(
                _torchrun(variant, endpoint, self.decisions, task),
                cwd=self._workdir,
                env=launcher_env(**slurm_task(task), **settings),
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def formed(self) -> list[Formed]:
        """Every ``watch-train formed`` record so far, in time order."""
        records = [r for task, log in self.logs.items() for r in _formed(task, _read(log))]
        return sorted(records, key=lambda record: record.t)

    def ended(self) -> dict[int, int]:
        """The exit status of each launcher that has ended."""
        return {t: p.returncode for t, p in self.running.items() if p.poll() is not None}

    def over(self) -> bool:
        """Whether every launcher started has ended."""
        return len(self.ended()) == len(self.running)

    def end_when(self, store: StoreHost, marked_at: float, done: Callable[[], object]) -> Outcome:
        """:meth:`end` the job once ``done()`` is true, or :attr:`Variant.window` seconds
        after ``marked_at`` (seconds since the epoch)."""
        while time.time() - marked_at < self.variant.window and not done():
            time.sleep(0.2)
        return self.end(store, marked_at)

    def end(self, store: StoreHost, marked_at: float) -> Outcome:
        """Tell the workers to stop, give the launchers :attr:`Variant.end_timeout`
        seconds to end, and keep what they said (the rest is stopped by :meth:`stop`)."""
        self.stop_file.touch()
        end = time.monotonic() + self.variant.end_timeout
        for process in self.running.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=max(0.1, end - time.monotonic()))
        markers = tuple(store.marked_groups(f"watch-{self.variant.name}"))
        stopped = frozenset(t for t, p in self.running.items() if p.poll() is None)
        self.stop()
        return Outcome(
            variant=self.variant,
            marked_at=marked_at,
            stopped=stopped,
            returncodes={task: process.returncode for task, process in self.running.items()},
            outputs={task: _read(log) for task, log in self.logs.items()},
            markers=markers,
        )

    def stop(self) -> None:
        _stop(self.running.values())


def run_job(variant: Variant, workdir: Path) -> Outcome:
    """Run the job of the module documentation once in ``workdir``."""
    job = _Launchers(variant, workdir)
    with store_host("127.0.0.1", free_port()) as store:
        try:  # the launchers end before the store does: none of them sees it go away
            _first_world(job, store)
            job.start(variant.spare, store.endpoint)
            time.sleep(SPARE_SETTLE)
            if variant.stall:
                job.stall_file.touch()
            marked_at = time.time()
            mark_task(job.decisions)
            return job.end_when(
                store, marked_at, lambda: _reformed_at(job.formed(), marked_at) is not None
            )
        finally:
            job.stop()


def run_spare_job(variant: Variant, workdir: Path, spare: bool = True) -> Outcome:
    """Run the job in which the spare is marked while it waits, then a worker fails, once
    in ``workdir``.

    The units train; the spare starts and waits in torch's redundancy list (the world is
    full); it is marked there. Then the worker of task :attr:`Variant.fails` fails once,
    and the world re-forms: the spare may be admitted to it, as torch's rendezvous admits
    whichever node asks first. The job runs until a world of :attr:`Variant.units`
    formed after the failure, or every launcher ended, :attr:`Variant.window` seconds at
    most after the mark. Without ``spare``, only the units run, and the worker fails."""
    job = _Launchers(variant, workdir)
    run_id = f"watch-{variant.name}"
    with store_host("127.0.0.1", free_port()) as store:
        try:
            _first_world(job, store)
            if spare:
                job.start(variant.spare, store.endpoint)
                deadline = time.monotonic() + JOB_TIMEOUT
                while not _snapshot(store, run_id).spares:
                    if job.ended() or time.monotonic() > deadline:
                        raise RuntimeError(
                            f"the spare did not wait: {_read(job.logs[variant.spare])}"
                        )
                    time.sleep(0.2)
                mark_task(job.decisions, variant.spare)
            marked_at = time.time()  # the mark and the failure
            job.fail_file.touch()
            size = len(variant.units)
            return job.end_when(
                store, marked_at, lambda: _world_after(job.formed(), marked_at, size) or job.over()
            )
        finally:
            job.stop()


def _first_world(job: _Launchers, store: StoreHost) -> None:
    """Start the units of ``job``, and return once each of their workers formed."""
    for task in job.variant.units:
        job.start(task, store.endpoint)
    deadline = time.monotonic() + JOB_TIMEOUT
    while len(job.formed()) < len(job.variant.units):
        ended = job.ended()
        if ended or time.monotonic() > deadline:
            raise RuntimeError(
                f"the first world did not form (ended: {ended}): "
                f"{ {t: _read(log)[-2000:] for t, log in job.logs.items()} }"
            )
        time.sleep(0.2)


def _world_after(records: list[Formed], since: float, size: int) -> bool:
    """Whether every rank of a world of ``size`` formed at ``since`` or later."""
    ranks = {(r.tasks, r.rank) for r in records if r.t >= since and len(r.tasks) == size}
    return any(sum(t == tasks for t, _ in ranks) == size for tasks, _ in ranks)


def run_join_job(variant: Variant, workdir: Path) -> Outcome:
    """Run the job in which unit :data:`~harness.jobs.launcherjob.MARKED` is marked while it
    waits in the rendezvous (the module documentation) once in ``workdir``.

    ``variant`` has the units ``0`` and :data:`~harness.jobs.launcherjob.MARKED` and no spare
    (:attr:`Variant.spare` names no task that starts); its :attr:`Variant.last_call` must
    outlast unit 0's start. The job runs until a world formed or every launcher ended,
    :attr:`Variant.window` seconds at most after the mark."""
    job = _Launchers(variant, workdir)
    run_id = f"watch-{variant.name}"
    with store_host("127.0.0.1", free_port()) as store:
        try:
            job.start(MARKED, store.endpoint)
            deadline = time.monotonic() + JOB_TIMEOUT
            while not _snapshot(store, run_id).participants:
                if job.ended() or time.monotonic() > deadline:
                    raise RuntimeError(f"unit {MARKED} did not join: {_read(job.logs[MARKED])}")
                time.sleep(0.2)
            marked_at = time.time()
            mark_task(job.decisions)
            job.start(0, store.endpoint)
            return job.end_when(store, marked_at, lambda: job.formed() or job.over())
        finally:
            job.stop()


def _snapshot(store: StoreHost, run_id: str) -> RendezvousSnapshot:
    """What torch's rendezvous state of ``run_id`` says now (who stands or waits where)."""
    return read_endpoint("c10d", store.endpoint, run_id, datetime.timedelta(seconds=30))
