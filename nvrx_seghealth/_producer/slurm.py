"""Asking Slurm about nodes and running array tasks, strictly and under a timeout.

The rules:

- Each query runs one Slurm client command in its own process group.
- A command that has not finished within the timeout is killed with its whole group.
- A failed, hung or unparseable answer raises :class:`SlurmError`. Callers treat it as
  "no information", never as "all healthy".
- A stop signal of the producer kills the running command's group too, also as it starts
  (:func:`~.schedule.stops_held`).
- Output is waited for in slices of :data:`SIGNAL_SLICE` seconds, so a late signal is acted
  on when its slice ends.
- A killed command is waited for :data:`KILL_WAIT` seconds at most. One that SIGKILL does
  not end is left behind with one WARNING, and the pass fails.

The two queries (Slurm 22.05 formats), parsed by :func:`parse_running_tasks` and
:func:`parse_nodes`:

- ``squeue -j JOB -r -h -t R -o '%F|%K|%P|%N'``: a job's running tasks;
- ``sinfo -p PARTITIONS -N -h -o '%N|%t|%E'``: the nodes of those partitions.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .._decision.unit import InvalidIdentityError, SlurmId, validate_id
from .._errors import SegmentHealthError
from .hostlist import HostlistError, expand
from .schedule import stops_held

__all__ = [
    "KILL_WAIT",
    "NODE_STATES",
    "SIGNAL_SLICE",
    "NodeState",
    "RunningTask",
    "SlurmClient",
    "SlurmError",
    "parse_nodes",
    "parse_running_tasks",
    "run_slurm_command",
]

log = logging.getLogger(__name__)

#: The longest a stop signal may wait to be acted on while a Slurm command runs. CPython
#: runs a signal handler between two bytecodes, so a signal just before a wait blocks does
#: not end that wait: the wait is made in slices.
SIGNAL_SLICE = 0.25
#: Seconds a killed Slurm command may take to end and close its output. SIGKILL cannot end
#: an uninterruptible sleep (``slurm.conf`` on a hung NFS mount), and a process the command
#: started in another session may hold its output.
KILL_WAIT = 5.0

#: ``--states`` names and the compact ``sinfo %t`` states each one covers.
#: ``no_respond`` is the ``*`` suffix that any state can carry.
NODE_STATES: dict[str, frozenset[str]] = {
    "drain": frozenset({"drain", "drng"}),
    "down": frozenset({"down"}),
    "fail": frozenset({"fail", "failg"}),
    "no_respond": frozenset(),
}

_NODE_LINE = re.compile(
    r"(?P<node>[^\s|]+)\|(?P<state>[a-z_]+)(?P<flags>[*~#!%$@^+-]*)\|(?P<reason>.*)"
)
_TASK_LINE = re.compile(
    r"(?P<job>[0-9]+)\|(?P<task>[0-9]+|N/A)\|(?P<partition>[^\s|,]+)\|(?P<hostlist>[^\s|]+)"
)


class SlurmError(RuntimeError, SegmentHealthError):
    """A Slurm command failed, hung, or answered something this module cannot parse."""


@dataclass(frozen=True)
class NodeState:
    """One node as ``sinfo`` shows it: compact state, suffix flags and reason."""

    node: str
    state: str
    flags: str
    reason: str

    def matches(self, states: Iterable[str]) -> bool:
        """Whether the node is in one of the ``states`` (keys of :data:`NODE_STATES`)."""
        return any(self.is_in(name) for name in states)

    def is_in(self, name: str) -> bool:
        """Whether the node is in state ``name`` (a key of :data:`NODE_STATES`)."""
        return self.state in NODE_STATES[name] or (name == "no_respond" and "*" in self.flags)

    def describe(self) -> str:
        """``n3 drng (disk errors)``: the node, its state as sinfo shows it, the reason."""
        reason = f" ({self.reason})" if self.reason else ""
        return f"{self.node} {self.state}{self.flags}{reason}"


@dataclass(frozen=True)
class RunningTask:
    """A running allocation unit: ids as in its decision file name (validated where
    ``squeue``'s answer entered), partition, hosts."""

    job_id: SlurmId
    task_id: SlurmId
    partition: str
    hosts: tuple[str, ...]


def run_slurm_command(argv: Sequence[str], timeout: float) -> str:
    """Run ``argv`` and return its stdout; kill its process group after ``timeout`` s.

    Raises:
        SlurmError: the command is missing, exits non-zero, or does not finish in time.
    """
    process: subprocess.Popen[str] | None = None
    try:
        with stops_held():  # a stop as it starts would leave it running, its pid unknown
            process = _start(argv)
        out, err = _output(process, argv, timeout)
    except BaseException:  # the timeout, or a signal handler's exception: leave nothing running
        if process is not None:
            _kill(process, argv)
        raise
    if process.returncode != 0:
        detail = " ".join(err.split()) or "no error message"
        raise SlurmError(f"{' '.join(argv)}: exit status {process.returncode}: {detail}")
    return out


def _start(argv: Sequence[str]) -> subprocess.Popen[str]:
    try:
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
            start_new_session=True,
        )
    except OSError as error:
        raise SlurmError(f"{argv[0]}: cannot run: {error}") from None


def _kill(process: subprocess.Popen[str], argv: Sequence[str]) -> None:
    """Kill the command's process group and reap it, waiting :data:`KILL_WAIT` seconds at
    most; what outlives that is left behind with a WARNING (see the module doc)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    try:
        process.communicate(timeout=KILL_WAIT)
        return
    except subprocess.TimeoutExpired:
        pass
    for stream in (process.stdout, process.stderr):
        if stream is not None:
            stream.close()
    if process.poll() is None:
        why = "it did not end after SIGKILL (uninterruptible sleep: a hung filesystem?)"
    else:
        why = "a process it started outside its process group still holds its output"
    log.warning(
        "%s (pid %d): %s; left behind after %g s", " ".join(argv), process.pid, why, KILL_WAIT
    )


def _output(process: subprocess.Popen[str], argv: Sequence[str], timeout: float) -> tuple[str, str]:
    """The command's stdout and stderr once it has ended, waited for in slices of
    :data:`SIGNAL_SLICE` seconds, at most ``timeout`` seconds in all."""
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        try:
            return process.communicate(timeout=max(0.0, min(SIGNAL_SLICE, remaining)))
        except subprocess.TimeoutExpired:
            if remaining <= SIGNAL_SLICE:
                raise SlurmError(
                    f"{' '.join(argv)}: no answer within {timeout:g} s (killed)"
                ) from None


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def parse_nodes(text: str) -> list[NodeState]:
    """Parse ``sinfo -N -h -o '%N|%t|%E'``; one entry per node (partitions deduplicated).

    Raises:
        SlurmError: no node at all, or a line that does not have the expected shape.
    """
    nodes: dict[str, NodeState] = {}
    for line in _lines(text):
        match = _NODE_LINE.fullmatch(line.strip())
        if match is None:
            raise SlurmError(f"unexpected sinfo line: {line!r}")
        reason = match["reason"].strip()
        nodes.setdefault(
            match["node"],
            NodeState(
                match["node"], match["state"], match["flags"], "" if reason == "none" else reason
            ),
        )
    if not nodes:
        raise SlurmError("sinfo listed no nodes")
    return list(nodes.values())


def parse_running_tasks(text: str, job_id: SlurmId) -> list[RunningTask]:
    """Parse ``squeue -j JOB -r -h -t R -o '%F|%K|%P|%N'`` for ``job_id``.

    A regular job (task ``N/A``) is its own unit: task id = job id. Each task id is made
    a :class:`~.._decision.unit.SlurmId` here, where it enters. Host lists are expanded
    (:func:`nvrx_seghealth._producer.hostlist.expand`).

    Raises:
        SlurmError: a malformed line, task id (``007``: Slurm writes no leading zeros) or
            host list, or a task of another array (``job_id`` names one task of an array
            instead of the array job).
    """
    tasks = []
    expanded: dict[str, tuple[str, ...]] = {}
    for line in _lines(text):
        match = _TASK_LINE.fullmatch(line.strip())
        if match is None:
            raise SlurmError(f"unexpected squeue line: {line!r}")
        if match["job"] != job_id:
            raise SlurmError(
                f"job {job_id} belongs to array job {match['job']}: give the array job id "
                f"(--job-id {match['job']})"
            )
        try:
            task = job_id if match["task"] == "N/A" else validate_id("task", match["task"])
        except InvalidIdentityError as error:
            raise SlurmError(f"unexpected squeue line {line!r}: {error}") from None
        hostlist = match["hostlist"]
        if hostlist not in expanded:
            try:
                expanded[hostlist] = tuple(expand(hostlist))
            except HostlistError as error:
                raise SlurmError(f"unexpected squeue line {line!r}: {error}") from None
        tasks.append(RunningTask(job_id, task, match["partition"], expanded[hostlist]))
    return tasks


@dataclass(frozen=True)
class SlurmClient:
    """The two queries, each bounded by ``timeout`` seconds."""

    timeout: float

    def nodes(self, partitions: Iterable[str]) -> list[NodeState]:
        """Every node of ``partitions`` with its state and reason."""
        out = run_slurm_command(
            ["sinfo", "-p", ",".join(sorted(set(partitions))), "-N", "-h", "-o", "%N|%t|%E"],
            self.timeout,
        )
        return parse_nodes(out)

    def running_tasks(self, job_id: SlurmId) -> list[RunningTask]:
        """The running tasks of array job (or regular job) ``job_id``."""
        out = run_slurm_command(
            ["squeue", "-j", job_id, "-r", "-h", "-t", "R", "-o", "%F|%K|%P|%N"], self.timeout
        )
        return parse_running_tasks(out, job_id)
