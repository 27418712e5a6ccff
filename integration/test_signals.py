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
(``test_config_matrix.py``), in each configuration.
"""

from __future__ import annotations

from harness.jobs.sigterm import (
    BOTH,
    PROCESS_ZERO,
    assert_exits_as_with_c10d,
    compare_terminations,
    job_spec,
    wait_for_round,
)
from nvrx_seghealth._demo import SimulatedJob


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
