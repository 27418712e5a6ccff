"""A signal that stops a launcher passes through segment-health as through plain c10d.

torch's agent installs its signal handler once it has started workers; from then on
SIGTERM raises ``SignalException`` wherever the agent's main thread is, also inside the
wrapper's own work around a restart's ``next_rendezvous()``. Each scenario runs one job
twice (``harness.sigterm.compare_terminations``): on plain ``c10d`` and on ``segment-health``,
with the store outside every unit, SIGTERM to one launcher at the same point. The
wrapped launcher must leave as the c10d one does (``harness.sigterm.assert_exits_as_with_c10d``);
both exit times are printed side by side. The hung-mount case (process 0's stat) is in
``hungmount/test_signal_during_stat.py``.
"""

from __future__ import annotations

from harness.sigterm import (
    BOTH,
    LONG_BOUND,
    PROCESS_ZERO,
    SIBLING,
    assert_exits_as_with_c10d,
    compare_terminations,
    job_spec,
    wait_for_joinings,
    wait_for_round,
)
from nvrx_seghealth._demo import JobSpec, SimulatedJob
from nvrx_seghealth._launcher.handoff import VerdictHandoff
from nvrx_seghealth._settings.rdzv_conf import HANDOFF_TIMEOUT_KEY


def _request_pending(job: SimulatedJob) -> bool:
    """The sibling's latest verdict request is answered by nobody: it waits in the hand-off.

    Read from the store, through the hand-off's own counter of array task 0 (at Slurm
    restart count 0, ``SLURM_RESTART_COUNT`` being unset).
    """
    handoff = VerdictHandoff(job.markers(), "0", "0")
    requested, answer = handoff.read()
    return requested > 0 and not answer.covers(requested)


def test_sigterm_to_a_sibling_waiting_for_a_dead_process_zero(request, tmp_path) -> None:
    """Process 0's node dies while both train; the sibling's worker fails on the lost
    peer, its agent restarts it, and the sibling asks the dead process 0 for a verdict
    (hand-off bound 120 s). SIGTERM lands in that wait; on c10d, in the restart's
    rendezvous, which waits for the dead node (join timeout 120 s)."""

    def spec_for(backend: str) -> JobSpec:
        wrapped = backend == "segment-health"
        return job_spec(
            backend,
            # srun would SIGTERM the sibling the moment process 0 dies; here the test does,
            # once the sibling waits.
            no_kill_on_bad_exit=frozenset({0}),
            rdzv_conf={HANDOFF_TIMEOUT_KEY: str(LONG_BOUND)} if wrapped else {},
        )

    def reach(job: SimulatedJob) -> None:
        wait_for_round(job, 0, BOTH)
        job.kill_agent(PROCESS_ZERO)  # the harness then kills the workers it left behind
        wait_for_joinings(job, SIBLING, 2)
        if job.spec.backend == "segment-health":
            job.wait_until(lambda: _request_pending(job), 30, "the sibling's pending request")

    assert_exits_as_with_c10d(compare_terminations(request, tmp_path, spec_for, SIBLING, reach))


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
