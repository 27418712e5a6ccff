"""Every configuration the docs offer, in whole jobs beside plain c10d: a pairwise design.

- Configurations (``harness.jobs.configurations``): where the store lives (a store host,
  the barrier rendezvous on a store host, etcd-v2, etcd-v3, in a launcher), the watch off
  or on, one or two launchers per unit.
- Three array tasks: tasks 0 and 1 form the world, task 2 is the spare.
- Scenarios: ``before-launch`` (task 1 marked first), ``at-restart`` (a unit marked while
  training, then a worker fails), ``during-training`` (the watch acts), ``sigterm`` (to
  task0.proc0 where it waits). ``-rank-0`` marks the unit holding rank 0.
- c10d beside each: the same fault, or nothing where c10d reads no decision.

A cell passes when its job completes in a world of the unit that stays and the spare.
Where c10d reaches that outcome too, the cell needed no more rounds, and at most 1.5 times
c10d's seconds plus ``harness.jobs.matrixcell.MARGIN``. Each distinct c10d job runs once
per session (``Cell.c10d_once``). Each cell prints one ``MATRIX`` line.

Not run: with the watch on, a decision during training never waits for a restart. A
launcher hosting the store is never in the excluded unit (``etcd/test_scenario_etcd.py``).

The cells are a pairwise design (``harness.jobs.pairwise``): every store runs every
scenario once, and each pair of two settings' values runs together in some cell.

etcd releases: etcd-v3 cells run on 3.5.1, and ``V3_ON_BOTH`` on 3.4.23 too. The etcd-v2
cells run on 3.4.23 with two launchers per unit.
"""

from __future__ import annotations

import contextlib
import dataclasses
import signal
from collections.abc import Callable

import pytest

from harness.jobs.configurations import (
    ETCD,
    ETCD_V3,
    HOST,
    REACH_TIMEOUT,
    Configuration,
    arrived,
    handoff_request_pending,
    healthy_world_after,
    plain_c10d,
    spare_after_round_zero,
    stop_stat_helper,
    wait_for_spares,
    wait_for_world,
)
from harness.jobs.matrixcell import (
    MARGIN,
    SPARE,
    Acted,
    Cell,
    Measured,
    assert_excluded_and_reformed,
    outcome,
    spare_labels,
    victim_of,
)
from harness.jobs.pairwise import PAIRWISE, V3_ON_BOTH, by_name, sigterm_point
from harness.jobs.sigterm import (
    LONG_BOUND,
    assert_exits_as_with_c10d,
    compare_terminations,
    job_spec,
    wait_for_joinings,
    wait_for_round,
)
from harness.jobs.simjob import JOB_TIMEOUT, JOINING, kill_agent, kill_worker
from harness.ports import PORT_TAKEN
from nvrx_seghealth._demo import JobResult, JobSpec, SimulatedJob, StartAfter
from nvrx_seghealth._demo.worker import BROKEN_HOW_ENV, BROKEN_TASKS_ENV
from nvrx_seghealth._settings.rdzv_conf import HANDOFF_TIMEOUT_KEY, STAT_TIMEOUT_KEY

#: A cell runs its job, and plain c10d's beside it or waits for another cell's run of it.
pytestmark = pytest.mark.timeout(3 * JOB_TIMEOUT)

#: The unit marked before launch.
MARKED = 1
#: Steps of a world a scenario acts on: it is ended by the scenario, never by its steps.
LONG = 1000
#: Seconds the worlds of the at-restart scenarios compute without collectives after
#: joining, as NCCL training does between collectives: a lost peer is then noticed
#: through the rendezvous, and plain c10d's world that holds the marked unit does not
#: finish before that unit's node fails. Nothing waits for it: the scenario ends it.
COMPUTE = 120.0
#: Seconds plain c10d gets in the at-restart scenarios to form a world without the marked
#: unit, beyond the cell's time plus MARGIN (past that bound c10d cannot be the faster):
#: torch's c10d may re-form without end when three units' launchers compete for two
#: units' places after a restart.
C10D_GRACE = 5.0
#: Seconds the launcher hosting the store starts late in the rank-0 scenarios, so that
#: another launcher holds rank 0 (torch ranks by node descriptor: lower PID first).
HOST_DELAY = 2.0


# --- before-launch -------------------------------------------------------------------


def before_launch(cell: Cell) -> None:
    n = cell.configuration.launchers
    last_of_marked = StartAfter(f"task{MARKED}.proc{n - 1}", JOINING, or_gone=True)
    base = cell.spec(
        marked=frozenset({MARKED}),
        max_restarts=1,
        start_after={label: last_of_marked for label in spare_labels(cell.spec())},
        # c10d's answer to a bad unit: its nodes fail right after joining (ignored
        # through segment-health: the unit never joins).
        agent_env={BROKEN_TASKS_ENV: str(MARKED), BROKEN_HOW_ENV: "node"},
    )

    def measure(result: JobResult, excluded: int | None) -> Measured:
        final = result.final_round
        healthy = result.completed and final is not None and final.units == (0, SPARE)
        return Measured(
            outcome(result, excluded),
            result.round_count,
            result.time_to_healthy_world if healthy else None,
        )

    gated = cell.run("segment-health", base, lambda job: None)
    assert_excluded_and_reformed(gated, MARKED, 0, after_joining=False)
    assert gated.round_count == 1, gated.summary()

    plain = plain_c10d(base)
    c10d = cell.c10d_once(cell.scenario, plain, lambda: cell.run("c10d", plain, lambda job: None))
    cell.record(measure(gated, MARKED), measure(c10d, None))


# --- at-restart ----------------------------------------------------------------------


def _restart_spec(cell: Cell, rank_zero: bool, **fields) -> JobSpec:
    spec = cell.spec(first_round_steps=LONG, **fields)
    delays = {HOST: HOST_DELAY} if rank_zero and spec.store_in_launcher else {}
    return dataclasses.replace(
        spec, start_after=spare_after_round_zero(spec, SPARE), start_delays=delays
    )


def at_restart(cell: Cell, rank_zero: bool) -> None:
    # Two restarts allowed: plain c10d spends one on the failed worker and may spend
    # one more when the marked unit's node fails in the world after it.
    spec = _restart_spec(cell, rank_zero, max_restarts=2, compute_seconds=COMPUTE, compute_rounds=1)

    def run(name: str, spec: JobSpec, patience: float | None) -> tuple[JobResult, Acted]:
        """Run ``spec``; plain c10d (``patience`` seconds after the failure to form a
        world without the marked unit) has the marked unit's node fail as soon as a world
        holds it."""
        acted: list[Acted] = []

        def act(job: SimulatedJob) -> bool:
            first = wait_for_world(job)
            wait_for_spares(job, spare_labels(job.spec))
            victim, survivor = victim_of(job, first, rank_zero)
            if patience is None:
                job.publish_decision(victim)
            worker = next(w for w in first.workers if w.launcher == f"task{survivor}.proc0")
            fault = kill_worker(job, worker)
            acted.append(Acted(first.number, victim, survivor, fault))
            if patience is None:
                return False
            failed: list[str] = []

            def healthy() -> bool:
                world = job.result().formed_after(first.number)
                label = job.spec.label(victim, 0)
                if world is not None and victim in world.units and not failed:
                    failed.append(label)
                    kill_agent(job, label)
                return job.ended or healthy_world_after(job.result(), fault.at, victim) is not None

            with contextlib.suppress(TimeoutError):  # c10d may re-form on and on
                job.wait_until(healthy, patience, "a world without the marked unit")
            return True  # what c10d came to is known: stop it

        return cell.run(name, spec, act), acted[-1]

    def measure(result: JobResult, acted: Acted, excluded: int | None) -> Measured:
        healthy = healthy_world_after(result, acted.fault.at, acted.victim)
        if healthy is None or healthy.formed_at is None:
            waited = f"{result.ended_at - acted.fault.at:.0f} s"
            return Measured(f"no world without task{acted.victim} in {waited}", 0, None)
        ended = (
            outcome(result, excluded)
            if result.completed
            else f"world {healthy.units} formed in round {healthy.number} (then stopped)"
        )
        return Measured(ended, healthy.number + 1, healthy.formed_at - acted.fault.at)

    gated, acted = run("segment-health", spec, None)
    assert_excluded_and_reformed(
        gated, acted.victim, acted.survivor, after_joining=False, after=acted.first
    )
    measured = measure(gated, acted, acted.victim)
    assert measured.seconds is not None
    # The world the marked unit joins computes until its node fails (round 1 or later).
    plain = dataclasses.replace(plain_c10d(spec), compute_rounds=LONG)
    # Shared with every cell of this scenario: the first one's patience bounds it.
    patience = measured.seconds + MARGIN + C10D_GRACE
    result, c10d_acted = cell.c10d_once(cell.scenario, plain, lambda: run("c10d", plain, patience))
    cell.record(measured, measure(result, c10d_acted, None))


# --- during-training -----------------------------------------------------------------


def during_training(cell: Cell, rank_zero: bool) -> None:
    spec = _restart_spec(cell, rank_zero, max_restarts=0)
    acted: list[Acted] = []

    def act(job: SimulatedJob) -> None:
        first = wait_for_world(job)
        wait_for_spares(job, spare_labels(job.spec))
        victim, survivor = victim_of(job, first, rank_zero)
        fault = job.mark_while_training(victim, after_steps=2, timeout=REACH_TIMEOUT)
        acted.append(Acted(first.number, victim, survivor, fault))

    result = cell.run("segment-health", spec, act)
    done = acted[-1]  # the run that counted (harness.jobs.matrixcell.Cell.run)
    assert_excluded_and_reformed(
        result, done.victim, done.survivor, after_joining=True, after=done.first
    )
    charged = [w for w in result.workers if w.restart_count]  # but for torch's port race
    assert all(PORT_TAKEN in result.launchers[w.launcher].log() for w in charged), charged
    measured = Measured(
        outcome(result, done.victim), result.round_count, result.recovery(done.fault)
    )
    cell.record(measured, None)


# --- sigterm -------------------------------------------------------------------------

#: Where the signalled launcher waits: what a point needs of the job (``JobSpec`` fields
#: and the wrapper's ``--rdzv-conf``), which launcher is signalled, how to get there.
Point = tuple[dict[str, object], dict[str, str], str, Callable[[SimulatedJob], None]]


def sigterm(cell: Cell) -> None:
    configuration = cell.configuration
    wait = sigterm_point(configuration)
    shape, conf, label, reach = _SIGTERM_POINTS[wait](configuration)

    def spec_for(backend: str) -> JobSpec:
        spec = job_spec(backend, **shape)
        if backend == "c10d":
            return spec
        placed = configuration.spec(cell.etcd_endpoint)
        return dataclasses.replace(
            spec,
            inner_backend=placed.inner_backend,
            etcd_endpoint=placed.etcd_endpoint,
            watch_interval=placed.watch_interval,
            disable_shared_store=None,
            rdzv_conf=conf,
        )

    runs = compare_terminations(
        cell.request,
        cell.workdir,
        spec_for,
        label,
        reach,
        c10d_once=lambda run: cell.c10d_once(f"sigterm:{wait}", spec_for("c10d"), run),
    )
    assert_exits_as_with_c10d(runs)
    c10d, wrapped = runs["c10d"], runs["segment-health"]
    cell.record(
        Measured(f"{label} in the {wait}: exit {wrapped.launcher.returncode}", 0, wrapped.seconds),
        Measured(f"exit {c10d.launcher.returncode}", 0, c10d.seconds),
    )


def _handoff(configuration: Configuration) -> Point:
    """Process 0's node dies while both launchers of task 0 train; the sibling's worker
    fails on the lost peer, its agent restarts it, and it waits for the dead process 0's
    verdict (bound: 120 s). SIGTERM to the sibling there; on c10d, in the restart's
    rendezvous, which waits for the dead node."""
    sibling = "task0.proc1"

    def reach(job: SimulatedJob) -> None:
        wait_for_round(job, 0, ("task0.proc0", sibling))
        kill_agent(job, "task0.proc0")
        wait_for_joinings(job, sibling, 2)
        if job.spec.backend == "segment-health":
            job.wait_until(lambda: handoff_request_pending(job, 0), 30, "a pending request")

    shape: dict[str, object] = {"no_kill_on_bad_exit": frozenset({0})}
    return shape, {HANDOFF_TIMEOUT_KEY: str(LONG_BOUND)}, sibling, reach


def _stat(configuration: Configuration) -> Point:
    """A world of one launcher: its worker fails, and its stat helper does not answer
    (stopped), so the restart's stat waits out its bound (120 s) as on a hung mount.
    SIGTERM there; on c10d, in the restart."""
    label = "task0.proc0"

    def reach(job: SimulatedJob) -> None:
        wait_for_round(job, 0, (label,))
        if job.spec.backend == "segment-health":
            stop_stat_helper(job, label)
        (worker,) = [w for w in job.workers() if w.launcher == label]
        kill_worker(job, worker)
        wait_for_joinings(job, label, 2)

    return {"nodes_per_task": 1}, {STAT_TIMEOUT_KEY: str(LONG_BOUND)}, label, reach


def _barrier(configuration: Configuration) -> Point:
    """Unit 1 is excluded by the watch while one other member of the world is frozen
    (its agent stopped): every other member waits for it in the watch's barrier (bound:
    10 s). SIGTERM to task0.proc0 there; on c10d, while the world trains."""
    n = configuration.launchers
    tasks = 3 if n == 1 else 2
    blocker = "task2.proc0" if n == 1 else "task0.proc1"
    labels = tuple(f"task{t}.proc{p}" for t in range(tasks) for p in range(n))

    def reach(job: SimulatedJob) -> None:
        wait_for_round(job, 0, labels)
        process = job.launchers[blocker].process
        assert process is not None
        process.send_signal(signal.SIGSTOP)
        if job.spec.backend == "segment-health":
            job.publish_decision(MARKED)
            job.wait_until(
                lambda: arrived(job, 0) >= len(labels) - 1, 60, "the others in the barrier"
            )

    return {"tasks": tasks, "nodes_per_task": n}, {}, "task0.proc0", reach


_SIGTERM_POINTS: dict[str, Callable[[Configuration], Point]] = {
    "hand-off": _handoff,
    "stat": _stat,
    "barrier": _barrier,
}

# --- the table -----------------------------------------------------------------------

SCENARIOS: dict[str, Callable[[Cell], None]] = {
    "before-launch": before_launch,
    "at-restart": lambda cell: at_restart(cell, rank_zero=False),
    "at-restart-rank-0": lambda cell: at_restart(cell, rank_zero=True),
    "during-training": lambda cell: during_training(cell, rank_zero=False),
    "during-training-rank-0": lambda cell: during_training(cell, rank_zero=True),
    "sigterm": sigterm,
}


def _cell(config: Configuration, scenario: str, release: str | None = None):
    """One cell's parameters: its configuration, scenario and (etcd-v3) etcd release."""
    name = f"{config.name.replace('/', ',')}:{scenario}"
    marks = [pytest.mark.etcd] if config.placement in (ETCD, ETCD_V3) else []
    if release is None:
        return pytest.param(config, scenario, id=name, marks=marks)
    return pytest.param(config, scenario, release, id=f"{name}:etcd{release}", marks=marks)


CELLS = [
    _cell(by_name(name), scenario)
    for name, scenario in PAIRWISE
    if by_name(name).placement != ETCD_V3
]
V3_CELLS = [
    _cell(by_name(name), scenario, release)
    for name, scenario in PAIRWISE
    if by_name(name).placement == ETCD_V3
    for release in ("3.5", "3.4")
    if release == "3.5" or (name, scenario) == V3_ON_BOTH
]


@pytest.mark.parametrize(("configuration", "scenario"), CELLS)
def test_cell(request, tmp_path, configuration: Configuration, scenario: str) -> None:
    endpoint = None
    if configuration.placement == ETCD:
        endpoint = request.getfixturevalue("etcd_server").endpoint
    SCENARIOS[scenario](Cell(request, tmp_path, configuration, scenario, endpoint))


@pytest.mark.parametrize(
    ("configuration", "scenario", "etcd_v3_server"), V3_CELLS, indirect=["etcd_v3_server"]
)
def test_v3_cell(
    request, tmp_path, configuration: Configuration, scenario: str, etcd_v3_server
) -> None:
    """An etcd-v3 cell, on the etcd release of its id (``etcd_v3_server``, the v2 API off)."""
    cell = Cell(request, tmp_path, configuration, scenario, etcd_v3_server.endpoint)
    SCENARIOS[scenario](cell)
