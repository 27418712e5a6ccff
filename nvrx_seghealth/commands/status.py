"""``nvrx-seghealth status``: every decision file of a directory, in one table.

Each file is judged as the consumer judges it (:func:`nvrx_seghealth.artifact.evaluate`),
so the state column says what the unit's process 0 would do. For an unhealthy file the
table also shows the first line of the producer's diagnostic text, read with a bounded,
non-blocking read of regular files only.

Exit codes: 0 listed (also when empty), 1 the directory cannot be listed, 2 usage or
configuration error. Standard library plus PyYAML.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from typing import Any

from ..artifact import DEFAULT_STAT_TIMEOUT, Decision, Outcome, evaluate
from ..boundedstat import stat_within
from ..config import ConfigurationError
from .arguments import add_command, add_directory_option, directory_of, slurm_id
from .decisions import DecisionFile, first_line, list_decisions, read_head
from .output import EXIT_FAILURE, EXIT_OK, format_age, print_json, render_table, usage_error

__all__ = ["register", "status_command"]

NAME = "status"

_STATE_COLOURS = {
    Outcome.UNHEALTHY: "red",
    Outcome.CLEAR: "green",
    Outcome.ABSENT: None,
    Outcome.UNREADABLE: "yellow",
    Outcome.NOT_REGULAR: "yellow",
}


def register(subparsers: Any) -> None:
    """Add the ``status`` subcommand."""
    parser = add_command(
        subparsers,
        NAME,
        "list the decision files of a directory",
        """
        One row per decision file (segment_health_check.<job_id>.<task_id>; other
        names and temporary files are ignored): job, task, the state the launcher would
        see (unhealthy, clear, not-a-regular-file, unreadable; absent for a dangling
        symlink), size, age, and the first line of the producer's diagnostic text.

        exit status: 0 listed, 1 the directory cannot be listed, 2 usage error
        """,
        """
        nvrx-seghealth status --dir /shared/job/shc
        nvrx-seghealth status --dir /shared/job/shc --job-id 123 --json
        """,
    )
    add_directory_option(parser)
    parser.add_argument("--job-id", type=slurm_id, metavar="J", help="only this job's files")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(func=status_command)


def _describe(entry: DecisionFile, now: float) -> dict[str, Any]:
    decision: Decision = evaluate(entry.path, DEFAULT_STAT_TIMEOUT)
    age = diagnostic = None
    if decision.outcome in (Outcome.UNHEALTHY, Outcome.CLEAR, Outcome.NOT_REGULAR):
        with contextlib.suppress(OSError):  # gone or hung since the evaluation: no age
            age = now - stat_within(entry.path, DEFAULT_STAT_TIMEOUT).st_mtime
    if decision.outcome is Outcome.UNHEALTHY:
        head = read_head(entry.path)
        diagnostic = first_line(head) if head is not None else None
    return {
        "job_id": entry.job_id, "task_id": entry.task_id, "path": entry.path,
        "state": decision.outcome.value, "reason": decision.reason, "size": decision.size,
        "age_seconds": None if age is None else round(age, 3), "diagnostic": diagnostic,
    }


def status_command(args: argparse.Namespace) -> int:
    """List the directory's decisions; exit 0, 1 when it cannot be listed, 2 usage."""
    try:
        directory = directory_of(args)
    except ConfigurationError as error:
        return usage_error(NAME, str(error))
    try:
        entries = list_decisions(directory, args.job_id)
    except OSError as error:
        print(f"nvrx-seghealth {NAME}: cannot list {directory}: {error}", file=sys.stderr)
        return EXIT_FAILURE
    now = time.time()
    rows = [_describe(entry, now) for entry in entries]
    if args.json:
        print_json({"directory": directory, "decisions": rows})
        return EXIT_OK
    if not rows:
        print(f"no decision files in {directory}")
        return EXIT_OK
    cells = [
        [row["job_id"], row["task_id"], row["state"],
         "-" if row["size"] is None else str(row["size"]),
         "-" if row["age_seconds"] is None else format_age(row["age_seconds"]),
         row["diagnostic"] or ("" if row["state"] in ("clear", "unhealthy") else row["reason"])]
        for row in rows
    ]
    colours = [[None, None, _STATE_COLOURS[Outcome(row["state"])], None, None, None]
               for row in rows]
    print(render_table(["JOB", "TASK", "STATE", "SIZE", "AGE", "DIAGNOSTIC"], cells, colours))
    unhealthy = sum(row["state"] == Outcome.UNHEALTHY.value for row in rows)
    plural = "" if len(rows) == 1 else "s"
    print(f"\n{len(rows)} decision file{plural} in {directory}; {unhealthy} unhealthy")
    return EXIT_OK
