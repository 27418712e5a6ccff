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
from typing import Any

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
