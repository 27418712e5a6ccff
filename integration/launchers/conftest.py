"""Fixtures for the real launchers (the ``launchers`` extra: accelerate and TorchX)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.jobs.launcherjob import mark_task


@pytest.fixture
def decisions(tmp_path: Path) -> Path:
    """A decision directory where the marked task's decision is published."""
    directory = tmp_path / "segment-health-check"
    directory.mkdir()
    mark_task(directory)
    return directory
