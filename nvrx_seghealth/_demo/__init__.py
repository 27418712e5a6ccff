"""The internal test-and-demo harness: a whole Slurm job array on one machine.

Not API: this package serves the ``nvrx-seghealth demo`` command, the integration
scenarios and the benchmarks of this repository, and may change without notice.

The harness starts one real ``torchrun`` agent per simulated node on 127.0.0.1, each
with its own Slurm-like environment, a rendezvous store hosted outside every allocation
unit, a decision directory, and a tiny gloo training worker that records what it saw. It
emulates ``srun --kill-on-bad-exit=1`` per allocation unit and stops every process it
started.

Quick use::

    from nvrx_seghealth._demo import JobSpec, SimulatedJob, render_report

    # 3 tasks x 2 nodes for a job of 4 nodes; task 1 is marked unhealthy
    spec = JobSpec(tasks=3, max_nodes=4, marked=frozenset({1}))
    with SimulatedJob(spec, workdir) as job:
        result = job.wait(timeout=120)
    print(render_report(result))

Faults injected through the job (:meth:`SimulatedJob.kill_worker`,
:meth:`SimulatedJob.kill_agent`) are recorded with the result, which measures each
one's recovery (:meth:`JobResult.recovery`); :mod:`harness.faults` holds the fault matrix that
the integration tests and the benchmarks share.

A job with :attr:`JobSpec.record_telemetry` routes each agent's TorchElastic
rendezvous events and ``nvrx_seghealth`` metrics to files (:mod:`.telemetry`), read
back through :meth:`.outcome.LauncherOutcome.events` and
:meth:`.outcome.LauncherOutcome.metrics`;
:mod:`.comparison` sets two runs of one job side by side: ungated and gated
(``nvrx-seghealth demo --compare``), or a decision written while the job trains
(:meth:`SimulatedJob.mark_while_training`) without and with the watch
(``nvrx-seghealth demo --watch``).

torch's private rendezvous state is read in one place, :mod:`.rendezvous_state`, which
answers "unknown" rather than failing when a torch release changes it. What the report
says about a launcher's end comes from the stable tokens of its log (:mod:`.logtokens`),
never from its wording.

The harness needs only the standard library; torch runs in the child processes.
"""

from __future__ import annotations

from .job import SimulatedJob
from .outcome import JobResult
from .records import WorkerRecord
from .report import render_report
from .spec import JobSpec, StartAfter

__all__ = ["JobResult", "JobSpec", "SimulatedJob", "StartAfter", "WorkerRecord", "render_report"]
