"""``nvrx-seghealth mark`` and ``clear``: an operator writes one unit's decision by hand.

Both write as the producer API does (:mod:`nvrx_seghealth._decision.files`): the file is
replaced atomically under the directory's lock, so a producer's pass never overwrites a
``mark`` that lands while it runs, and no other file of the directory is touched. Every
call into the directory runs in a helper process bounded by ``--fs-timeout``: on a hung
filesystem the command reports it and exits 1 instead of hanging. A ``--dir`` that holds
per-job folders is the root above them, where no launcher reads: a warning names the
job's folder (:func:`~.._decision.listing.job_folder`).

Exit codes: :data:`~.output.EXIT_STATUSES` (``mark``, ``clear``).
Standard library plus PyYAML.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from .._decision import boundedfs
from .._decision.decision_file import decision_file_path
from .._decision.files import Result
from .._decision.listing import job_folder
from .._decision.problems import write_problem
from .._decision.unit import InvalidIdentityError, validate_id
from .._errors import ConfigurationError
from .arguments import (
    DIRECTORY,
    FS_TIMEOUT_OPTION,
    add_command,
    directory_of,
    option,
    slurm_id,
)
from .output import EXIT_FAILURE, EXIT_OK

__all__ = ["clear_command", "mark_command", "register"]


def _unit_id(option: str) -> Callable[[str], str]:
    """The argparse type of ``option``: :func:`~.arguments.slurm_id`, and an id with
    leading zeros (``007``, which Slurm never writes) is refused with ``give OPTION 7``."""

    def parse(value: str) -> str:
        try:
            validate_id(option, value)
        except InvalidIdentityError as error:
            if error.canonical is not None:
                raise argparse.ArgumentTypeError(
                    f"{value!r} has leading zeros, which Slurm never writes: give {option} "
                    f"{error.canonical}"
                ) from None
        return slurm_id(value)

    return parse


#: The options of both commands: the unit and where its decision is.
_UNIT_OPTIONS = (
    DIRECTORY,
    option(
        "--job-id",
        type=_unit_id("--job-id"),
        required=True,
        metavar="J",
        help="the unit's job id (SLURM_ARRAY_JOB_ID, or SLURM_JOB_ID)",
    ),
    option(
        "--task-id",
        type=_unit_id("--task-id"),
        required=True,
        metavar="T",
        help="the unit's task id (SLURM_ARRAY_TASK_ID, or SLURM_JOB_ID)",
    ),
    FS_TIMEOUT_OPTION,
)

MARK_SUMMARY = "mark one allocation unit unhealthy (write its decision file)"
MARK_DESCRIPTION = """
    Write the --reason text as the unit's decision file, atomically. The unit's
    process 0 is excluded at its next rendezvous. The text is diagnostic context for
    people (`nvrx-seghealth status` shows its first line); the launcher never reads it.
    A mark replaces whatever decision the unit had (a producer's included); a
    producer never clears it, as it is not the producer's own.
    """
MARK_EXAMPLES = """
    nvrx-seghealth mark --dir /shared/job/segment-health-check/123 --job-id 123 --task-id 7 \\
        --reason "n17: ECC errors, drained by ops (ticket 4711)"
    """
MARK_OPTIONS = (
    *_UNIT_OPTIONS,
    option(
        "--reason",
        required=True,
        metavar="TEXT",
        help="why the unit must not be used again (non-empty)",
    ),
)

CLEAR_SUMMARY = "mark one allocation unit healthy again (empty or remove its decision file)"
CLEAR_DESCRIPTION = """
    Replace the unit's decision file by an empty file, atomically (a zero-byte file
    means healthy), or remove it with --remove. A unit without a decision file keeps
    none. No other file is touched. A producer that still sees the unit's nodes
    unavailable publishes it again at its next pass.
    """
CLEAR_EXAMPLES = """
    nvrx-seghealth clear --dir /shared/job/segment-health-check/123 --job-id 123 --task-id 7
    nvrx-seghealth clear --dir /shared/job/segment-health-check/123 --job-id 123 --task-id 7 \\
        --remove
    """
CLEAR_OPTIONS = (
    *_UNIT_OPTIONS,
    option("--remove", action="store_true", help="remove the file instead of leaving it empty"),
)


def register(subparsers: Any) -> None:
    """Add the ``mark`` and ``clear`` subcommands."""
    add_command(
        subparsers,
        "mark",
        MARK_SUMMARY,
        MARK_DESCRIPTION,
        MARK_EXAMPLES,
        MARK_OPTIONS,
        mark_command,
    )
    add_command(
        subparsers,
        "clear",
        CLEAR_SUMMARY,
        CLEAR_DESCRIPTION,
        CLEAR_EXAMPLES,
        CLEAR_OPTIONS,
        clear_command,
    )


def _write(
    command: str, args: argparse.Namespace, content: bytes | None, *, create: bool = True
) -> tuple[int, Result | None, str]:
    """Write ``content`` (``None``: remove) as the unit's decision.

    With ``create=False`` a unit without a decision file keeps none.

    Returns the exit code, the result (``None`` when nothing was written) and the path.

    Raises:
        ConfigurationError: no usable directory (the dispatcher exits 2).
    """
    directory = directory_of(args)
    path = decision_file_path(directory, args.job_id, args.task_id)
    try:
        result = boundedfs.replace(path, content, None, args.fs_timeout, create=create)
    except OSError as error:  # LockBusyError and HelperTimeout too
        print(
            f"nvrx-seghealth {command}: job_id={args.job_id} task_id={args.task_id} not "
            f"written: {write_problem(error, directory, path, args.fs_timeout)}",
            file=sys.stderr,
        )
        return EXIT_FAILURE, None, path
    for warning in result.warnings:
        print(f"nvrx-seghealth {command}: warning: {warning}", file=sys.stderr)
    folder = job_folder(directory, args.job_id, args.fs_timeout)
    if folder is not None:
        print(
            f"nvrx-seghealth {command}: warning: {directory} holds per-job folders: the "
            f"launchers of job {args.job_id} read {folder}, not {directory}; {command} "
            f"again with --dir {folder}",
            file=sys.stderr,
        )
    return EXIT_OK, result, path


def mark_command(args: argparse.Namespace) -> int:
    """Publish ``--reason`` as the unit's decision; see :data:`~.output.EXIT_STATUSES`.

    Raises:
        ConfigurationError: an empty ``--reason``, or no usable directory (the
            dispatcher exits 2).
    """
    if not args.reason.strip():
        raise ConfigurationError("--reason must not be empty: an empty file means healthy")
    text = args.reason if args.reason.endswith("\n") else args.reason + "\n"
    code, result, path = _write("mark", args, text.encode())
    if result is not None:
        print(f"marked job_id={args.job_id} task_id={args.task_id} unhealthy: {path}")
    return code


def clear_command(args: argparse.Namespace) -> int:
    """Empty (or remove) the unit's decision; see :data:`~.output.EXIT_STATUSES`."""
    code, result, path = _write("clear", args, None if args.remove else b"", create=False)
    if result is not None:
        if result.before.kind == "absent":
            print(
                f"nothing to clear: job_id={args.job_id} task_id={args.task_id} has no "
                f"decision file ({path})"
            )
        else:
            done = "removed" if args.remove else "emptied"
            print(f"cleared job_id={args.job_id} task_id={args.task_id} ({done}): {path}")
    return code
