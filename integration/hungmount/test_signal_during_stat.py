"""SIGTERM to process 0 while its stat of the decision file hangs leaves as with c10d.

The stat blocks on a real hung FUSE mount (the ``hung_mount`` fixture) with a bound of
120 s, far beyond the test's patience. The decision directory is a symlink: to a local
directory while round 0 forms (process 0's first stat answers at once), then to the hung
mount, and process 0's worker is killed, so that the restart's stat, made once torch's
signal handler is installed, is the one that hangs. The same job runs on plain c10d
(``harness.jobs.sigterm.compare_terminations``), where the signal lands in the restart.

The hand-off is off: with it, a sibling's request could have process 0's responder
thread make the hung stat first, and the main thread would then wait for the lock
rather than inside its own stat.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from harness.jobs.sigterm import (
    BOTH,
    LONG_BOUND,
    PROCESS_ZERO,
    assert_exits_as_with_c10d,
    compare_terminations,
    job_spec,
    wait_for_joinings,
    wait_for_round,
)
from harness.jobs.simjob import kill_worker
from nvrx_seghealth._demo import JobSpec, SimulatedJob
from nvrx_seghealth._settings.rdzv_conf import DIRECTORY_KEY, HANDOFF_TIMEOUT_KEY, STAT_TIMEOUT_KEY

if TYPE_CHECKING:
    from harness.services.fuse import HungMount

pytestmark = pytest.mark.hungmount


def _point(link: Path, target: Path) -> None:
    """Make the symlink ``link`` point at ``target``, replacing it atomically."""
    temp = link.with_name(f"{link.name}.new")
    os.symlink(target, temp)
    os.replace(temp, link)


@pytest.mark.timeout(240)
def test_sigterm_to_process_zero_while_its_stat_hangs(
    request: pytest.FixtureRequest, tmp_path: Path, hung_mount: HungMount
) -> None:
    local = tmp_path / "local-decisions"
    local.mkdir()
    links = {backend: tmp_path / f"decisions-{backend}" for backend in ("c10d", "segment-health")}
    for link in links.values():
        _point(link, local)

    def spec_for(backend: str) -> JobSpec:
        conf = {
            DIRECTORY_KEY: str(links[backend]),
            STAT_TIMEOUT_KEY: str(LONG_BOUND),
            HANDOFF_TIMEOUT_KEY: "0",
        }
        return job_spec(backend, rdzv_conf=conf if backend == "segment-health" else {})

    def reach(job: SimulatedJob) -> None:
        wait_for_round(job, 0, BOTH)
        _point(links[job.spec.backend], hung_mount.path)
        (worker,) = [w for w in job.workers() if w.launcher == PROCESS_ZERO]
        kill_worker(job, worker)
        wait_for_joinings(job, PROCESS_ZERO, 2)

    runs = compare_terminations(request, tmp_path, spec_for, PROCESS_ZERO, reach)
    assert_exits_as_with_c10d(runs)
