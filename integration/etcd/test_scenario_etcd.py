"""Whole jobs of real torchrun agents where no allocation unit hosts the rendezvous.

With ``inner_backend=etcd-v2`` the rendezvous state and store live in a real etcd (the
``etcd_server`` fixture), outside the job. Excluding array task 0 — whose process 0 is the
launcher that hosts the TCPStore in a c10d job, the launcher whose address is the
endpoint — then costs nothing but the task: the spares take its place and the job
completes. The contrast runs the same job with c10d and that launcher hosting the store
(``is_host=true``): its exclusion takes the store and the whole job down (the TCPStore
lives in its host launcher and dies with it).

The exclusion of a unit from a world that already trains on etcd-v2 (with the watch, or
at the next rendezvous without it; the unit holding rank 0 or the other one; one or two
launchers per unit) is a set of cells of the configuration matrix
(``integration/test_config_matrix.py``).

Rounds are counted from facts, never from timing: the worker records (each worker reads
its round from the rendezvous state) and, for etcd-v2, the rendezvous state in etcd itself.
"""

from __future__ import annotations

import base64
import re
from typing import Any

import pytest

from harness.jobs.simjob import (
    JOB_TIMEOUT,
    JOINED,
    assert_excluded_by_decision,
    assert_refused_by_marker,
    report,
    siblings_after_process_zero,
)
from nvrx_seghealth._demo import JobSpec, SimulatedJob, StartAfter
from nvrx_seghealth._demo.rendezvous_state import decode as decode_state
from nvrx_seghealth._launcher.handoff import EVERY_REQUEST, Answer, Verdict, decode

#: Where torch's etcd-v2 backend keeps the rendezvous state (one key per run) and its
#: store (``etcd_rendezvous_backend.create_backend``).
STATE_PREFIX = "/torch/elastic/rendezvous"
STORE_PREFIX = "/torch/elastic/store"

#: Three array tasks of two nodes for a job of four nodes (``--nnodes=4:4``): one task is
#: a spare. Task 0 is marked. Its process 1 is held back until process 0 has exited, with
#: ``--kill-on-bad-exit=0`` for task 0, so that it meets the marker (not srun) and the
#: round count does not depend on the race inside a task (tested on its own).
SHAPE: dict[str, Any] = {
    "tasks": 3,
    "max_nodes": 4,
    "marked": frozenset({0}),
    "no_kill_on_bad_exit": frozenset({0}),
    "start_after": siblings_after_process_zero(0),
}


def _store_keys(raw: dict[str, str]) -> dict[str, str]:
    """torch's EtcdStore entries as the store's users see them: it base64-encodes the
    last path element (the key) and the value."""
    return {
        base64.b64decode(key.rsplit("/", 1)[1]).decode(): base64.b64decode(value).decode()
        for key, value in raw.items()
    }


@pytest.mark.etcd
def test_etcd_v2_job_completes_without_the_task_that_would_host_a_c10d_store(
    etcd_server, request, tmp_path
) -> None:
    spec = JobSpec(**SHAPE, inner_backend="etcd-v2", etcd_endpoint=etcd_server.endpoint)
    with SimulatedJob(spec, tmp_path) as job:
        result = report(request, "etcd-v2", job.wait(timeout=JOB_TIMEOUT))
        marked_groups = job.markers().marked_groups()
    run = job.run_id

    # Every launcher's rendezvous was the etcd; the harness hosted no store.
    assert job.endpoint == etcd_server.endpoint
    assert job.store.port is None and not (result.paths.logs / "store.log").exists()

    # Task 0 is out: process 0 by its decision, process 1 by the marker in etcd.
    assert_excluded_by_decision(result, 0)
    assert "excluded unit leaves the shared rendezvous open" in result.launcher(0, 0).log()
    assert_refused_by_marker(result, 0, 1)

    # The job completed in one round on tasks 1 and 2 (the spare took task 0's place).
    assert result.completed and not result.timed_out
    final = result.final_round
    assert final is not None and final.number == 0 and result.round_count == 1
    assert final.world_size == 4 and final.units == (1, 2)
    trained = sorted(w.launcher for w in result.workers)
    assert trained == ["task1.proc0", "task1.proc1", "task2.proc0", "task2.proc1"]
    assert sorted(w.rank for w in result.workers) == [0, 1, 2, 3]
    assert {(w.round, w.world_size, w.restart_count) for w in result.workers} == {(0, 4, 0)}
    assert all(w.completed for w in result.workers)
    for unit in (1, 2):
        assert [o.returncode for o in result.unit_launchers(unit)] == [0, 0]

    # etcd itself: the run's rendezvous state is round 0, completed and then closed by
    # the finished job, with exactly the launchers of tasks 1 and 2 as participants.
    raw_state = etcd_server.raw(f"{STATE_PREFIX}/{run}")
    state = decode_state(base64.b64decode(raw_state[f"{STATE_PREFIX}/{run}"]))
    print(f"etcd {STATE_PREFIX}/{run}: {state}")
    assert (state.round, state.complete, state.closed) == (0, True, True)
    trainers = {result.launcher(u, p).pid for u in (1, 2) for p in (0, 1)}
    assert set(state.participants or ()) == trainers

    # etcd itself: the marker of task 0 and nothing else, under this run's namespace.
    raw_store = etcd_server.raw(STORE_PREFIX)
    stored = _store_keys(raw_store)
    ours = {k: v for k, v in stored.items() if k.startswith(f"nvrx_seghealth/{run}/")}
    print("etcd store entries of the run, as etcd holds them, then decoded:")
    for raw_key, raw_value in sorted(raw_store.items()):
        key, value = next(iter(_store_keys({raw_key: raw_value}).items()))
        if key in ours:
            print(f"  {raw_key} = {raw_value}\n    {key} = {value!r}")
    prefix = f"nvrx_seghealth/{run}/{spec.array_job_id}/"
    markers = {k: v for k, v in ours.items() if not k.startswith(f"{prefix}verdict/")}
    assert sorted(markers) == [f"{prefix}count", f"{prefix}group/0", f"{prefix}slot/1"]
    # The hand-off: one counter per task (restart count 0); each sibling asked once. A
    # sibling that asked before its process 0 answered was woken by its request's key.
    verdicts = {k: v for k, v in ours.items() if k.startswith(f"{prefix}verdict/")}
    answered = {k for k in verdicts if "/answered/" in k}
    assert answered <= {f"{prefix}verdict/{task}/0/answered/1" for task in (0, 1, 2)}
    counters = {k: decode(int(v)) for k, v in verdicts.items() if k not in answered}
    print(f"hand-off counters: {counters}")
    assert sorted(counters) == [f"{prefix}verdict/{task}/0" for task in (0, 1, 2)]
    assert counters[f"{prefix}verdict/0/0"] == (1, Answer(Verdict.EXCLUDED, EVERY_REQUEST, True))
    for task in (1, 2):  # settled after the round: no longer standing
        requests, answer = counters[f"{prefix}verdict/{task}/0"]
        assert (requests, answer.verdict, answer.standing) == (1, Verdict.HEALTHY, False)
    # A counter's value is its count, then a whitespace tag of its add (etcd_v2._Add).
    assert int(markers[f"{prefix}count"]) == 1 and markers[f"{prefix}slot/1"] == "0"
    decision = result.decisions[0]
    size = decision.stat().st_size
    assert re.fullmatch(
        rf"{re.escape(str(decision))} \({size} bytes\) host=\S+ pid={result.launcher(0, 0).pid} "
        r"at=\S+",
        markers[f"{prefix}group/0"],
    )
    assert marked_groups == ["0"]


def test_c10d_store_hosted_by_the_excluded_task_takes_the_job_down(request, tmp_path) -> None:
    # The same job with c10d, task 0's process 0 hosting the TCPStore (is_host=true), as
    # the launcher whose address is the endpoint does. Every other launcher starts once
    # that launcher has exited: started together, they would connect, lose the store
    # within a second and fail the same way, but four of them could also complete a
    # round in that second and fail only later; held back, the outcome is one. That is
    # also what every later rendezvous (a restart, a membership change) meets.
    # read_timeout bounds how long a launcher tries to reach the store (default 60 s).
    others = {label: StartAfter("task0.proc0") for label in JobSpec(**SHAPE).labels[1:]}
    spec = JobSpec(
        **SHAPE | {"start_after": others},
        store_in_launcher="task0.proc0",
        rdzv_conf={"read_timeout": "5"},
    )
    with SimulatedJob(spec, tmp_path) as job:
        result = report(request, "c10d, store in task0.proc0", job.wait(timeout=JOB_TIMEOUT))

    # The harness hosted nothing: task0.proc0 hosted the store, every other launcher
    # is a client of it.
    assert job.store.port is None
    for label, launcher in job.launchers.items():
        is_host = "true" if label == "task0.proc0" else "false"
        assert re.search(rf"--rdzv-conf=\S*\bis_host={is_host}\b", " ".join(launcher.command))
    assert_excluded_by_decision(result, 0)
    assert "excluded unit leaves the shared rendezvous open" in result.launcher(0, 0).log()

    # Every other launcher failed, although four of them are enough for the job: no
    # round, no worker, no exit 0.
    assert not result.timed_out and not result.completed
    assert result.round_count == 0 and not result.workers
    assert not any(re.search(JOINED, o.log()) for o in result.launchers.values())
    for unit in (0, 1, 2):
        outcomes = result.unit_launchers(unit)[1:] if unit == 0 else result.unit_launchers(unit)
        assert all(o.started and o.returncode not in (None, 0) for o in outcomes), unit
        # A unit's first failure is its own (srun then ends the step): no store to
        # reach, because the excluded launcher took it along.
        own = [o for o in outcomes if not o.killed_by_srun]
        assert own, f"task{unit}: srun ended every launcher"
        for outcome in own:
            assert "The connection to the C10d store has failed" in outcome.log()
