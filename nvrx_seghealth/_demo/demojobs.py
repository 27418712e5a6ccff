"""The jobs ``nvrx-seghealth demo`` simulates: the demo's own, ``--compare``'s, ``--watch``'s.

Each is a :class:`.spec.JobSpec`, built from the command's options; a ``ValueError``
names the option to change.
"""

from __future__ import annotations

import dataclasses

from .spec import JobSpec, StartAfter
from .worker import BROKEN_HOW_ENV, BROKEN_TASKS_ENV

__all__ = [
    "MARK_AFTER_STEPS",
    "TRAIN_ON_SECONDS",
    "compare_spec",
    "demo_spec",
    "watch_spec",
]

#: torch's agent logs this right before it joins the rendezvous.
_JOINING = r"Rendezvous'ing worker group"
#: torch's agent logs this once its round is complete (and so is everyone's).
_JOINED = r"Rendezvous complete for workers"
#: ``--watch``: the steps every worker of the first world does before the decisions.
MARK_AFTER_STEPS = 3
#: ``--watch``: seconds the first world trains on after the decisions, beyond the watch
#: interval: what bounds the run without the watch, and the watch's margin to act.
TRAIN_ON_SECONDS = 20.0


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


def _spares(spec: JobSpec) -> list[int]:
    """The spare tasks: the last unmarked ones, as many as the job does not need."""
    spare_count = spec.tasks - spec.nnodes[1] // spec.nodes_per_task
    unmarked = sorted(set(spec.units) - spec.marked)
    return unmarked[len(unmarked) - spare_count :] if spare_count else []


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
    spares = _spares(spec)
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


def watch_spec(spec: JobSpec, seconds: float, *, on: bool) -> JobSpec:
    """The demo's job as ``--watch SECONDS`` runs it, with the watch ``on`` or off.

    No decision exists at launch: the harness writes the marked tasks' decisions once
    every worker of the first world did :data:`MARK_AFTER_STEPS` steps. So the marked
    tasks are in that world, the spare tasks (the last unmarked ones) start once it is
    complete: they wait as spares. The first world then trains for about
    ``seconds + TRAIN_ON_SECONDS`` more (the same steps with the watch off and on), the
    worlds after it for the usual few steps. Every launcher records its telemetry.
    """
    spares = _spares(spec)
    joined = StartAfter(spec.label(min(set(spec.units) - set(spares)), 0), _JOINED)
    train_on = round((seconds + TRAIN_ON_SECONDS) / spec.step_seconds)
    return dataclasses.replace(
        spec,
        marked=frozenset(),
        first_round_steps=MARK_AFTER_STEPS + train_on,
        start_after=dict(spec.start_after) | {spec.label(unit, 0): joined for unit in spares},
        watch_interval=seconds if on else 0.0,
        record_telemetry=True,
    )
