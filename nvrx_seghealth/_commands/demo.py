"""``nvrx-seghealth demo``: a simulated job array on this machine, and what it shows.

The command reads its options, picks one of three jobs and prints what each did. The
default job marks tasks before launch. ``--compare`` runs it ungated and gated, side by
side. ``--watch S`` marks tasks while the job trains, without and with the watch. The
exit code is 0 only when the (gated, watched) run's outcome matches the contract
(:func:`~.._demo.outcome.check_outcome`). A stop signal ends every process of the job,
and the exit code is 128 plus its number. The jobs and their report live in
:mod:`nvrx_seghealth._demo`; :data:`DESCRIPTION` is the ``--help`` text.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .._demo import JobSpec, SimulatedJob, render_report
from .._demo.comparison import Comparison, Variant
from .._demo.demojobs import MARK_AFTER_STEPS, compare_spec, demo_spec, watch_spec
from .._demo.outcome import check_outcome
from .._demo.report import render_decisions, render_timeline
from .._producer.schedule import Stopped, stop_signals
from .._settings.durations import WATCH_INTERVAL, validate_seconds
from .arguments import OneOf, add_command, option

__all__ = ["compare_spec", "demo_spec", "register", "run", "watch_spec"]

#: Bound for the whole simulated job (a default demo takes 20-40 s on two cores).
JOB_TIMEOUT = 300.0
#: The signals that stop the demo: Ctrl-C, ``kill``, the terminal closed.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


SUMMARY = "run a small simulated job array with a task marked unhealthy"
#: The command's ``--help`` description.
DESCRIPTION = """
nvrx-seghealth demo: watch the segment health check keep a marked task out.

Runs a small simulated Slurm job array on this machine: real torchrun agents on
127.0.0.1 using the segment-health rendezvous backend, a rendezvous store outside
every task, srun --kill-on-bad-exit=1 per task, and decision files for the marked
tasks. It shows progress, then a report, and exits 0 only when the outcome matches the
contract: marked tasks absent from the final world, healthy tasks in it, job completed.

With --compare it runs the same job twice, ungated (plain c10d: nothing reads the
decision files) and gated (segment-health), the marked tasks' nodes failing as a
drained node's would, and shows what the gate saves: rounds, time to a healthy world,
who trained in which round, and each launcher's timeline. The exit code is still the
gated run's: 0 only when its outcome matches the contract.

With --watch SECONDS it runs the same job twice on segment-health, the marked tasks in
the first world and their decision files written while that world trains: without the
watch (the job trains on them to the end of its bounded first world) and with
segment_health_check_watch_interval=SECONDS (the next world forms without them within
about SECONDS plus a few). It shows each launcher's timeline and the time from the
decision to the next world. The exit code is the watch run's: 0 only when its outcome
matches the contract.

SIGINT (Ctrl-C), SIGTERM or SIGHUP stops the demo: every process of the simulated job is
stopped, its temporary folder removed (a --keep-logs folder is kept), one line says so on
stderr, and the exit code is 128 plus the signal's number (130 for Ctrl-C). A signal
this process ignored when it started (nohup's SIGHUP) stays ignored.
"""
OPTIONS = (
    option("--tasks", type=int, default=3, help="array tasks (default: 3)"),
    option("--nodes-per-task", type=int, default=2, help="launchers per task (default: 2)"),
    option(
        "--mark",
        type=int,
        nargs="*",
        default=[1],
        metavar="TASK",
        help="array task ids to mark unhealthy before launch (default: 1; none: --mark)",
    ),
    option(
        "--spares",
        type=int,
        default=1,
        help="tasks beyond what the job needs (default: 1); the job needs TASKS - SPARES",
    ),
    option(
        "--keep-logs",
        type=Path,
        metavar="DIR",
        help="keep logs, decisions and worker records in DIR (new or empty); by default "
        "they go to a temporary directory, removed when the outcome is as expected",
    ),
    OneOf(
        (
            option(
                "--compare",
                action="store_true",
                help="run the job ungated (plain c10d) and gated (segment-health), the marked "
                "tasks' nodes failing, and show what the gate saves (about a minute on two "
                "cores; with --keep-logs, DIR/comparison.json holds the numbers)",
            ),
            option(
                "--watch",
                type=str,
                metavar="SECONDS",
                help="write the marked tasks' decisions while the job trains, and run the job "
                "without and with the watch at this interval "
                "(segment_health_check_watch_interval) side by side (about a minute on two "
                "cores; with --keep-logs, DIR/comparison.json holds the numbers)",
            ),
        )
    ),
)


def register(subparsers: Any) -> None:
    """Add the ``demo`` subcommand to ``subparsers`` (from ``add_subparsers()``)."""
    add_command(subparsers, "demo", SUMMARY, DESCRIPTION, None, OPTIONS, run)


class _Elapsed(logging.Formatter):
    """``[  12.3 s] message``, counted from the formatter's creation."""

    def __init__(self) -> None:
        super().__init__()
        self.start = time.time()

    def format(self, record: logging.LogRecord) -> str:
        return f"[{record.created - self.start:6.1f} s] {record.getMessage()}"


def _show_progress() -> _Elapsed:
    """Print the harness's progress; returns the formatter (its ``start`` can be reset)."""
    formatter = _Elapsed()
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(formatter)
    logger = logging.getLogger("nvrx_seghealth._demo")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    return formatter


def run(args: argparse.Namespace) -> int:
    """Run the demo; 0 when the outcome matches the contract, 1 otherwise, 2 on bad options,
    128 + the signal's number when a stop signal ended it (see the module doc)."""
    try:
        spec = demo_spec(args.tasks, args.nodes_per_task, set(args.mark), args.spares)
        watch = None if args.watch is None else _watch_seconds(args.watch)
        _refuse_a_used_folder(args.keep_logs)
    except ValueError as error:
        print(f"nvrx-seghealth demo: {error}", file=sys.stderr)
        return 2
    workdir = args.keep_logs or Path(tempfile.mkdtemp(prefix="nvrx-seghealth-demo-"))
    workdir.mkdir(parents=True, exist_ok=True)
    keep = args.keep_logs is not None
    try:
        with stop_signals(STOP_SIGNALS):
            return _run(args, spec, watch, workdir, keep=keep)
    except Stopped as stopped:
        if keep:
            where = f"its logs: {workdir}"
        else:
            shutil.rmtree(workdir, ignore_errors=True)
            where = "its logs were removed"
        print(
            f"nvrx-seghealth demo: stopped by {stopped.signal.name}; every process of the "
            f"simulated job was stopped, {where}",
            file=sys.stderr,
        )
        return 128 + stopped.signal


def _refuse_a_used_folder(folder: Path | None) -> None:
    """Refuse a ``--keep-logs`` folder that exists and is not an empty folder.

    Raises:
        ValueError: it is not, with what to do.
    """
    if folder is not None and folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise ValueError(
            f"--keep-logs {folder} is not an empty folder: a previous run's store, logs and "
            "worker records would be read as this run's; give a new folder (nothing in it "
            "is changed)"
        )


def _run(
    args: argparse.Namespace, spec: JobSpec, watch: float | None, workdir: Path, *, keep: bool
) -> int:
    """The demo :func:`run` asked for, in ``workdir``."""
    marked = ", ".join(f"task {u}" for u in sorted(spec.marked)) or "none"
    if args.compare:
        return _compare(compare_spec(spec), workdir, marked, keep=keep)
    if watch is not None:
        return _watch(spec, watch, workdir, marked, keep=keep)
    return _marked_at_launch(spec, args.spares, workdir, marked, keep=keep)


def _marked_at_launch(spec: JobSpec, spares: int, workdir: Path, marked: str, *, keep: bool) -> int:
    """The default demo: one job, its marked tasks marked before launch; its report."""
    print(
        f"Simulated job array: {spec.tasks} tasks x {spec.nodes_per_task} nodes; the job "
        f"needs {spec.tasks - spares} tasks (--nnodes={spec.nnodes[0]}:{spec.nnodes[1]}). "
        f"Marked unhealthy: {marked}.\n"
        "Starting real torchrun agents on 127.0.0.1 (about half a minute on two cores)...\n"
    )
    _show_progress()
    with SimulatedJob(spec, workdir) as job:
        result = job.wait(timeout=JOB_TIMEOUT)
    problems = check_outcome(result)
    print(f"\n{render_report(result)}\n")
    if problems:
        print("Outcome: no healthy job came out of it:\n" + "\n".join(f"  - {p}" for p in problems))
    else:
        final = result.final_round
        assert final is not None
        print(
            f"Outcome: as the contract requires. Excluded: {marked}; final world: "
            f"{', '.join(f'task {u}' for u in final.units)}; the job completed."
        )
    where = (
        f"Logs: {result.paths.logs} (one per launcher); decisions: "
        f"{result.paths.decisions}; worker records: {result.paths.results}"
    )
    _keep_or_remove(workdir, keep or bool(problems), where)
    return 1 if problems else 0


def _keep_or_remove(workdir: Path, kept: bool, where: str) -> None:
    """Print ``where`` the kept logs are, or remove ``workdir`` and say so."""
    if kept:
        print(where)
    else:
        shutil.rmtree(workdir)
        print("Logs: removed (use --keep-logs DIR to keep them)")


#: The two runs of ``--compare``: folder name, backend, title.
_VARIANTS = (
    ("ungated", "c10d", "ungated: plain c10d"),
    ("gated", "segment-health", "gated: segment-health"),
)


def _watch_seconds(text: str) -> float:
    """``--watch``'s value: a positive interval, validated as the launcher validates it.

    Raises:
        ConfigurationError: not a number of seconds in the watch interval's range.
        ValueError: ``0`` (the watch off: nothing to compare).
    """
    seconds = validate_seconds(WATCH_INTERVAL, text, given_as="--watch")
    if not seconds:
        raise ValueError("--watch needs a positive interval in seconds (0 is the watch off)")
    return seconds


def _compare(spec: JobSpec, workdir: Path, marked: str, *, keep: bool) -> int:
    """``--compare``: both runs, their timelines, the comparison; the gated run's code."""
    print(
        f"Simulated job array: {spec.tasks} tasks x {spec.nodes_per_task} nodes; the job "
        f"needs {spec.nnodes[1] // spec.nodes_per_task} tasks "
        f"(--nnodes={spec.nnodes[0]}:{spec.nnodes[1]}). Marked unhealthy: {marked}, whose "
        "nodes fail right after they join a world.\n"
        "The same job runs twice with real torchrun agents on 127.0.0.1: ungated (plain "
        "c10d, nothing reads the decision files), then gated (segment-health): about a "
        "minute on two cores."
    )
    runs = [
        (folder, title, dataclasses.replace(spec, backend=backend))
        for folder, backend, title in _VARIANTS
    ]
    ungated, gated = _run_each(runs, workdir, lambda job: None)
    return _show(
        Comparison(ungated, gated),
        "What the gate saves (same job, same decision files)",
        workdir,
        keep=keep,
    )


def _watch(spec: JobSpec, seconds: float, workdir: Path, marked: str, *, keep: bool) -> int:
    """``--watch``: the job without and with the watch; the watch run's code."""
    print(
        f"Simulated job array: {spec.tasks} tasks x {spec.nodes_per_task} nodes; the job "
        f"needs {spec.nnodes[1] // spec.nodes_per_task} tasks "
        f"(--nnodes={spec.nnodes[0]}:{spec.nnodes[1]}). Marked unhealthy while the job "
        f"trains: {marked}, once every worker of the first world did {MARK_AFTER_STEPS} "
        "steps.\n"
        "The same job runs twice with real torchrun agents on 127.0.0.1 (segment-health): "
        f"without the watch, then with it every {seconds:g} s: about a minute on two cores."
    )
    runs = [
        ("watch-off", "watch off", watch_spec(spec, seconds, on=False)),
        ("watch-on", f"watch every {seconds:g} s", watch_spec(spec, seconds, on=True)),
    ]

    def mark(job: SimulatedJob) -> None:
        for unit in sorted(spec.marked):
            job.mark_while_training(unit, MARK_AFTER_STEPS, JOB_TIMEOUT)

    off, on = _run_each(runs, workdir, mark)
    comparison = Comparison(off, on, keys=("watch-off", "watch-on"), subject="The watch")
    return _show(
        comparison, "What the watch changes (same job, same decisions)", workdir, keep=keep
    )


def _run_each(
    runs: list[tuple[str, str, JobSpec]], workdir: Path, act: Callable[[SimulatedJob], None]
) -> list[Variant]:
    """Run each ``(folder, title, spec)`` in ``workdir/folder``, ``act`` on it once
    started, to its end."""
    progress = _show_progress()
    variants = []
    for folder, title, spec in runs:
        print(f"\n== {title} ==")
        progress.start = time.time()
        (workdir / folder).mkdir()
        with SimulatedJob(spec, workdir / folder) as job:
            try:
                act(job)
            except TimeoutError as error:
                logging.getLogger("nvrx_seghealth._demo").warning("%s", error)
            variants.append(Variant(title, job.wait(timeout=JOB_TIMEOUT)))
    return variants


def _show(comparison: Comparison, heading: str, workdir: Path, *, keep: bool) -> int:
    """Print the timelines and ``comparison``; 0 when the ``on`` run's outcome matches the
    contract. With ``keep`` or a problem, keep ``workdir`` with ``comparison.json``."""
    variants = (comparison.off, comparison.on)
    for variant in variants:
        print(f"\nTimeline, {variant.title} (seconds from launch)")
        print(render_timeline(variant.result))
    print(f"\n{render_decisions(comparison.on.result)}")
    print(f"\n{heading}\n{comparison.render()}\n")
    problems = check_outcome(comparison.on.result)
    if problems:
        print(
            f"Outcome of the {comparison.keys[1]} run: not as the contract requires:\n"
            + "\n".join(f"  - {p}" for p in problems)
        )
    else:
        print(f"Outcome of the {comparison.keys[1]} run: as the contract requires.")
    kept = keep or bool(problems)
    if kept:
        (workdir / "comparison.json").write_text(json.dumps(comparison.as_dict(), indent=2))
    keys = ",".join(comparison.keys)
    where = (
        f"Logs, decisions, worker records and telemetry: {workdir}/{{{keys}}}; "
        f"the numbers: {workdir / 'comparison.json'}"
    )
    _keep_or_remove(workdir, kept, where)
    return 1 if problems else 0
