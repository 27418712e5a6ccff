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
