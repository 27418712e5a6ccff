"""A whole Slurm job array on one machine, with real ``torchrun`` agents.

The simulation starts one ``torchrun`` agent per simulated node, each with its own
Slurm-like environment, a rendezvous store hosted outside every allocation unit, a
decision directory, and a tiny gloo training worker that records what it saw. It
emulates ``srun --kill-on-bad-exit=1`` per allocation unit and stops every process it
started. The ``nvrx-seghealth demo`` command and the integration scenarios both run on
it.

Quick use::

    from nvrx_seghealth.simulation import JobSpec, SimulatedJob, render_report

    # 3 tasks x 2 nodes for a job of 4 nodes; task 1 is marked unhealthy
    spec = JobSpec(tasks=3, max_nodes=4, marked=frozenset({1}))
    with SimulatedJob(spec, workdir) as job:
        result = job.wait(timeout=120)
    print(render_report(result))

Faults injected through the job (:meth:`SimulatedJob.kill_worker`,
:meth:`SimulatedJob.kill_agent`) are recorded with the result, which measures each
one's recovery (:meth:`JobResult.recovery`); :mod:`.faults` holds the fault matrix that
the integration tests and the benchmarks share.

A job with :attr:`JobSpec.record_telemetry` routes each agent's TorchElastic
rendezvous events and ``nvrx_seghealth`` metrics to files (:mod:`.telemetry`), read
back through :meth:`LauncherOutcome.events` and :meth:`LauncherOutcome.metrics`;
:mod:`.comparison` sets one job's ungated and gated runs side by side
(``nvrx-seghealth demo --compare``).

The harness needs only the standard library; torch runs in the child processes.
"""

from __future__ import annotations

from .job import SimulatedJob
from .outcome import FaultEvent, JobResult, LauncherOutcome, Round
from .records import WorkerRecord
from .report import render_report
from .spec import JobSpec, StartAfter

__all__ = [
    "FaultEvent",
    "JobResult",
    "JobSpec",
    "LauncherOutcome",
    "Round",
    "SimulatedJob",
    "StartAfter",
    "WorkerRecord",
    "render_report",
]
