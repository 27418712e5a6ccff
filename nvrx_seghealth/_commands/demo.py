"""nvrx-seghealth demo: watch the segment health check keep a marked task out.

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
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .._demo import JobResult, JobSpec, SimulatedJob, StartAfter, render_report
from .._demo.comparison import Comparison, Variant
from .._demo.report import render_decisions, render_timeline
from .._demo.worker import BROKEN_HOW_ENV, BROKEN_TASKS_ENV

__all__ = ["check_outcome", "compare_spec", "demo_spec", "register", "run"]

#: Bound for the whole simulated job (a default demo takes 20-40 s on two cores).
JOB_TIMEOUT = 300.0

#: torch's agent logs this right before it joins the rendezvous.
_JOINING = r"Rendezvous'ing worker group"


def register(subparsers: Any) -> None:
    """Add the ``demo`` subcommand to ``subparsers`` (from ``add_subparsers()``)."""
    parser = subparsers.add_parser(
        "demo",
        help="run a small simulated job array with a task marked unhealthy",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--tasks", type=int, default=3, help="array tasks (default: 3)")
    parser.add_argument(
        "--nodes-per-task", type=int, default=2, help="launchers per task (default: 2)"
    )
    parser.add_argument(
        "--mark",
        type=int,
        nargs="*",
        default=[1],
        metavar="TASK",
        help="array task ids to mark unhealthy before launch (default: 1; none: --mark)",
    )
    parser.add_argument(
        "--spares",
        type=int,
        default=1,
        help="tasks beyond what the job needs (default: 1); the job needs TASKS - SPARES",
    )
    parser.add_argument(
        "--keep-logs",
        type=Path,
        metavar="DIR",
        help="keep logs, decisions and worker records in DIR (new or empty); by default "
        "they go to a temporary directory, removed when the outcome is as expected",
    )
    parser.add_argument(
        "--compare",
        action="store_true",
        help="run the job ungated (plain c10d) and gated (segment-health), the marked "
        "tasks' nodes failing, and show what the gate saves (about a minute on two cores; "
        "with --keep-logs, DIR/comparison.json holds the numbers)",
    )
    parser.set_defaults(func=run)


def demo_spec(tasks: int, nodes_per_task: int, marked: set[int], spares: int) -> JobSpec:
    """The demo's job: ``tasks - spares`` tasks needed, ``marked`` tasks marked.

    Each task's other launchers start once its process 0 is joining the rendezvous, so
    process 0 has checked the decision first. (Started together, a sibling can win the
    race the contract documents; the integration scenarios cover that race.)

    Raises:
        ValueError: an impossible shape, with what to change.
    """
    if tasks < 1 or nodes_per_task < 1:
        raise ValueError("--tasks and --nodes-per-task must be at least 1")
    if not 0 <= spares < tasks:
        raise ValueError(f"--spares must be between 0 and {tasks - 1} (TASKS - 1)")
    if not marked <= set(range(tasks)):
        raise ValueError(f"--mark takes array task ids between 0 and {tasks - 1}")
    needed = (tasks - spares) * nodes_per_task
    return JobSpec(
        tasks=tasks,
        nodes_per_task=nodes_per_task,
        min_nodes=needed,
        max_nodes=needed,
        marked=frozenset(marked),
        steps=5,
        start_after={
            f"task{unit}.proc{procid}": StartAfter(f"task{unit}.proc0", _JOINING)
            for unit in range(tasks)
            for procid in range(1, nodes_per_task)
        },
    )


def compare_spec(spec: JobSpec) -> JobSpec:
    """The demo's job as ``--compare`` runs it, on either backend.

    Ungated, a marked task is a task that went bad while the job ran: it is in the
    first round (the spare tasks, the last unmarked ones, start once the last marked
    task's last launcher is about to join, or is gone), and right after its process
    group forms its node goes down (its worker kills its agent; srun ends the task).
    The healthy launchers then restart once (``max_restarts=1``) into a round with a
    spare. Gated, the decision files keep the marked tasks out before the first round.
    Every launcher records its TorchElastic events and metrics.
    """
    spare_count = spec.tasks - spec.nnodes[1] // spec.nodes_per_task
    unmarked = sorted(set(spec.units) - spec.marked)
    spares = unmarked[len(unmarked) - spare_count :] if spare_count else []
    start_after = dict(spec.start_after)
    if spec.marked:
        # The last launcher of the last marked task (it starts after its process 0).
        last = StartAfter(
            spec.label(max(spec.marked), spec.nodes_per_task - 1), _JOINING, or_gone=True
        )
        start_after |= {spec.label(unit, 0): last for unit in spares}
    return dataclasses.replace(
        spec,
        max_restarts=1,
        start_after=start_after,
        agent_env={
            BROKEN_TASKS_ENV: ",".join(str(unit) for unit in sorted(spec.marked)),
            BROKEN_HOW_ENV: "node",
        },
        record_telemetry=True,
    )


def check_outcome(result: JobResult) -> list[str]:
    """What, if anything, differs from the contract; an empty list means as expected."""
    spec = result.spec
    healthy = sorted(set(spec.units) - spec.marked)
    needed = spec.nnodes[1] // spec.nodes_per_task
    final = result.final_round
    problems = []
    if final is None:
        problems.append("no world ever formed")
    else:
        if set(final.units) & spec.marked:
            problems.append(
                f"marked tasks in the final world: {sorted(set(final.units) & spec.marked)}"
            )
        if final.world_size != spec.nnodes[1]:
            problems.append(f"the final world has {final.world_size} nodes, not {spec.nnodes[1]}")
        if len(healthy) <= needed and sorted(final.units) != healthy:
            problems.append(f"healthy tasks {healthy} are not all in the final world")
    if len(healthy) < needed:
        problems.append(
            f"only {len(healthy)} healthy tasks for the {needed} the job needs: the "
            "rendezvous cannot form (the exclusion is never relaxed to reach quorum)"
        )
    if not result.completed:
        problems.append("the job did not complete")
    return problems


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
    """Run the demo; 0 when the outcome matches the contract, 1 otherwise, 2 on bad options."""
    try:
        spec = demo_spec(args.tasks, args.nodes_per_task, set(args.mark), args.spares)
    except ValueError as error:
        print(f"nvrx-seghealth demo: {error}", file=sys.stderr)
        return 2
    if (
        args.keep_logs is not None
        and args.keep_logs.exists()
        and (not args.keep_logs.is_dir() or any(args.keep_logs.iterdir()))
    ):
        print(
            f"nvrx-seghealth demo: --keep-logs {args.keep_logs} is not an empty folder: a "
            "previous run's store, logs and worker records would be read as this run's; give "
            "a new folder (nothing in it is changed)",
            file=sys.stderr,
        )
        return 2
    workdir = args.keep_logs or Path(tempfile.mkdtemp(prefix="nvrx-seghealth-demo-"))
    workdir.mkdir(parents=True, exist_ok=True)
    marked = ", ".join(f"task {u}" for u in sorted(spec.marked)) or "none"
    if args.compare:
        return _compare(compare_spec(spec), workdir, marked, keep=args.keep_logs is not None)
    print(
        f"Simulated job array: {spec.tasks} tasks x {spec.nodes_per_task} nodes; the job "
        f"needs {spec.tasks - args.spares} tasks (--nnodes={spec.nnodes[0]}:{spec.nnodes[1]}). "
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
    if args.keep_logs or problems:
        print(
            f"Logs: {result.paths.logs} (one per launcher); decisions: "
            f"{result.paths.decisions}; worker records: {result.paths.results}"
        )
    else:
        shutil.rmtree(workdir)
        print("Logs: removed (use --keep-logs DIR to keep them)")
    return 1 if problems else 0


#: The two runs of ``--compare``: folder name, backend, title.
_VARIANTS = (
    ("ungated", "c10d", "ungated: plain c10d"),
    ("gated", "segment-health", "gated: segment-health"),
)


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
    progress = _show_progress()
    variants = []
    for folder, backend, title in _VARIANTS:
        print(f"\n== {title} ==")
        progress.start = time.time()
        (workdir / folder).mkdir()
        with SimulatedJob(dataclasses.replace(spec, backend=backend), workdir / folder) as job:
            variants.append(Variant(title, job.wait(timeout=JOB_TIMEOUT)))
    comparison = Comparison(*variants)
    for variant in variants:
        print(f"\nTimeline, {variant.title} (seconds from launch)")
        print(render_timeline(variant.result))
    print(f"\n{render_decisions(comparison.gated.result)}")
    print(f"\nWhat the gate saves (same job, same decision files)\n{comparison.render()}\n")
    problems = check_outcome(comparison.gated.result)
    if problems:
        print(
            "Outcome of the gated run: not as the contract requires:\n"
            + "\n".join(f"  - {p}" for p in problems)
        )
    else:
        print("Outcome of the gated run: as the contract requires.")
    if keep or problems:
        (workdir / "comparison.json").write_text(json.dumps(comparison.as_dict(), indent=2))
        print(
            f"Logs, decisions, worker records and telemetry: {workdir}/{{ungated,gated}}; "
            f"the numbers: {workdir / 'comparison.json'}"
        )
    else:
        shutil.rmtree(workdir)
        print("Logs: removed (use --keep-logs DIR to keep them)")
    return 1 if problems else 0
