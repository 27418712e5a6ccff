"""Run ``nvrx-seghealth`` the way a user does: a new process, an argv, an environment.

The one place that knows how to start the command: the console script that the package
installs next to this interpreter.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from harness.slurmenv import slurm_env

COMMAND = [os.path.join(os.path.dirname(sys.executable), "nvrx-seghealth")]

# Run as ``python -c`` this, then ``IGNORED COMMAND...``: see :func:`in_the_foreground`.
_DISPOSITIONS = """
import os, signal, sys
ignored = set(sys.argv[1].split(","))
for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(sig, signal.SIG_IGN if sig.name in ignored else signal.SIG_DFL)
os.execv(sys.argv[2], sys.argv[2:])
"""


def in_the_foreground(argv: list[str], ignored: Collection[signal.Signals] = ()) -> list[str]:
    """``argv`` run with SIGINT, SIGTERM and SIGHUP as a terminal's foreground job has
    them (their default actions), but those in ``ignored`` ignored, as ``nohup`` does to
    SIGHUP. For a test that signals the command: the suite may run as a background job,
    whose children start with SIGINT ignored, and a command keeps a signal ignored that
    was ignored when it started."""
    names = ",".join(sig.name for sig in ignored)
    return [sys.executable, "-c", _DISPOSITIONS, names, *argv]


def clean_environment() -> dict[str, str]:
    """This process's environment without ``SLURM_*`` and ``NVRX_*`` variables: a
    command started with it sees no allocation and no setting of the suite's own."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "NVRX_"))}


def nvrx_seghealth(
    *args: str, env: Mapping[str, str] | None = None, timeout: float = 60, **kwargs: Any
) -> subprocess.CompletedProcess[str]:
    """Run ``nvrx-seghealth ARGS`` and return the finished process.

    The child gets this process's environment without ``SLURM_*`` and ``NVRX_*``
    variables, then ``env`` on top. Output is captured as text unless ``stdout`` or
    ``stderr`` is given; other keyword arguments go to ``subprocess.run``.
    """
    kwargs.setdefault("stdout", subprocess.PIPE)
    kwargs.setdefault("stderr", subprocess.PIPE)
    return subprocess.run(
        [*COMMAND, *args],
        env={**clean_environment(), **(env or {})},
        stdin=subprocess.DEVNULL,
        text=True,
        timeout=timeout,
        **kwargs,
        check=False,
    )


#: The worker of :func:`run_one_node`: it touches the file it is given and says its rank.
ONE_NODE_WORKER = (
    "import os, pathlib, sys\npathlib.Path(sys.argv[1]).touch()\n"
    "print('worker rank', os.environ['RANK'])\n"
)


def one_node_job(folder: Path) -> Path:
    """``folder`` with :data:`ONE_NODE_WORKER` as ``worker.py`` and three empty decision
    directories, ``flag``, ``yaml`` and ``env`` (one per way to set the directory)."""
    (folder / "worker.py").write_text(ONE_NODE_WORKER)
    for name in ("flag", "yaml", "env"):
        (folder / name).mkdir()
    return folder


def one_node_command(job: Path, *options: str, program: tuple[str, ...] = ()) -> list[str]:
    """The arguments of ``nvrx-seghealth`` in :func:`run_one_node`."""
    return [
        "run",
        "--nnodes=1",
        "--nproc-per-node=1",
        "--rdzv-backend=c10d",
        "--rdzv-endpoint=127.0.0.1:0",
        "--rdzv-conf=join_timeout=30",
        *options,
        *(program or (str(job / "worker.py"), str(job / "worker-ran"))),
    ]


def one_node_environment(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables :func:`run_one_node` sets: array task 2 of job 41, then ``env``."""
    return {
        **slurm_env(task=2, array_job=41),
        "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
        **(env or {}),
    }


def run_one_node(
    job: Path,
    *options: str,
    program: tuple[str, ...] = (),
    env: Mapping[str, str] | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """``nvrx-seghealth run OPTIONS`` of the worker of :func:`one_node_job`, as array task 2
    of job 41 on one node; c10d hosts its store on 127.0.0.1. The worker touches
    ``job/worker-ran`` if it runs. ``program`` (a script and its arguments) replaces it."""
    return nvrx_seghealth(
        *one_node_command(job, *options, program=program),
        env=one_node_environment(env),
        timeout=timeout,
    )


def ft_cfg(job: Path, text: str) -> str:
    """``text`` written to ``job/ft.yaml``, and the ``--ft-cfg-path`` option that names it."""
    path = job / "ft.yaml"
    path.write_text(text)
    return f"--ft-cfg-path={path}"
