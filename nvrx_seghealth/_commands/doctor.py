"""``nvrx-seghealth doctor``: pre-flight of one launcher's segment health check.

Run it where a launcher would run (inside the job step, one per node). It checks, in
order: the directory setting (given, absolute), the directory itself (exists, is a
directory, how long a ``stat`` takes), the Slurm identity, whether this launcher is its
unit's process 0, the decision file it would consult and what the consumer would decide
now, the launch shape that the environment reveals (one launcher per node, no requeue
of an array task), and with ``--etcd`` the etcd-v3 cluster (:mod:`.doctor_etcd`).
``--kill-on-bad-exit`` is invisible to the environment, so it is always given as a hint; so are the routes to the backend that the launcher's
``check=off`` WARNING cannot see (:mod:`.._launcher.bypass`).

Every finding is one line: ``ok``, ``info``, ``hint``, ``warn`` or ``FAIL``; each ``FAIL``
says what to do. A decision path that is itself a symlink is a ``warn`` saying so; what
it points to is not judged (nor read). Who else can write the decision directory (or a directory above it)
without the sticky bit is a ``warn`` (:func:`~.._decision.problems.permission_problems`).
Exit codes: :data:`~.output.EXIT_STATUSES` (``doctor``). Standard library plus PyYAML.
"""

from __future__ import annotations

import argparse
import os
import re
import stat
import time
from typing import Any

from .._decision import boundedfs
from .._decision.artifact import DEFAULT_STAT_TIMEOUT, Decision, Outcome, artifact_path, evaluate
from .._decision.boundedstat import stat_within
from .._decision.helperprocess import HelperTimeout
from .._decision.problems import permission_problems
from .._decision.unit import AllocationUnit, InvalidIdentityError
from .._errors import ConfigurationError
from .._launcher.bypass import standalone_asked
from .arguments import add_command, add_directory_option, directory_of
from .doctor_etcd import etcd_findings
from .output import EXIT_FAILURE, EXIT_OK, paint, print_json

__all__ = ["doctor_command", "register"]

#: A stat slower than this (seconds) is worth a warning: a launcher pays it per rendezvous.
SLOW_STAT = 1.0

_LEVEL_COLOURS = {"ok": "green", "info": None, "hint": "dim", "warn": "yellow", "FAIL": "red"}


def register(subparsers: Any) -> None:
    """Add the ``doctor`` subcommand."""
    parser = add_command(
        subparsers,
        "doctor",
        "pre-flight check of a launcher's segment health setup",
        """
        Check what one launcher needs: an absolute decision directory that exists and
        answers a stat quickly, a valid Slurm identity, whether this launcher is its
        unit's process 0, the decision file it will consult, and the launch shape
        (one launcher per node; --kill-on-bad-exit=1; --no-requeue for arrays).
        Run it the way the launchers run, inside the job step. Warns when users other
        than the directory's owner can write in it (or above it) without the sticky bit:
        any of them could exclude any unit.
        """,
        """
        srun --ntasks-per-node=1 nvrx-seghealth doctor --dir /shared/job/shc
        nvrx-seghealth doctor --json        # directory from $NVRX_SEGMENT_HEALTH_CHECK_DIR
        nvrx-seghealth doctor --dir /shared/job/shc --etcd etcd1:2379,etcd2:2379,etcd3:2379
        """,
    )
    add_directory_option(parser)
    parser.add_argument(
        "--etcd",
        metavar="ENDPOINTS",
        help="also check the etcd-v3 cluster of the launchers' --rdzv-endpoint "
        "(host:port, comma-separated: every member)",
    )
    parser.add_argument(
        "--etcd-conf",
        metavar="KEY=VALUE,...",
        default="",
        help="the launchers' --rdzv-conf keys for etcd (protocol, ca_cert, ssl_cert, "
        "ssl_cert_key, user, password_file, read_timeout)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(func=doctor_command)


Finding = tuple[str, str]


def _directory_finding(directory: str) -> Finding:
    started = time.monotonic()
    try:
        mode = stat_within(directory, DEFAULT_STAT_TIMEOUT).st_mode
    except FileNotFoundError:
        return (
            "FAIL",
            (
                f"directory {directory} does not exist: create it on storage that "
                f"every launcher mounts (mkdir -p {directory})"
            ),
        )
    except HelperTimeout as error:
        return ("FAIL", f"directory {directory}: {error}; the shared filesystem may hang")
    except OSError as error:
        return ("FAIL", f"directory {directory} cannot be examined: {error}")
    if not stat.S_ISDIR(mode):
        return (
            "FAIL",
            (
                f"{directory} is not a directory: point --dir at the directory "
                "that holds the decision files"
            ),
        )
    return (
        "ok",
        f"directory {directory} exists (stat took {(time.monotonic() - started) * 1000:.1f} ms)",
    )


def _planted(path: str, decision: Decision) -> str | None:
    """Why the entry at ``path`` itself is not what a producer writes although the
    launcher's ``stat`` (which follows symlinks) saw a regular file or nothing: e.g.
    ``not a regular file: symbolic link``; ``None`` when it is one, or cannot be told.

    The entry is looked at without following it, within a time bound
    (:func:`nvrx_seghealth._decision.boundedfs.read_current`), so what a symlink points to is
    never read.
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
    path = artifact_path(directory, unit.job_id, unit.task_id)
    started = time.monotonic()
    decision = evaluate(path, DEFAULT_STAT_TIMEOUT)
    took = time.monotonic() - started
    findings: list[Finding] = [
        ("info", f"process 0 of this unit consults {path}"),
        (
            "warn" if took > SLOW_STAT else "ok",
            (
                f"stat of the decision file took {took * 1000:.1f} ms (bound "
                f"{DEFAULT_STAT_TIMEOUT:g} s)"
            ),
        ),
    ]
    planted = _planted(path, decision)
    if planted is not None:
        findings.append(
            (
                "warn",
                (
                    f"{path} is {planted}: the launcher follows it and decides by whatever "
                    "it points to, which anyone who can write the directory may have put "
                    f"there; producers write regular files: remove it (rm {path})"
                ),
            )
        )
    elif decision.failed_open:
        findings.append(
            (
                "FAIL",
                (
                    f"the decision cannot be judged ({decision.reason}): the "
                    "launcher would fail open and ignore the producer; make "
                    f"{path} a regular file the launcher can stat, or remove it"
                ),
            )
        )
    elif decision.outcome is Outcome.UNHEALTHY:
        findings.append(
            (
                "warn",
                (
                    f"the unit is marked unhealthy ({decision.reason}): its "
                    "process 0 will be excluded at the next rendezvous"
                ),
            )
        )
    else:
        findings.append(
            ("ok", f"decision now: proceed ({decision.outcome.value}: {decision.reason})")
        )
    return findings


def _identity_findings(environ: dict[str, str]) -> tuple[list[Finding], AllocationUnit | None]:
    try:
        unit = AllocationUnit.from_env(environ)
    except InvalidIdentityError as error:
        return [("FAIL", f"invalid Slurm identity: {error}")], None
    if unit is None:
        return [
            (
                "FAIL",
                (
                    "not inside a Slurm job (no SLURM_JOB_ID): run doctor as the "
                    "launchers run, e.g. srun --ntasks-per-node=1 nvrx-seghealth "
                    "doctor --dir DIR"
                ),
            )
        ], None
    kind = "array task" if unit.is_array else "regular job"
    findings: list[Finding] = [
        ("ok", f"Slurm identity: {kind}, job_id={unit.job_id} task_id={unit.task_id}")
    ]
    if unit.is_process_zero:
        findings.append(
            (
                "info",
                (
                    "SLURM_PROCID=0: this launcher installs the check and "
                    "reads the decision before every rendezvous"
                ),
            )
        )
    else:
        findings.append(
            (
                "info",
                (
                    f"SLURM_PROCID={unit.procid}: this launcher does not read "
                    "the decision; its unit's process 0 does"
                ),
            )
        )
    return findings, unit


def _launch_shape_findings(environ: dict[str, str], unit: AllocationUnit | None) -> list[Finding]:
    findings: list[Finding] = []
    per_node = environ.get("SLURM_STEP_TASKS_PER_NODE") or environ.get("SLURM_TASKS_PER_NODE")
    counts = [int(count) for count in re.findall(r"(\d+)(?:\(x\d+\))?", per_node or "")]
    if not counts:
        findings.append(("hint", "run exactly one launcher per node (srun --ntasks-per-node=1)"))
    elif max(counts) > 1:
        findings.append(
            (
                "FAIL",
                (
                    f"{max(counts)} launchers on a node (tasks per node "
                    f"{per_node}): run one launcher per node with srun "
                    "--ntasks-per-node=1"
                ),
            )
        )
    else:
        findings.append(("ok", "one launcher per node"))
    findings.append(
        (
            "hint",
            (
                "start the launchers with srun --kill-on-bad-exit=1 so that an "
                "excluded process 0 ends its unit (not visible from here)"
            ),
        )
    )
    if standalone_asked([], environ):
        findings.append(
            (
                "FAIL",
                (
                    f"PET_STANDALONE={environ['PET_STANDALONE']} makes torchrun replace any "
                    "--rdzv-backend with c10d, so the segment health check would be off: "
                    "unset it and give --rdzv-endpoint"
                ),
            )
        )
    else:
        findings.append(
            (
                "hint",
                (
                    "never start the launchers with --standalone (torchrun then replaces the "
                    "backend with c10d and the check is off; accelerate falls back to it on one "
                    "machine when its --main_process_port is in use)"
                ),
            )
        )
    findings.append(
        (
            "hint",
            (
                "give --rdzv-backend on the launcher's command line: when torch replaces the "
                "backend, the check=off WARNING reads only torchrun's and accelerate launch's "
                "own options (not accelerate config's rdzv_backend, nor a launcher's own code, "
                "nor another launcher's abbreviations)"
            ),
        )
    )
    restarts = environ.get("SLURM_RESTART_COUNT", "0")
    if unit is not None and unit.is_array and restarts not in ("", "0"):
        findings.append(
            (
                "FAIL",
                (
                    f"this array task was requeued (SLURM_RESTART_COUNT="
                    f"{restarts}): submit job arrays with sbatch --no-requeue"
                ),
            )
        )
    return findings


def doctor_command(args: argparse.Namespace) -> int:
    """Print the pre-flight findings; exit 1 when any is a ``FAIL``, else 0."""
    environ = dict(os.environ)
    findings: list[Finding] = []
    directory: str | None = None
    try:
        absolute = directory_of(args)
    except ConfigurationError as error:
        findings.append(("FAIL", str(error)))
    else:
        found = _directory_finding(absolute)
        findings += [("ok", f"decision directory {absolute} is absolute"), found]
        directory = absolute if found[0] == "ok" else None
        if directory is not None:
            problems = permission_problems(directory, DEFAULT_STAT_TIMEOUT)
            real = os.path.realpath(directory)
            where = directory if real == directory else f"{real} (reached through {directory})"
            findings += [("warn", problem) for problem in problems] or [
                ("ok", f"no other account can replace or remove another's decision in {where}")
            ]
    identity, unit = _identity_findings(environ)
    findings += identity
    if directory is not None and unit is not None:
        findings += _decision_findings(directory, unit)
    findings += _launch_shape_findings(environ, unit)
    if args.etcd is not None:
        findings += etcd_findings(args.etcd, args.etcd_conf)
    failed = any(level == "FAIL" for level, _ in findings)
    if args.json:
        print_json(
            {
                "ok": not failed,
                "findings": [{"level": lvl, "message": msg} for lvl, msg in findings],
            }
        )
    else:
        for level, message in findings:
            print(f"{paint(level.ljust(4), _LEVEL_COLOURS[level])}  {message}")
        print(
            paint("problems found: see the FAIL lines", "red")
            if failed
            else paint("no problems found", "green")
        )
    return EXIT_FAILURE if failed else EXIT_OK
