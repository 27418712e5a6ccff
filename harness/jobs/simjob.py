"""Simulated whole jobs (:mod:`nvrx_seghealth._demo`) as the scenarios of ``integration/``
run them: the bound of one job, a job run clear of torch's port race, torch's log lines
around a rendezvous, a job's report, and what an excluded unit's launchers must show.

The faults a test injects into a running job live here, not in the demo: a worker or an
agent killed by SIGKILL (:func:`kill_worker`, :func:`kill_agent`), each recorded with the
job (:meth:`~nvrx_seghealth._demo.SimulatedJob.record_fault`) for the recovery time."""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from harness.session.summary import SIMULATED_JOB
from nvrx_seghealth._demo import (
    JobResult,
    JobSpec,
    SimulatedJob,
    StartAfter,
    WorkerRecord,
    render_report,
)
from nvrx_seghealth._demo.logtokens import Exclusion, exclusion
from nvrx_seghealth._demo.outcome import FaultEvent
from nvrx_seghealth._errors import ExclusionReason

from .portrace import clear_of_port_race

#: Bound for one simulated job. A healthy 6-launcher job takes 20-30 s on 2 busy cores;
#: the slowest scenario (the race, with a restart) about 60 s.
JOB_TIMEOUT = 180.0

#: torch's agent logs this right before it calls ``next_rendezvous()``.
JOINING = r"Rendezvous'ing worker group"
#: torch's agent logs this once ranks are assigned after a completed round.
JOINED = r"Rendezvous complete for workers"


def siblings_after_process_zero(unit: int, nodes_per_task: int = 2) -> dict[str, StartAfter]:
    """Hold ``unit``'s other launchers back until its process 0 has exited.

    Launched together, a sibling may join before process 0 publishes the marker (the
    race, tested on its own). Held back, and with ``--kill-on-bad-exit=0`` for the unit
    so that srun does not stop it first, the sibling meets the marker: what keeps it out
    is then the marker alone.
    """
    return {
        f"task{unit}.proc{procid}": StartAfter(f"task{unit}.proc0")
        for procid in range(1, nodes_per_task)
    }


def kill_worker(job: SimulatedJob, record: WorkerRecord) -> FaultEvent:
    """SIGKILL one worker process of ``job`` (a worker failure, as torchrun sees it);
    record it.

    Raises:
        ValueError: the worker's launcher is not running (its PID may be stale).
    """
    if not job.launchers[record.launcher].running:
        raise ValueError(f"{record.launcher} is not running; not killing pid {record.pid}")
    event = job.record_fault(f"SIGKILL worker pid {record.pid} of {record.launcher}", record.round)
    os.kill(record.pid, signal.SIGKILL)
    return event


def kill_agent(job: SimulatedJob, label: str) -> FaultEvent:
    """SIGKILL launcher ``label``'s torchrun agent alone (the agent dies); record it.

    Its workers are left to the emulated srun: with ``--kill-on-bad-exit=1`` the agent's
    death ends its unit's step, and the leftovers of the step go with it.

    Raises:
        ValueError: the launcher is not running.
    """
    launcher = job.launchers[label]
    if not launcher.running or launcher.pid is None:
        raise ValueError(f"{label} is not running; not killing its agent")
    rounds = [w.round for w in job.workers() if w.round is not None]
    event = job.record_fault(
        f"SIGKILL agent pid {launcher.pid} of {label}", max(rounds, default=None)
    )
    os.kill(launcher.pid, signal.SIGKILL)
    return event


def report(request: pytest.FixtureRequest, name: str, result: JobResult) -> JobResult:
    """Print ``result``'s report (shown when the test fails) and keep it for the summary."""
    print(f"--- {name}: {result.summary()}\n{render_report(result)}")
    print(f"files (logs, decisions, worker records): {result.paths.workdir}")
    summary = f"{request.node.name} {name}: {result.summary()}"
    request.node.user_properties.append((SIMULATED_JOB, summary))
    return result


def run_job(
    request: pytest.FixtureRequest,
    folder: Path,
    spec: JobSpec,
    act: Callable[[SimulatedJob], bool | None] = lambda job: None,
) -> JobResult:
    """Run ``spec`` in the new folder ``folder`` and ``act`` on it; then wait for its end,
    or stop it at once when ``act`` returns ``True`` (what it waited for never came).
    A job that torch's port race struck runs once more
    (:func:`~harness.jobs.portrace.clear_of_port_race`): ``act`` is then called again, and what
    it recorded last is what counts. The job is reported (:func:`report`) as
    ``folder``'s name."""

    def attempt(workdir: Path) -> JobResult:
        with SimulatedJob(spec, workdir) as job:
            return job.stop_now() if act(job) else job.wait(JOB_TIMEOUT)

    return report(request, folder.name, clear_of_port_race(request, folder, attempt))


def assert_excluded_by_decision(result: JobResult, unit: int) -> None:
    """Process 0 of ``unit`` installed the check, was excluded and exited non-zero."""
    spec = result.spec
    process_zero = result.launcher(unit, 0)
    text = process_zero.log()
    job_id = spec.array_job_id
    task_id = unit if spec.array else job_id
    path = result.decisions[unit]
    assert process_zero.returncode not in (None, 0, 93)
    assert (
        f"Segment health check installed directory={result.paths.decisions} "
        f"job_id={job_id} task_id={task_id}" in text
    )
    assert exclusion(text) == Exclusion(ExclusionReason.DECISION_FILE, after_joining=False)
    assert str(path) in text
    assert "UnhealthyNodeException" in text
    assert not re.search(JOINED, text)


def assert_refused_by_marker(result: JobResult, unit: int, procid: int) -> None:
    """A sibling met its task's marker, never joined, and exited non-zero on its own."""
    sibling = result.launcher(unit, procid)
    text = sibling.log()
    assert sibling.started and not sibling.killed_by_srun
    assert sibling.returncode not in (None, 0, 93)
    assert exclusion(text) == Exclusion(ExclusionReason.MARKER, after_joining=False)
    assert "Segment health check installed" not in text  # only process 0 installs it
    assert not re.search(JOINED, text)
    assert not [w for w in result.workers if w.launcher == sibling.label]
