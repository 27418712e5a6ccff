"""Row 5: start-up cost. Importing the package must not import torch, and
``nvrx-seghealth check`` should cost little more than starting Python."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time

from harness.bench.measure import Row, interleaved


def _timed(command: list[str], env: dict[str, str] | None = None) -> float:
    started = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True, env=env)
    return time.perf_counter() - started


def rows(quick: bool) -> list[Row]:
    repetitions = 5 if quick else 15
    torch_free = (
        subprocess.run(
            [sys.executable, "-c", "import sys, nvrx_seghealth; print('torch' in sys.modules)"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        == "False"
    )
    cli = shutil.which("nvrx-seghealth") or "nvrx-seghealth"
    with tempfile.TemporaryDirectory() as directory:
        medians = interleaved(
            {
                "python": lambda: _timed([sys.executable, "-c", "pass"]),
                "import": lambda: _timed([sys.executable, "-c", "import nvrx_seghealth"]),
                "check": lambda: _timed(
                    [cli, "check", "--dir", directory, "--job-id", "1", "--task-id", "2"]
                ),
                "torch": lambda: _timed([sys.executable, "-c", "import torch"]),
            },
            repetitions,
        )
    return [
        Row(
            "import nvrx_seghealth vs python -c pass",
            medians["import"] / medians["python"],
            "torch not imported",
            torch_free,
            f"python {medians['python'] * 1e3:.0f} ms, import {medians['import'] * 1e3:.0f} ms, "
            f"torch imported: {not torch_free} (import torch alone: "
            f"{medians['torch'] * 1e3:.0f} ms)",
        ),
        Row(
            "nvrx-seghealth check vs python -c pass",
            medians["check"] / medians["python"],
            "-",
            None,
            f"check {medians['check'] * 1e3:.0f} ms, python {medians['python'] * 1e3:.0f} ms",
        ),
    ]
