"""``nvrx-seghealth mark`` and ``clear``: an operator writes one unit's decision by hand.

Both write as the producer API does (:mod:`nvrx_seghealth._decision.files`): the file is
replaced atomically under the directory's lock, so a producer's pass never overwrites a
``mark`` that lands while it runs, and no other file of the directory is touched. Every
call into the directory runs in a helper process bounded by ``--fs-timeout``: on a hung
filesystem the command reports it and exits 1 instead of hanging.

Exit codes: :data:`~.output.EXIT_STATUSES` (``mark``, ``clear``).
Standard library plus PyYAML.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from .._decision import boundedfs
from .._decision.artifact import artifact_path
from .._decision.files import Result
from .._decision.problems import write_problem
from .._decision.unit import InvalidIdentityError, validate_id
from .._errors import ConfigurationError
from .arguments import (
    add_command,
    add_directory_option,
    add_fs_timeout_option,
    directory_of,
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


def _unit_options(parser: argparse.ArgumentParser) -> None:
    add_directory_option(parser)
    parser.add_argument(
        "--job-id",
        type=_unit_id("--job-id"),
        required=True,
        metavar="J",
        help="the unit's job id (SLURM_ARRAY_JOB_ID, or SLURM_JOB_ID)",
    )
    parser.add_argument(
        "--task-id",
        type=_unit_id("--task-id"),
        required=True,
        metavar="T",
        help="the unit's task id (SLURM_ARRAY_TASK_ID, or SLURM_JOB_ID)",
    )
    add_fs_timeout_option(parser)


def register(subparsers: Any) -> None:
    """Add the ``mark`` and ``clear`` subcommands."""
    mark = add_command(
        subparsers,
        "mark",
        "mark one allocation unit unhealthy (write its decision file)",
        """
        Write the --reason text as the unit's decision file, atomically. The unit's
        process 0 is excluded at its next rendezvous. The text is diagnostic context for
        people (`nvrx-seghealth status` shows its first line); the launcher never reads it.
        A mark replaces whatever decision the unit had (a producer's included); a
        producer never clears it, as it is not the producer's own.
        """,
        """
        nvrx-seghealth mark --dir /shared/job/shc --job-id 123 --task-id 7 \\
            --reason "n17: ECC errors, drained by ops (ticket 4711)"
        """,
    )
    _unit_options(mark)
    mark.add_argument(
        "--reason",
        required=True,
        metavar="TEXT",
        help="why the unit must not be used again (non-empty)",
    )
    mark.set_defaults(func=mark_command)

    clear = add_command(
        subparsers,
        "clear",
        "mark one allocation unit healthy again (empty or remove its decision file)",
        """
        Replace the unit's decision file by an empty file, atomically (a zero-byte file
        means healthy), or remove it with --remove. No other file is touched. A producer
        that still sees the unit's nodes unavailable publishes it again at its next pass.
        """,
        """
        nvrx-seghealth clear --dir /shared/job/shc --job-id 123 --task-id 7
        nvrx-seghealth clear --dir /shared/job/shc --job-id 123 --task-id 7 --remove
        """,
    )
    _unit_options(clear)
    clear.add_argument(
        "--remove", action="store_true", help="remove the file instead of leaving it empty"
    )
    clear.set_defaults(func=clear_command)


def _write(
    command: str, args: argparse.Namespace, content: bytes | None
) -> tuple[int, Result | None, str]:
    """Write ``content`` (``None``: remove) as the unit's decision.

    Returns the exit code, the result (``None`` when nothing was written) and the path.

    Raises:
        ConfigurationError: no usable directory (the dispatcher exits 2).
    """
    directory = directory_of(args)
    path = artifact_path(directory, args.job_id, args.task_id)
    try:
        result = boundedfs.replace(path, content, None, args.fs_timeout)
    except OSError as error:  # LockBusyError and HelperTimeout too
        print(
            f"nvrx-seghealth {command}: job_id={args.job_id} task_id={args.task_id} not "
            f"written: {write_problem(error, directory, path, args.fs_timeout)}",
            file=sys.stderr,
        )
        return EXIT_FAILURE, None, path
    for warning in result.warnings:
        print(f"nvrx-seghealth {command}: warning: {warning}", file=sys.stderr)
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
    code, result, path = _write("clear", args, None if args.remove else b"")
    if result is not None:
        if args.remove and result.before.kind == "absent":
            print(
                f"nothing to remove: job_id={args.job_id} task_id={args.task_id} has no "
                f"decision file ({path})"
            )
        else:
            done = "removed" if args.remove else "emptied"
            print(f"cleared job_id={args.job_id} task_id={args.task_id} ({done}): {path}")
    return code
