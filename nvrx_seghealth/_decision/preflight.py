"""Pre-flight: what one launcher's segment health check would meet, told as findings.

:func:`preflight` looks at a launcher's environment and its decision directory, and
returns :class:`Finding` values in order. It judges the directory, the Slurm identity,
the decision file process 0 would consult, and the launch shape the environment shows.
``nvrx-seghealth doctor`` prints them; this module only looks.

* Every call into the directory is bounded by the launcher's own default
  (:data:`~.decision_file.DEFAULT_STAT_TIMEOUT`).
* Every ``FAIL`` says what to do.
* A decision path that is itself a symlink is a ``warn``; what it points to is never
  judged nor read.
* ``srun --kill-on-bad-exit`` is invisible to the environment, so it is always a hint.
* Whether torchrun's standalone mode is asked is the launcher's rule: the caller says.

Standard library only.
"""

from __future__ import annotations

import enum
import os
import re
import stat
import time
from collections.abc import Mapping
from dataclasses import dataclass

from . import boundedfs
from .boundedstat import stat_within
from .decision_file import DEFAULT_STAT_TIMEOUT, Decision, Outcome, decision_file_path, evaluate
from .helperprocess import HelperTimeout
from .problems import permission_problems
from .unit import AllocationUnit, InvalidIdentityError

__all__ = ["SLOW_STAT", "Finding", "Level", "preflight"]

#: A stat slower than this (seconds) is worth a warning: a launcher pays it per rendezvous.
SLOW_STAT = 1.0


class Level(enum.Enum):
    """How much a finding matters; the value is its token in ``doctor``'s output."""

    OK = "ok"
    INFO = "info"
    HINT = "hint"
    WARN = "warn"
    FAIL = "FAIL"


@dataclass(frozen=True)
class Finding:
    """One thing the pre-flight found: its level and one message."""

    level: Level
    message: str


#: Said whatever the environment: what it cannot show.
_KILL_ON_BAD_EXIT = Finding(
    Level.HINT,
    "start the launchers with srun --kill-on-bad-exit=1 so that an excluded process 0 "
    "ends its unit (not visible from here)",
)
_NEVER_STANDALONE = Finding(
    Level.HINT,
    "never start the launchers with --standalone (torchrun then replaces the backend with "
    "c10d and the check is off; accelerate falls back to it on one machine when its "
    "--main_process_port is in use)",
)
_BACKEND_ON_THE_COMMAND_LINE = Finding(
    Level.HINT,
    "give --rdzv-backend on the launcher's command line, in full: when torch replaces the "
    "backend, the check=off WARNING reads the launcher's own options (torchrun's, "
    "torch.distributed.launch's, accelerate launch's; any other launcher's are scanned for "
    "torchrun's names), not accelerate config's rdzv_backend, nor a launcher's own code, "
    "nor another launcher's abbreviations",
)


def preflight(
    environ: Mapping[str, str], directory: str | None, *, standalone: bool
) -> list[Finding]:
    """The findings about a launcher with ``environ`` and the decision ``directory``.

    ``directory`` is absolute (as the settings give it), or ``None`` when the setting is
    unusable: the caller then says why. ``standalone``: the launcher would run torchrun's
    standalone mode, which replaces the backend.
    """
    findings: list[Finding] = []
    usable = None
    if directory is not None:
        found, usable = _directory_findings(directory)
        findings += found
    identity, unit = _identity_findings(environ)
    findings += identity
    if usable is not None and unit is not None:
        findings += _decision_findings(usable, unit)
    findings += _launch_shape_findings(environ, unit, standalone=standalone)
    return findings


def _directory_findings(directory: str) -> tuple[list[Finding], str | None]:
    """The findings about ``directory``, and it when it is a directory that answers."""
    found = _directory_finding(directory)
    findings = [Finding(Level.OK, f"decision directory {directory} is absolute"), found]
    if found.level is not Level.OK:
        return findings, None
    problems = permission_problems(directory, DEFAULT_STAT_TIMEOUT)
    findings += [Finding(Level.WARN, problem) for problem in problems]
    if not problems:
        real = os.path.realpath(directory)  # not time-bounded, as permission_problems
        where = directory if real == directory else f"{real} (reached through {directory})"
        message = f"no other account can replace or remove another's decision in {where}"
        findings.append(Finding(Level.OK, message))
    return findings, directory


def _directory_finding(directory: str) -> Finding:
    """Whether ``directory`` exists and is a directory, and how long its stat took."""
    started = time.monotonic()
    try:
        mode = stat_within(directory, DEFAULT_STAT_TIMEOUT).st_mode
    except FileNotFoundError:
        return Finding(
            Level.FAIL,
            f"directory {directory} does not exist: create it on storage that every "
            f"launcher mounts (mkdir -p {directory})",
        )
    except HelperTimeout as error:
        return Finding(
            Level.FAIL, f"directory {directory}: {error}; the shared filesystem may hang"
        )
    except OSError as error:
        return Finding(Level.FAIL, f"directory {directory} cannot be examined: {error}")
    if not stat.S_ISDIR(mode):
        return Finding(
            Level.FAIL,
            f"{directory} is not a directory: point --dir at the directory that holds the "
            "decision files",
        )
    took = (time.monotonic() - started) * 1000
    return Finding(Level.OK, f"directory {directory} exists (stat took {took:.1f} ms)")


def _planted(path: str, decision: Decision) -> str | None:
    """Why the entry at ``path`` is not what a producer writes, although the launcher's
    ``stat`` (which follows symlinks) saw a regular file or nothing.

    For example ``not a regular file: symbolic link``. ``None`` when it is one, or when
    it cannot be told. The entry is looked at without following it, within a time bound
    (:func:`~.boundedfs.read_current`), so what a symlink points to is never read.
    """
    if decision.outcome not in (Outcome.UNHEALTHY, Outcome.CLEAR, Outcome.ABSENT):
        return None
    try:
        current = boundedfs.read_current(path, DEFAULT_STAT_TIMEOUT)
    except OSError:  # HelperTimeout too: the stat above answered, this did not
        return None
    if current.kind == "unreadable" and current.error.startswith("not a regular file"):
        return current.error
    return None


def _decision_findings(directory: str, unit: AllocationUnit) -> list[Finding]:
    """The decision file process 0 of ``unit`` consults, its stat's time, and the verdict."""
    path = decision_file_path(directory, unit.job_id, unit.task_id)
    started = time.monotonic()
    decision = evaluate(path, DEFAULT_STAT_TIMEOUT)
    took = time.monotonic() - started
    return [
        Finding(Level.INFO, f"process 0 of this unit consults {path}"),
        Finding(
            Level.WARN if took > SLOW_STAT else Level.OK,
            f"stat of the decision file took {took * 1000:.1f} ms (bound "
            f"{DEFAULT_STAT_TIMEOUT:g} s)",
        ),
        _verdict_finding(path, decision),
    ]


def _verdict_finding(path: str, decision: Decision) -> Finding:
    """What process 0 would decide now, or why the entry at ``path`` is suspect."""
    planted = _planted(path, decision)
    if planted is not None:
        return Finding(
            Level.WARN,
            f"{path} is {planted}: the launcher follows it and decides by whatever it points "
            "to, which anyone who can write the directory may have put there; producers "
            f"write regular files: remove it (rm {path})",
        )
    if decision.failed_open:
        return Finding(
            Level.FAIL,
            f"the decision cannot be judged ({decision.reason}): the launcher would fail open "
            f"and ignore the producer; make {path} a regular file the launcher can stat, or "
            "remove it",
        )
    if decision.outcome is Outcome.UNHEALTHY:
        return Finding(
            Level.WARN,
            f"the unit is marked unhealthy ({decision.reason}): its process 0 will be "
            "excluded at the next rendezvous",
        )
    return Finding(Level.OK, f"decision now: proceed ({decision.outcome.value}: {decision.reason})")


def _identity_findings(
    environ: Mapping[str, str],
) -> tuple[list[Finding], AllocationUnit | None]:
    """The Slurm identity and this launcher's role, and the unit when it has one."""
    try:
        unit = AllocationUnit.from_env(environ)
    except InvalidIdentityError as error:
        return [Finding(Level.FAIL, f"invalid Slurm identity: {error}")], None
    if unit is None:
        not_in_a_job = Finding(
            Level.FAIL,
            "not inside a Slurm job (no SLURM_JOB_ID): run doctor as the launchers run, e.g. "
            "srun --ntasks-per-node=1 nvrx-seghealth doctor --dir DIR",
        )
        return [not_in_a_job], None
    kind = "array task" if unit.is_array else "regular job"
    identity = f"Slurm identity: {kind}, job_id={unit.job_id} task_id={unit.task_id}"
    if unit.is_process_zero:
        role = (
            "SLURM_PROCID=0: this launcher installs the check and reads the decision before "
            "every rendezvous"
        )
    else:
        role = (
            f"SLURM_PROCID={unit.procid}: this launcher does not read the decision; its "
            "unit's process 0 does"
        )
    return [Finding(Level.OK, identity), Finding(Level.INFO, role)], unit


def _launch_shape_findings(
    environ: Mapping[str, str], unit: AllocationUnit | None, *, standalone: bool
) -> list[Finding]:
    """What the environment shows of how the launchers were started, and the hints for
    what it cannot show."""
    findings = [
        _per_node_finding(environ),
        _KILL_ON_BAD_EXIT,
        _standalone_finding(environ) if standalone else _NEVER_STANDALONE,
        _BACKEND_ON_THE_COMMAND_LINE,
    ]
    restarts = environ.get("SLURM_RESTART_COUNT", "0")
    if unit is not None and unit.is_array and restarts not in ("", "0"):
        findings.append(
            Finding(
                Level.FAIL,
                f"this array task was requeued (SLURM_RESTART_COUNT={restarts}): submit "
                "job arrays with sbatch --no-requeue",
            )
        )
    return findings


def _per_node_finding(environ: Mapping[str, str]) -> Finding:
    """One launcher per node, by Slurm's tasks per node (``2(x3),1``)."""
    per_node = environ.get("SLURM_STEP_TASKS_PER_NODE") or environ.get("SLURM_TASKS_PER_NODE")
    counts = [int(count) for count in re.findall(r"(\d+)(?:\(x\d+\))?", per_node or "")]
    if not counts:
        return Finding(Level.HINT, "run exactly one launcher per node (srun --ntasks-per-node=1)")
    if max(counts) > 1:
        return Finding(
            Level.FAIL,
            f"{max(counts)} launchers on a node (tasks per node {per_node}): run one launcher "
            "per node with srun --ntasks-per-node=1",
        )
    return Finding(Level.OK, "one launcher per node")


def _standalone_finding(environ: Mapping[str, str]) -> Finding:
    """Standalone asked for by the environment: the check would be off."""
    return Finding(
        Level.FAIL,
        f"PET_STANDALONE={environ.get('PET_STANDALONE', '')} makes torchrun replace any "
        "--rdzv-backend with c10d, so the segment health check would be off: unset it and "
        "give --rdzv-endpoint",
    )
