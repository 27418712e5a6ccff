"""Fixtures for the whole-job scenarios (``nvrx_seghealth._demo``).

Every scenario runs real ``torchrun`` agents on 127.0.0.1 through the package's own
simulation harness and asserts on recorded facts. Each simulated job's duration and
round count are listed at the end of the pytest run (``harness.session.summary``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from harness.jobs.simjob import run_job
from nvrx_seghealth._demo import JobResult, JobSpec


@pytest.fixture
def simulate(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[..., JobResult]:
    """Run a :class:`JobSpec` to its end and return the :class:`JobResult`; a job that
    torch's port race struck runs once more (:func:`harness.jobs.simjob.run_job`)."""

    def run(spec: JobSpec, name: str = "job") -> JobResult:
        return run_job(request, tmp_path / name, spec)

    return run
