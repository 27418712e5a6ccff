"""The demo: a whole Slurm job array on one machine, as ``nvrx-seghealth demo`` runs it.

Not API: this package serves the ``nvrx-seghealth demo`` command, the integration
scenarios and the benchmarks of this repository, and may change without notice.

One real ``torchrun`` agent runs per simulated node on 127.0.0.1, each with its own
Slurm-like environment. The job has a store outside every unit (``nvrx-seghealth
store-host``), a decision directory and a small gloo worker that records what it saw.
It emulates ``srun --kill-on-bad-exit=1`` per unit and stops every process it started.

Quick use::

    from nvrx_seghealth._demo import JobSpec, SimulatedJob, render_report

    # 3 tasks x 2 nodes for a job of 4 nodes; task 1 is marked unhealthy
    spec = JobSpec(tasks=3, max_nodes=4, marked=frozenset({1}))
    with SimulatedJob(spec, workdir) as job:
        result = job.wait(timeout=120)
    print(render_report(result))

- The report reads a launcher's end from its log's stable tokens (:mod:`.logtokens`).
- torch's private rendezvous state is read in one place, :mod:`.rendezvous_state`.
- :mod:`.comparison` sets two runs side by side (``demo --compare``, ``demo --watch``).
- The tests inject faults from outside the wheel (:mod:`harness.jobs.faults`).
"""

from __future__ import annotations

from .job import SimulatedJob
from .outcome import JobResult
from .records import WorkerRecord
from .report import render_report
from .spec import JobSpec, StartAfter

__all__ = ["JobResult", "JobSpec", "SimulatedJob", "StartAfter", "WorkerRecord", "render_report"]
