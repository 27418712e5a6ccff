"""``nvrx-seghealth check``: the consumer's decision for one allocation unit, on demand.

The evaluation is the consumer's own (:func:`nvrx_seghealth._decision.decision_file.evaluate`, one
``stat`` bounded by the same default timeout, the file never opened). Unlike the
consumer, ``check`` evaluates on every launcher, whatever ``SLURM_PROCID`` says: it
answers an operator's question, it installs nothing.

A missing decision in a directory that does not exist proceeds, as for the launcher, with
a hint: a typo in ``--dir`` must not look like a healthy unit. So does one in the root
above per-job folders, where no launcher reads (:func:`~.._decision.listing.job_folder`).

Exit codes: :data:`~.output.EXIT_STATUSES` (``check``). Standard library plus PyYAML.
"""

from __future__ import annotations

import argparse
from typing import Any

from .._decision.decision_file import (
    DEFAULT_STAT_TIMEOUT,
    Decision,
    Outcome,
    decision_file_path,
    directory_problem,
    evaluate,
)
from .._decision.listing import job_folder
from .._decision.unit import AllocationUnit, InvalidIdentityError
from .._errors import ConfigurationError
from .arguments import DIRECTORY, JSON, add_command, directory_of, option, slurm_id
from .output import EXIT_FAILURE, EXIT_OK, paint, print_json

__all__ = ["check_command", "register"]

NAME = "check"


SUMMARY = "show the consumer's decision for one allocation unit (exit 1 when excluded)"
DESCRIPTION = """
    Evaluate the decision file of one allocation unit exactly as the launcher's
    process 0 does: one bounded stat, the file is never read. Without --job-id and
    --task-id the unit comes from this process's Slurm environment
    (SLURM_ARRAY_JOB_ID/SLURM_ARRAY_TASK_ID, else SLURM_JOB_ID), whatever its
    SLURM_PROCID.
    """
EXAMPLES = """
    nvrx-seghealth check --dir /shared/job/segment-health-check/123 --job-id 123 --task-id 7
    srun --ntasks-per-node=1 nvrx-seghealth check --dir /shared/job/segment-health-check/123
    NVRX_SEGMENT_HEALTH_CHECK_DIR=/shared/job/segment-health-check/123 \\
        nvrx-seghealth check --job-id 123 --task-id 7 --json
    """
OPTIONS = (
    DIRECTORY,
    option(
        "--job-id",
        type=slurm_id,
        metavar="J",
        help="the unit's job id (SLURM_ARRAY_JOB_ID, or SLURM_JOB_ID)",
    ),
    option(
        "--task-id",
        type=slurm_id,
        metavar="T",
        help="the unit's task id (SLURM_ARRAY_TASK_ID, or SLURM_JOB_ID)",
    ),
    JSON,
)


def register(subparsers: Any) -> None:
    """Add the ``check`` subcommand."""
    add_command(subparsers, NAME, SUMMARY, DESCRIPTION, EXAMPLES, OPTIONS, check_command)


def _unit_ids(args: argparse.Namespace) -> tuple[str, str]:
    if (args.job_id is None) != (args.task_id is None):
        raise ConfigurationError("give --job-id and --task-id together, or neither")
    if args.job_id is not None:
        return args.job_id, args.task_id
    try:
        unit = AllocationUnit.from_env()
    except InvalidIdentityError as error:
        raise ConfigurationError(f"invalid Slurm identity: {error}") from None
    if unit is None:
        raise ConfigurationError(
            "not inside a Slurm job (no SLURM_JOB_ID): give --job-id and --task-id"
        )
    return unit.job_id, unit.task_id


def _report(decision: Decision, job_id: str, task_id: str, hint: str | None) -> None:
    if not decision.proceed:
        verdict = paint("EXCLUDED", "red")
    elif decision.failed_open:
        verdict = paint("PROCEED (fail open)", "yellow")
    else:
        verdict = paint("PROCEED", "green")
    print(
        f"{verdict}  job_id={job_id} task_id={task_id}: {decision.outcome.value}: {decision.reason}"
    )
    print(f"  decision file: {decision.path}")
    if hint:
        print(f"  hint: {hint}")


def _hint(decision: Decision, directory: str, job_id: str) -> str | None:
    """Why an absent decision may not mean "healthy": the directory itself is missing,
    or it is the root above per-job folders."""
    if decision.outcome is not Outcome.ABSENT:
        return None
    problem = directory_problem(directory, DEFAULT_STAT_TIMEOUT)
    if problem is not None:
        return (
            f"{problem}, so no producer can have written there: fix --dir (or "
            "$NVRX_SEGMENT_HEALTH_CHECK_DIR), or create it where the producer writes"
        )
    folder = job_folder(directory, job_id, DEFAULT_STAT_TIMEOUT)
    if folder is None:
        return None
    return (
        f"{directory} holds per-job folders: the launchers of job {job_id} read {folder}, "
        f"not {directory}; check with --dir {folder}"
    )


def check_command(args: argparse.Namespace) -> int:
    """Evaluate one unit's decision; print it; see :data:`~.output.EXIT_STATUSES`.

    Raises:
        ConfigurationError: no usable directory or unit (the dispatcher exits 2).
    """
    directory = directory_of(args)
    job_id, task_id = _unit_ids(args)
    decision = evaluate(decision_file_path(directory, job_id, task_id), DEFAULT_STAT_TIMEOUT)
    hint = _hint(decision, directory, job_id)
    if args.json:
        print_json(
            {
                "path": decision.path,
                "job_id": job_id,
                "task_id": task_id,
                "outcome": decision.outcome.value,
                "reason": decision.reason,
                "size": decision.size,
                "proceed": decision.proceed,
                "hint": hint,
            }
        )
    else:
        _report(decision, job_id, task_id, hint)
    return EXIT_OK if decision.proceed else EXIT_FAILURE
