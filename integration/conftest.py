"""Fixtures for the whole-job scenarios (``nvrx_seghealth._demo``).

Every scenario runs real ``torchrun`` agents on 127.0.0.1 through the package's own
simulation harness and asserts on recorded facts. Each simulated job's duration and
round count are listed at the end of the pytest run (``harness.summary``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from harness.portrace import clear_of_port_race
from harness.simjob import JOB_TIMEOUT, report
from nvrx_seghealth._demo import JobResult, JobSpec, SimulatedJob


@pytest.fixture
def simulate(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[..., JobResult]:
    """Run a :class:`JobSpec` to its end and return the :class:`JobResult`; a job that
    torch's port race struck runs once more (:func:`harness.portrace.clear_of_port_race`)."""

    def run(spec: JobSpec, name: str = "job") -> JobResult:
        def attempt(workdir: Path) -> JobResult:
            with SimulatedJob(spec, workdir) as job:
                return job.wait(timeout=JOB_TIMEOUT)

        return report(request, name, clear_of_port_race(request, tmp_path / name, attempt))

    return run
