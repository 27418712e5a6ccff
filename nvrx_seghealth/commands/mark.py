"""``nvrx-seghealth mark`` and ``clear``: an operator writes one unit's decision by hand.

Both go through the producer API (:func:`nvrx_seghealth.publish_decision`,
:func:`nvrx_seghealth.clear_decision`): the file is replaced atomically, and no other
file of the directory is touched.

Exit codes: 0 written, 1 the write failed, 2 usage or configuration error.
Standard library plus PyYAML.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..artifact import clear_decision, publish_decision
from ..config import ConfigurationError
from .arguments import add_command, add_directory_option, directory_of, slurm_id
from .output import EXIT_FAILURE, EXIT_OK, usage_error

__all__ = ["clear_command", "mark_command", "register"]


def _unit_options(parser: argparse.ArgumentParser) -> None:
    add_directory_option(parser)
    parser.add_argument("--job-id", type=slurm_id, required=True, metavar="J",
                        help="the unit's job id (SLURM_ARRAY_JOB_ID, or SLURM_JOB_ID)")
    parser.add_argument("--task-id", type=slurm_id, required=True, metavar="T",
                        help="the unit's task id (SLURM_ARRAY_TASK_ID, or SLURM_JOB_ID)")


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

        exit status: 0 written, 1 the write failed, 2 usage error
        """,
        """
        nvrx-seghealth mark --dir /shared/job/shc --job-id 123 --task-id 7 \\
            --reason "n17: ECC errors, drained by ops (ticket 4711)"
        """,
    )
    _unit_options(mark)
    mark.add_argument("--reason", required=True, metavar="TEXT",
                      help="why the unit must not be used again (non-empty)")
    mark.set_defaults(func=mark_command)

    clear = add_command(
        subparsers,
        "clear",
        "mark one allocation unit healthy again (empty or remove its decision file)",
        """
        Replace the unit's decision file by an empty file, atomically (a zero-byte file
        means healthy), or remove it with --remove. No other file is touched.

        exit status: 0 cleared, 1 the write failed, 2 usage error
        """,
        """
        nvrx-seghealth clear --dir /shared/job/shc --job-id 123 --task-id 7
        nvrx-seghealth clear --dir /shared/job/shc --job-id 123 --task-id 7 --remove
        """,
    )
    _unit_options(clear)
    clear.add_argument("--remove", action="store_true",
                       help="remove the file instead of leaving it empty")
    clear.set_defaults(func=clear_command)


def mark_command(args: argparse.Namespace) -> int:
    """Publish ``--reason`` as the unit's decision; exit 0, 1 on a failed write, 2 usage."""
    if not args.reason.strip():
        return usage_error("mark", "--reason must not be empty: an empty file means healthy")
    try:
        directory = directory_of(args)
    except ConfigurationError as error:
        return usage_error("mark", str(error))
    text = args.reason if args.reason.endswith("\n") else args.reason + "\n"
    try:
        path = publish_decision(directory, args.job_id, args.task_id, text)
    except OSError as error:
        print(f"nvrx-seghealth mark: cannot write the decision in {directory}: {error}",
              file=sys.stderr)
        return EXIT_FAILURE
    print(f"marked job_id={args.job_id} task_id={args.task_id} unhealthy: {path}")
    return EXIT_OK


def clear_command(args: argparse.Namespace) -> int:
    """Empty (or remove) the unit's decision; exit 0, 1 on a failed write, 2 usage."""
    try:
        directory = directory_of(args)
    except ConfigurationError as error:
        return usage_error("clear", str(error))
    try:
        path = clear_decision(directory, args.job_id, args.task_id, remove=args.remove)
    except OSError as error:
        print(f"nvrx-seghealth clear: cannot clear the decision in {directory}: {error}",
              file=sys.stderr)
        return EXIT_FAILURE
    done = "removed" if args.remove else "emptied"
    print(f"cleared job_id={args.job_id} task_id={args.task_id} ({done}): {path}")
    return EXIT_OK
