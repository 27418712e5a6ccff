"""A simulated job's launcher records when its process exited, not when the job looked."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from harness.waits import wait_until
from nvrx_seghealth._demo.launcher import Launcher
from nvrx_seghealth._demo.paths import RunPaths
from nvrx_seghealth._demo.spec import JobSpec


def test_the_exit_time_is_when_the_process_exited(tmp_path: Path) -> None:
    """The job looks every 0.2 s, and longer on a loaded node; a SIGTERM comparison
    measures the launcher's exit, not the job's next look."""
    launcher = Launcher(JobSpec(), 0, 0, RunPaths(tmp_path), "127.0.0.1:1", "run")
    launcher.command = [sys.executable, "-c", "pass"]  # exits at once
    launcher.start()
    process = launcher.process
    assert process is not None
    wait_until(lambda: process.returncode is not None)  # reaped, but not yet looked at
    looked = time.time()
    assert launcher.running and launcher.poll() and not launcher.running
    assert launcher.ended_at is not None and launcher.started_at is not None
    assert launcher.started_at <= launcher.ended_at <= looked
    assert launcher.returncode == 0 and not launcher.poll()  # seen once
