"""``nvrx-seghealth status``: every decision file of a directory, and how its producers are.

Each file is judged as the consumer judges it (:func:`nvrx_seghealth._decision.artifact.judge`),
so the state column says what the unit's process 0 would do. For an unhealthy file the
table also shows the first line of the producer's diagnostic text. Below the table, one
line per ``publish-drained`` producer that keeps its state in the directory: when its
last pass ran, and since when its passes fail (its decisions are then kept, stale).

Every call into the directory is bounded by ``--fs-timeout`` (a hung filesystem is
reported, exit 1), and one call that does not answer ends the looking: at most one call
into the directory is left stuck (:mod:`nvrx_seghealth._decision.helperprocess`), the
decision files after it are rows in state :data:`NOT_LOOKED_AT`, and the command exits 1
within about one ``--fs-timeout``. The producers' text is printed through
:func:`~.._decision.listing.printable`. A directory that users other than its owner can
write without the sticky bit (or a parent like it) is warned about on stderr
(:func:`~.._decision.problems.permission_problems`).

Exit codes: :data:`~.output.EXIT_STATUSES` (``status``). Standard library plus PyYAML.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from typing import Any

from .._decision import boundedfs
from .._decision.artifact import Decision, Outcome, judge
from .._decision.boundedfs import FilesystemTimeout
from .._decision.boundedstat import stat_within, stuck_for
from .._decision.listing import DecisionFile, first_line, list_decisions, list_directory, printable
from .._decision.problems import permission_problems
from .._errors import ConfigurationError
from .._producer.state import STATE_FILE, StateFileError, read_state_file
from .arguments import (
    add_command,
    add_directory_option,
    add_fs_timeout_option,
    directory_of,
    slurm_id,
)
from .output import EXIT_FAILURE, EXIT_OK, format_age, print_json, render_table, usage_error

__all__ = ["register", "status_command"]

NAME = "status"

#: The state of a decision file that was not looked at, because an earlier call into
#: the directory did not answer: what the launcher would see is not known.
NOT_LOOKED_AT = "unknown"

_STATE_COLOURS = {
    Outcome.UNHEALTHY.value: "red",
    Outcome.CLEAR.value: "green",
    Outcome.ABSENT.value: None,
    Outcome.UNREADABLE.value: "yellow",
    Outcome.NOT_REGULAR.value: "yellow",
    NOT_LOOKED_AT: "yellow",
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
        symlink; unknown: not looked at, because a call into the directory did not
        answer within --fs-timeout, which ends the command with exit 1), size, age, and
        the first line of the producer's diagnostic text (control characters escaped);
        then each publish-drained producer of the directory: its last pass, and since
        when its passes have failed (its decisions are kept meanwhile). Warns when users
        other than the directory's owner can write there without the sticky bit.
        """,
        """
        nvrx-seghealth status --dir /shared/job/shc
        nvrx-seghealth status --dir /shared/job/shc --job-id 123 --json
        """,
    )
    add_directory_option(parser)
    parser.add_argument("--job-id", type=slurm_id, metavar="J", help="only this job's files")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    add_fs_timeout_option(parser)
    parser.set_defaults(func=status_command)


def _describe_all(
    entries: list[DecisionFile], now: float, timeout: float
) -> tuple[list[dict[str, Any]], str | None]:
    """Each entry's row, in order, until a call into their directory does not answer
    (:func:`~nvrx_seghealth._decision.boundedstat.stuck_for`): the entry that was being looked at
    keeps what was found, every later one is a :data:`NOT_LOOKED_AT` row (nothing was
    sent for it). Also what did not answer, or ``None`` when every entry was looked at."""
    rows: list[dict[str, Any]] = []
    problem = None
    for entry in entries:
        if problem is None:
            waited = stuck_for(entry.path)
            if waited is None:
                rows.append(_describe(entry, now, timeout))
                if stuck_for(entry.path) is not None:
                    problem = (
                        f"{entry.path} did not answer within {timeout:g} s "
                        "(a hung shared filesystem?)"
                    )
                continue
            problem = (
                f"{os.path.dirname(entry.path)}: an earlier call there is still stuck "
                f"after {waited:.1f} s (a hung shared filesystem?)"
            )
        rows.append(
            {
                "job_id": entry.job_id,
                "task_id": entry.task_id,
                "path": entry.path,
                "state": NOT_LOOKED_AT,
                "reason": "not looked at: an earlier call in the directory did not answer",
                "size": None,
                "age_seconds": None,
                "diagnostic": None,
            }
        )
    return rows, problem


def _describe(entry: DecisionFile, now: float, timeout: float) -> dict[str, Any]:
    decision: Decision = judge(entry.path, timeout)
    age = diagnostic = None
    if decision.outcome in (Outcome.UNHEALTHY, Outcome.CLEAR, Outcome.NOT_REGULAR):
        with contextlib.suppress(OSError):  # gone or hung since the evaluation: no age
            age = now - stat_within(entry.path, timeout).st_mtime
    if decision.outcome is Outcome.UNHEALTHY:
        with contextlib.suppress(OSError, FilesystemTimeout):
            current = boundedfs.read_current(entry.path, timeout)
            if current.kind == "content":
                diagnostic = first_line(current.data)
    return {
        "job_id": entry.job_id,
        "task_id": entry.task_id,
        "path": entry.path,
        "state": decision.outcome.value,
        "reason": decision.reason,
        "size": decision.size,
        "age_seconds": None if age is None else round(age, 3),
        "diagnostic": diagnostic,
    }


def _producers(
    names: list[str], directory: str, job_id: str | None, timeout: float
) -> list[dict[str, Any]]:
    """The state of each ``publish-drained`` producer that keeps it in ``directory``.

    Each state file is checked (:func:`~.._producer.state.read_state_file`); one that
    cannot be read in time or is not valid is a row with ``unreadable``: the reason.
    """
    producers = []
    for name in sorted(names):
        match = STATE_FILE.fullmatch(name)
        if match is None or job_id not in (None, match["job"]):
            continue
        row: dict[str, Any] = {"producer_id": match["id"], "job_id": match["job"]}
        try:
            state = read_state_file(os.path.join(directory, name), timeout)
        except (OSError, StateFileError) as error:  # FilesystemTimeout is an OSError
            row["unreadable"] = str(error) or type(error).__name__
        else:
            if state is None:  # removed since the directory was listed
                continue
            row.update(
                last_pass=state.last_pass,
                last_ok=state.last_ok,
                failing_since=state.failing_since,
                failed_passes=state.failed_passes,
                last_error=state.last_error,
                interval=state.interval,
            )
        producers.append(row)
    return producers


def _producer_line(row: dict[str, Any], now: float) -> str:
    who = f"producer {printable(row['producer_id'])} (job {row['job_id']})"
    if "unreadable" in row:
        return f"{who}: state file unreadable ({printable(row['unreadable'])})"
    quiet = now - row["last_pass"]
    if row["failing_since"] is None:
        line = f"{who}: last pass {format_age(quiet)} ago, ok"
    else:
        good = "never" if row["last_ok"] is None else f"{format_age(now - row['last_ok'])} ago"
        since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(row["failing_since"]))
        line = (
            f"{who}: FAILING since {since} ({format_age(now - row['failing_since'])}, "
            f"{row['failed_passes']} passes; last good pass {good}); its decisions are "
            f"kept as they were: {printable(row['last_error'] or '')}"
        )
    interval = row["interval"]
    if interval and quiet > max(3 * interval, interval + 60):
        line += (
            f"; STOPPED? no pass for {format_age(quiet)} though it runs one every "
            f"{interval:g} s: its decisions are not kept up to date, restart it"
        )
    return line


def status_command(args: argparse.Namespace) -> int:
    """List the directory's decisions; see :data:`~.output.EXIT_STATUSES`."""
    try:
        directory = directory_of(args)
    except ConfigurationError as error:
        return usage_error(NAME, str(error))
    try:
        names = list_directory(directory, args.fs_timeout)
    except FileNotFoundError:
        print(
            f"nvrx-seghealth {NAME}: the decision directory {directory} does not exist: "
            "fix --dir, or create it where the producer writes",
            file=sys.stderr,
        )
        return EXIT_FAILURE
    except (OSError, FilesystemTimeout) as error:
        print(f"nvrx-seghealth {NAME}: cannot list {directory}: {error}", file=sys.stderr)
        return EXIT_FAILURE
    warnings = permission_problems(directory, args.fs_timeout)
    for warning in warnings:
        print(f"nvrx-seghealth {NAME}: warning: {warning}", file=sys.stderr)
    now = time.time()
    rows, problem = _describe_all(
        list_decisions(names, directory, args.job_id), now, args.fs_timeout
    )
    if problem is not None:
        unknown = sum(row["state"] == NOT_LOOKED_AT for row in rows)
        print(
            f"nvrx-seghealth {NAME}: {problem}; {unknown} more decision file"
            f"{'' if unknown == 1 else 's'} not looked at (state {NOT_LOOKED_AT}): run "
            "status again once the filesystem answers, or give a longer --fs-timeout",
            file=sys.stderr,
        )
    status = EXIT_OK if problem is None else EXIT_FAILURE
    producers = _producers(names, directory, args.job_id, args.fs_timeout)
    if args.json:
        print_json(
            {
                "directory": directory,
                "decisions": rows,
                "producers": producers,
                "warnings": warnings,
            }
        )
        return status
    if not rows:
        print(f"no decision files in {directory}")
    else:
        cells = [
            [
                row["job_id"],
                row["task_id"],
                row["state"],
                "-" if row["size"] is None else str(row["size"]),
                "-" if row["age_seconds"] is None else format_age(row["age_seconds"]),
                row["diagnostic"]
                or ("" if row["state"] in ("clear", "unhealthy") else row["reason"]),
            ]
            for row in rows
        ]
        colours = [[None, None, _STATE_COLOURS[row["state"]], None, None, None] for row in rows]
        print(render_table(["JOB", "TASK", "STATE", "SIZE", "AGE", "DIAGNOSTIC"], cells, colours))
        unhealthy = sum(row["state"] == Outcome.UNHEALTHY.value for row in rows)
        plural = "" if len(rows) == 1 else "s"
        print(f"\n{len(rows)} decision file{plural} in {directory}; {unhealthy} unhealthy")
    for row in producers:
        print(_producer_line(row, now))
    return status
