"""Do no harm: every ordinary failure recovers through segment-health as through c10d.

Each fault of the matrix (``harness.faults``) runs twice with the same
job: on ``segment-health`` with the check on and nothing marked, and on plain ``c10d``.
Both must recover through the rendezvous (the world the fault hit is restarted while it
computes, before any collective could fail on the lost rank) and end the same way: the
same launchers exit 0, non-zero or by srun, the same worlds form (round, size, tasks),
the job completes. Recovery times are printed with their ratio, not asserted: this
machine is noisy, and the benchmark (``bench/recovery.py``) reports medians.
"""

from __future__ import annotations

import pytest
from simhelpers import report

from harness.faults import FAULTS, Fault, outcome, run_fault


@pytest.mark.parametrize("fault", FAULTS, ids=[fault.name for fault in FAULTS])
def test_fault_recovers_as_with_c10d(request, tmp_path, fault: Fault) -> None:
    results = {}
    for backend in ("c10d", "segment-health"):
        workdir = tmp_path / backend
        workdir.mkdir()
        results[backend] = report(request, backend, run_fault(fault, backend, workdir))

    recovery = {backend: fault.recovery(result) for backend, result in results.items()}
    shown = {b: "never" if s is None else f"{s:.1f} s" for b, s in recovery.items()}
    ratio = (
        f"{recovery['segment-health'] / recovery['c10d']:.2f}"
        if None not in recovery.values() and recovery["c10d"]
        else "n/a"
    )
    print(
        f"RECOVERY {fault.name}: c10d {shown['c10d']}, segment-health "
        f"{shown['segment-health']}, ratio {ratio}"
    )

    expected_events = max(fault.measured) + 1
    for backend, result in results.items():
        assert len(result.faults) >= expected_events, f"{backend}: fault not injected"
        assert recovery[backend] is not None, f"{backend} never formed a world after the fault"
        assert result.completed, f"{backend}: the job did not complete"
        # The agents restarted each world the fault hit while it computed: the
        # rendezvous recovered the job, not the next collective failing on a lost rank.
        computed = [world[0] for world in outcome(result).worlds if world[3]]
        assert not computed, f"{backend}: rounds {computed} computed to the end"
    assert outcome(results["segment-health"]) == outcome(results["c10d"])
