"""Child processes of the simulation: started in their own session, stopped by PID.

Each process is the leader of a new session, so its process group holds it and
everything it spawns (a ``torchrun`` agent and its workers). Signalling the group is
what ``slurmstepd`` does to a task: the whole tree goes, and no orphaned worker
survives the agent. Only groups this module started are ever signalled.

The demo runs inside :func:`~.._producer.schedule.stop_signals`. A stop signal that lands
while :func:`spawn` starts a process is held until the start has ended; that process is
then killed before :class:`~.._producer.schedule.Stopped` goes on, so none runs unknown.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from .._producer.schedule import stops_held

__all__ = ["kill_if_running", "signal_group", "spawn", "stop_all"]

log = logging.getLogger(__name__)


def spawn(
    command: Sequence[str], env: Mapping[str, str], log_path: Path, *, stdin: int | None = None
) -> subprocess.Popen[bytes]:
    """Start ``command`` as a session leader; stdout and stderr go to ``log_path``.

    ``stdin`` defaults to ``/dev/null``; pass ``subprocess.PIPE`` to keep a pipe
    whose end-of-file tells the child that the harness is gone. A stop signal that
    arrives while the process starts kills it (its group, the leader reaped) before
    :class:`~.._producer.schedule.Stopped` reaches the caller.
    """
    process: subprocess.Popen[bytes] | None = None
    try:
        # A stop as it starts would leave it running, its pid unknown.
        with open(log_path, "ab") as out, stops_held():
            process = subprocess.Popen(
                list(command),
                env=dict(env),
                stdin=subprocess.DEVNULL if stdin is None else stdin,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
    except BaseException:
        if process is not None:
            _kill(process)
        raise
    return process


def signal_group(process: subprocess.Popen[bytes], sig: signal.Signals) -> bool:
    """Send ``sig`` to the process group led by ``process``; False when it is empty."""
    try:
        os.killpg(process.pid, sig)
    except ProcessLookupError:
        return False
    return True


def stop_all(processes: Sequence[subprocess.Popen[bytes]], grace: float) -> None:
    """Stop the groups of ``processes``: SIGTERM, then SIGKILL after ``grace`` seconds.

    Running leaders get SIGTERM together and share one grace period. Every group is
    then swept with SIGKILL, also when its leader already exited (a worker may not
    have), and every leader is reaped.
    """
    running = [p for p in processes if p.poll() is None and signal_group(p, signal.SIGTERM)]
    deadline = time.monotonic() + grace
    for process in running:
        try:
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            log.warning("pid %d ignored SIGTERM for %.0f s; sending SIGKILL", process.pid, grace)
    for process in processes:
        _kill(process)


def _kill(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL the group led by ``process`` and reap the leader."""
    signal_group(process, signal.SIGKILL)
    # SIGKILL cannot be ignored; the bound only guards against a leader stuck in D state.
    process.wait(timeout=30)


def kill_if_running(pid: int, marker: str) -> bool:
    """SIGKILL process ``pid`` if it runs a command line containing ``marker``.

    For a process started indirectly, whose PID the harness only read from a record
    (torchrun starts each worker in a session of its own, out of reach of its agent's
    process group): the command line in ``/proc`` must still name ``marker``, so a PID
    the kernel gave to another process since is never signalled. Returns whether a
    process was killed.
    """
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:  # gone (or not Linux)
        return False
    if marker.encode() not in command:  # another process, or a zombie (empty cmdline)
        return False
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return False
    return True
