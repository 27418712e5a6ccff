"""A private, real Slurm cluster (Debian slurm-wlm + munge) for the tests marked ``slurm``.

The session-scoped ``slurm_cluster`` fixture starts the cluster with ``start.sh`` in a
temporary directory, and at the end of the session stops it with ``stop.sh`` and
removes the directory.

Slurm is installed (:func:`harness.services.debian.install`) only when ``CI=true`` or
``NVRX_SEGHEALTH_SLURM_INSTALL=1``. Otherwise, without ``slurmctld`` on PATH, the tests
skip and say how to enable them. In CI a missing or broken Slurm fails the tests.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest

from harness.services import debian
from harness.services.slurm import SlurmCluster

HERE = Path(__file__).resolve().parent
IN_CI = os.environ.get("CI") == "true"
INSTALL = IN_CI or os.environ.get("NVRX_SEGHEALTH_SLURM_INSTALL") == "1"
#: Debian's Slurm controller, node daemon and client tools, and munge.
SLURM_PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge")


def _unavailable(reason: str) -> NoReturn:
    """Skip the Slurm tests, or fail them in CI, where Slurm must always run."""
    if IN_CI:
        pytest.fail(f"CI=true requires real Slurm: {reason}", pytrace=False)
    pytest.skip(reason)


def _script(name: str, *args: str, timeout: float) -> None:
    """Run one of this directory's scripts; fail with its output if it fails."""
    try:
        subprocess.run(
            [str(HERE / name), *args],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=True,
        )
    except subprocess.CalledProcessError as error:
        pytest.fail(
            f"{name} {' '.join(args)} exited {error.returncode}\n"
            f"--- stdout\n{error.stdout}--- stderr\n{error.stderr}",
            pytrace=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{name} {' '.join(args)} did not finish in {timeout}s", pytrace=False)


def _client_env(state_dir: Path) -> dict[str, str]:
    """This process's environment without Slurm job variables, plus ``env.sh``."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("SLURM_", "SBATCH_", "SRUN_", "SALLOC_"))
    }
    exported = subprocess.run(
        [
            "bash",
            "-c",
            '. "$1" && printf "%s\\0%s" "$SLURM_CONF" "$PATH"',
            "_",
            str(state_dir / "env.sh"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=10,
        check=True,
    ).stdout
    env["SLURM_CONF"], env["PATH"] = exported.split("\0")
    return env


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """A 4-node private Slurm cluster (n1..n4, 2 CPUs each) for the whole session."""
    if os.geteuid() != 0:
        _unavailable("the Slurm tests run the Slurm daemons and must run as root")
    if INSTALL:
        failed = debian.install(*SLURM_PACKAGES)
        if failed is not None:
            _unavailable(failed)
    elif shutil.which("slurmctld", path=f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin") is None:
        _unavailable(
            "Slurm is not installed (no slurmctld on PATH or in /usr/sbin). Enable these "
            "tests with NVRX_SEGHEALTH_SLURM_INSTALL=1 (installs Debian's slurmctld, slurmd, "
            f"slurm-client and munge), or run {debian.INSTALLER} as root first"
        )
    # munged wants every directory above its socket world-executable, which pytest's
    # own temporary directories (mode 700) are not.
    state_dir = Path(tempfile.mkdtemp(prefix="nvrx-seghealth-slurm."))
    state_dir.chmod(0o755)
    nodes = ("n1", "n2", "n3", "n4")
    try:
        _script("start.sh", str(state_dir), str(len(nodes)), timeout=120)
        yield SlurmCluster(state_dir, _client_env(state_dir), nodes)
    finally:
        _script("stop.sh", str(state_dir), timeout=120)
        shutil.rmtree(state_dir)
