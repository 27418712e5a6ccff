"""Run ``nvrx-seghealth`` the way a user does: a new process, an argv, an environment.

The one place that knows how to start the command: the console script that the package
installs next to this interpreter.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from typing import Any

COMMAND = [os.path.join(os.path.dirname(sys.executable), "nvrx-seghealth")]


def nvrx_seghealth(
    *args: str, env: Mapping[str, str] | None = None, timeout: float = 60, **kwargs: Any
) -> subprocess.CompletedProcess[str]:
    """Run ``nvrx-seghealth ARGS`` and return the finished process.

    The child gets this process's environment without ``SLURM_*`` and ``NVRX_*``
    variables, then ``env`` on top. Output is captured as text unless ``stdout`` or
    ``stderr`` is given; other keyword arguments go to ``subprocess.run``.
    """
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "NVRX_"))}
    kwargs.setdefault("stdout", subprocess.PIPE)
    kwargs.setdefault("stderr", subprocess.PIPE)
    return subprocess.run(
        [*COMMAND, *args],
        env={**clean, **(env or {})},
        stdin=subprocess.DEVNULL,
        text=True,
        timeout=timeout,
        **kwargs,
        check=False,
    )
