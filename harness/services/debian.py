"""Debian's packages the tests stand on, installed through ``.ci/install-debian``.

The etcd and Slurm fixtures call :func:`install` when ``CI=true`` or their
``NVRX_SEGHEALTH_*_INSTALL=1`` allows it. The script takes an exclusive lock of its own
file, so pytest's workers install one at a time, and returns at once for installed
packages. ``.ci/run`` installs every package before any test starts.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

__all__ = ["INSTALLER", "install"]

#: The one installer of the project's Debian packages.
INSTALLER = Path(__file__).resolve().parents[2] / ".ci" / "install-debian"


def install(*packages: str, timeout: float = 900) -> str | None:
    """Install ``packages`` unless installed; ``None`` on success, else why it failed."""
    try:
        done = subprocess.run(
            ["bash", str(INSTALLER), *packages],
            env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return f"{INSTALLER.name} {' '.join(packages)} did not finish in {timeout:.0f} s"
    if done.returncode != 0:
        return (
            f"{INSTALLER.name} {' '.join(packages)} exited {done.returncode}: "
            f"{(done.stdout + done.stderr)[-2000:]}"
        )
    return None
