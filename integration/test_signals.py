"""A signal that stops a launcher passes through segment-health as through plain c10d.

torch's agent installs its signal handler once it has started workers; from then on
SIGTERM raises ``SignalException`` wherever the agent's main thread is, also inside the
wrapper's own work around a restart's ``next_rendezvous()``. Each scenario runs one job
twice (``harness.jobs.sigterm.compare_terminations``): on plain ``c10d`` and on ``segment-health``,
with the store outside every unit, SIGTERM to one launcher at the same point. The
wrapped launcher must leave as the c10d one does (``harness.jobs.sigterm.assert_exits_as_with_c10d``);
both exit times are printed side by side. The hung-mount case (process 0's stat) is in
``hungmount/test_signal_during_stat.py``; a sibling waiting in the hand-off for a dead
process 0, process 0 in a stat that does not answer and a launcher in the watch's
barrier are the ``sigterm`` cells of the configuration matrix
(``test_config_matrix.py``), in each configuration. A launcher blocked in the
``barrier`` rendezvous' store wait is here.
"""

from __future__ import annotations

import dataclasses

from harness.jobs.configurations import barrier_arrivals
from harness.jobs.sigterm import (
    BOTH,
    PROCESS_ZERO,
    assert_exits_as_with_c10d,
    compare_terminations,
    job_spec,
    wait_for_joinings,
    wait_for_round,
)
from harness.jobs.simjob import kill_agent
from nvrx_seghealth._demo import JobSpec, SimulatedJob


def test_sigterm_to_process_zero_while_its_responder_looks(request, tmp_path) -> None:
    """Process 0 trains; its responder thread looks for verdict requests every 0.2 s
    (one store call each, through the fail-open helper) while the agent's monitor loop
    runs on the main thread. The signal is delivered to the main thread whatever look
    the responder is in, and leaves through torch's exit path: nothing of the
    responder's may catch it or hold the exit."""

    def reach(job: SimulatedJob) -> None:
        wait_for_round(job, 0, BOTH)

    runs = compare_terminations(request, tmp_path, job_spec, PROCESS_ZERO, reach)
    assert_exits_as_with_c10d(runs)


def test_sigterm_to_a_launcher_waiting_in_the_barrier_rendezvous(request, tmp_path) -> None:
    """Two units of one launcher each, both needed; segment-health over ``barrier``.
    Unit 0's agent dies while both train; unit 1's worker fails on the lost peer, its
    agent restarts it, and it waits in round 1 of the barrier for a second launcher
    (bound: the join timeout, 120 s), blocked in the store's wait. SIGTERM there; on
    c10d, in the restart's rendezvous."""
    waiting = "task1.proc0"

    def spec_for(backend: str) -> JobSpec:
        spec = job_spec(backend, tasks=2, nodes_per_task=1, no_kill_on_bad_exit=frozenset({0}))
        return spec if backend == "c10d" else dataclasses.replace(spec, inner_backend="barrier")

    def reach(job: SimulatedJob) -> None:
        wait_for_round(job, 0, ("task0.proc0", waiting))
        kill_agent(job, "task0.proc0")
        wait_for_joinings(job, waiting, 2)
        if job.spec.backend == "segment-health":
            job.wait_until(lambda: barrier_arrivals(job, 1) >= 1, 60, "a slot in round 1")

    runs = compare_terminations(request, tmp_path, spec_for, waiting, reach)
    assert_exits_as_with_c10d(runs)
