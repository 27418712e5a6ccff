"""Without a decision directory, ``segment-health`` behaves exactly like plain ``c10d``: the
same world, and one WARNING that says ``check=off``, nothing more of the check."""

from __future__ import annotations

import re
from typing import Any

from nvrx_seghealth._demo import JobResult, JobSpec


def facts(result: JobResult) -> dict[str, Any]:
    """What a job did, leaving out what differs between any two runs (PIDs, ranks, times)."""
    final = result.final_round
    assert final is not None
    return {
        "rounds": result.round_count,
        "world_size": final.world_size,
        "units": final.units,
        "launchers": sorted(w.launcher for w in final.workers),
        "group_world_sizes": {w.group_world_size for w in final.workers},
        "all_reduce_ok": [w.all_reduce_ok for w in final.workers],
        "exit_codes": {label: o.returncode for label, o in result.launchers.items()},
    }


def test_segment_health_without_directory_is_c10d(simulate) -> None:
    # Task 1 has a decision file, but no launcher is told where decisions live.
    common: dict[str, Any] = {"tasks": 2, "marked": frozenset({1})}
    plain = simulate(JobSpec(backend="c10d", **common), "c10d")
    wrapped = simulate(
        JobSpec(backend="segment-health", check_directory=False, **common), "segment-health"
    )

    assert facts(wrapped) == facts(plain)
    assert facts(plain)["units"] == (0, 1) and facts(plain)["world_size"] == 4
    assert plain.completed and wrapped.completed
    assert set(facts(plain)["exit_codes"].values()) == {0}
    for result, backend in ((plain, "c10d"), (wrapped, "segment-health")):
        for outcome in result.launchers.values():
            assert re.search(rf"rdzv_backend\s+: {backend}\n", outcome.log())
            said = [line for line in outcome.log().splitlines() if "Segment health check" in line]
            if backend == "c10d":
                assert said == []
            else:  # the launcher says the check is off, and nothing else of it
                assert len(said) == 1 and "check=off" in said[0], said
