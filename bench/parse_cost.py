"""Row 8: what one ``publish-drained`` pass costs at 12,000 nodes and 750 tasks, without Slurm.

The Slurm answers are recorded text in the formats the producer asks for (``squeue -o
'%F|%K|%P|%N'``, ``sinfo -N -o '%N|%t|%E'``, Slurm 22.05, as the real-cluster tests read
them): 750 running tasks of 16 nodes each, compressed host lists (a third of them in two
ranges), and 12,000 nodes of which 40 are drained, 10 down and not responding and 20
not responding. Two figures, each the median of interleaved repetitions:

* the parse: both answers parsed, the host lists expanded, the node states counted and
  mapped to each task's decision — everything a pass does between Slurm's answers and
  the first file it touches (target: under 1 s);
* the whole pass with those answers (a client that returns the recorded text instead of
  running squeue and sinfo), including one bounded read per task's decision file and the
  writes, in a local temporary directory: for scale, no target.
"""

from __future__ import annotations

import tempfile
import time

from harness.bench.measure import Row, interleaved
from nvrx_seghealth._decision.unit import SlurmId, validate_id
from nvrx_seghealth._producer.debounce import DEFAULT_PASSES, Debouncer
from nvrx_seghealth._producer.publisher import DrainedPublisher
from nvrx_seghealth._producer.slurm import (
    NODE_STATES,
    NodeState,
    RunningTask,
    SlurmClient,
    parse_nodes,
    parse_running_tasks,
)

NODES, TASKS, PER_TASK = 12_000, 750, 16
JOB = validate_id("--job-id", "4242")
#: Seconds the parse of one pass may take.
TARGET_S = 1.0


def recorded_squeue() -> str:
    lines = []
    for task in range(TASKS):
        first = task * PER_TASK + 1
        last = first + PER_TASK - 1
        if task % 3 == 0:  # two ranges, as Slurm prints a fragmented allocation
            hosts = f"gpu[{first:05d}-{first + 3:05d},{first + 4:05d}-{last:05d}]"
        else:
            hosts = f"gpu[{first:05d}-{last:05d}]"
        lines.append(f"{JOB}|{task}|batch|{hosts}")
    return "\n".join(lines) + "\n"


def recorded_sinfo() -> str:
    lines = []
    for node in range(1, NODES + 1):
        if node % 300 == 0:
            lines.append(f"gpu{node:05d}|drng|Kernel panic, ticket {node}")
        elif node % 1200 == 7:
            lines.append(f"gpu{node:05d}|down*|Not responding")
        elif node % 600 == 11:
            lines.append(f"gpu{node:05d}|alloc*|none")
        else:
            lines.append(f"gpu{node:05d}|alloc|none")
    return "\n".join(lines) + "\n"


class RecordedSlurm:
    """:class:`SlurmClient`'s two queries, answered with recorded text."""

    def __init__(self, squeue: str, sinfo: str) -> None:
        self.squeue = squeue
        self.sinfo = sinfo

    def running_tasks(self, job_id: SlurmId) -> list[RunningTask]:
        return parse_running_tasks(self.squeue, job_id)

    def nodes(self, partitions: object) -> list[NodeState]:
        return parse_nodes(self.sinfo)


def _parse(squeue: str, sinfo: str) -> float:
    started = time.perf_counter()
    tasks = parse_running_tasks(squeue, JOB)
    nodes = parse_nodes(sinfo)
    hosts = {host for task in tasks for host in task.hosts}
    debouncer = Debouncer({state: DEFAULT_PASSES[state] for state in NODE_STATES})
    debouncer.observe(node for node in nodes if node.node in hosts)
    unavailable = debouncer.unavailable()
    affected = {
        task.task_id: [unavailable[h] for h in task.hosts if h in unavailable] for task in tasks
    }
    elapsed = time.perf_counter() - started
    assert sum(map(bool, affected.values())) == 40, "40 drained nodes, one per task"
    return elapsed


def rows(quick: bool) -> list[Row]:
    repetitions = 3 if quick else 7
    squeue, sinfo = recorded_squeue(), recorded_sinfo()
    with tempfile.TemporaryDirectory() as directory:
        slurm: SlurmClient = RecordedSlurm(squeue, sinfo)  # type: ignore[assignment]
        publisher = DrainedPublisher(directory, JOB, tuple(NODE_STATES), slurm, producer_id="bench")
        publisher.run_pass()  # the helper process starts; the drained tasks are published

        def whole_pass() -> float:
            started = time.perf_counter()
            result = publisher.run_pass()
            assert result.ok and result.running == TASKS, result
            return time.perf_counter() - started

        medians = interleaved(
            {"parse": lambda: _parse(squeue, sinfo), "pass": whole_pass}, repetitions
        )
    parse = medians["parse"]
    return [
        Row(
            f"one publish-drained pass, {NODES:,} nodes / {TASKS} tasks: parse (seconds)",
            parse,
            f"< {TARGET_S:g} s",
            parse < TARGET_S,
            f"squeue {len(squeue) // 1024} KiB + sinfo {len(sinfo) // 1024} KiB parsed, host "
            f"lists expanded, states counted, mapped to tasks; the whole pass with {TASKS} "
            f"bounded decision reads (no Slurm processes): {medians['pass']:.3f} s",
        )
    ]
