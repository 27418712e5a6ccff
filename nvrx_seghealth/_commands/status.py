"""``nvrx-seghealth status``: every decision file of a directory, and how its producers are.

Each file is judged as the launcher's process 0 judges it: by one bounded ``stat``, which
also gives its age (:func:`~.._decision.decision_file.judge_with_stat`). An unhealthy file's
row shows the first line of its text, from one bounded read. A name with leading zeros
is not looked at, since no launcher reads it (:data:`UNREAD`). A row also says when no
producer can write there: a link or a FIFO, say, where the decision belongs
(:data:`BLOCKED_SYMLINK`). Below the table, one line per ``publish-drained`` producer says
how it is (:meth:`~.._producer.state.ProducerState.health`).

Every call into the directory is bounded by ``--fs-timeout``. The first call that does
not answer ends the looking: later files are rows in state :data:`NOT_LOOKED_AT`, and
the command exits 1. Each row's state is one token, for the table and ``--json`` alike.
The producers' text is printed through :func:`~.._decision.listing.printable`. A
directory that others can write without the sticky bit is warned about on stderr.

Exit codes: :data:`~.output.EXIT_STATUSES` (``status``). Standard library plus PyYAML.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from dataclasses import dataclass
from typing import Any

from .._decision import boundedfs
from .._decision.boundedstat import stuck_for
from .._decision.decision_file import Outcome, judge_with_stat
from .._decision.listing import (
    DecisionFile,
    first_line,
    list_decisions,
    list_directory,
    not_regular_kind,
)
from .._decision.problems import permission_problems
from .._producer.state import ProducerHealth
from .arguments import (
    DIRECTORY,
    FS_TIMEOUT_OPTION,
    JSON,
    add_command,
    directory_of,
    option,
    slurm_id,
)
from .output import EXIT_FAILURE, EXIT_OK, format_age, print_json, render_table
from .status_producers import producers as read_producers

__all__ = ["BLOCKED_SYMLINK", "NOT_LOOKED_AT", "UNREAD", "register", "status_command"]

NAME = "status"

#: The state of a decision file that was not looked at, because an earlier call into
#: the directory did not answer: what the launcher would see is not known.
NOT_LOOKED_AT = "unknown"
#: The state of a file named like a decision but with an id with leading zeros
#: (:attr:`~.._decision.listing.DecisionFile.unread`): no launcher reads it.
UNREAD = "unread"
#: A row's ``blocked`` token when a symbolic link is where the unit's decision belongs,
#: dangling or not: no producer writes through it. Anything else that is no regular file
#: is ``not-a-regular-file`` (:attr:`Outcome.NOT_REGULAR`'s token).
BLOCKED_SYMLINK = "symlink"

#: Colour of each decision row's state, by outcome (``None``: not looked at).
_STATE_COLOURS: dict[Outcome | None, str | None] = {
    Outcome.UNHEALTHY: "red",
    Outcome.CLEAR: "green",
    Outcome.ABSENT: None,
    Outcome.UNREADABLE: "yellow",
    Outcome.NOT_REGULAR: "yellow",
    None: "yellow",
}

#: A producer in one of these states makes the command exit 1 (a monitoring check needs
#: no JSON). An unreadable state file does not: the reading account may lack the right.
_UNWELL = frozenset({ProducerHealth.FAILING, ProducerHealth.STOPPED})

SUMMARY = "list the decision files of a directory"
DESCRIPTION = f"""
    One row per decision file (segment_health_check.<job_id>.<task_id>; other
    names and temporary files are ignored): job, task, the state the launcher would
    see (unhealthy, clear, not-a-regular-file, unreadable; absent for a dangling
    symlink; {NOT_LOOKED_AT}: not looked at, because a call into the directory did not
    answer within --fs-timeout, which ends the command with exit 1; {UNREAD}: an id
    has leading zeros, which no launcher reads, as mark refuses), size, age, and
    the first line of the producer's diagnostic text (control characters escaped),
    or what blocks the producer: a symlink, a FIFO, a directory where the decision
    belongs, over which no producer writes (its "blocked" in --json);
    then each publish-drained producer of the directory: its last pass, and since
    when its passes have failed (its decisions are kept meanwhile). Warns when users
    other than the directory's owner can write there without the sticky bit.

    Each producer's state (its "state" in --json): ok; failing (its last passes
    failed, its decisions are kept as they were); stopped (it runs a pass every
    --interval S but none for max(3 x S, S + 60) s: restart it; said even when its
    last passes failed too); unreadable (its state file cannot be read or is not
    valid). A failing or stopped producer makes the command exit 1, after the
    whole listing.
    """
EXAMPLES = """
    nvrx-seghealth status --dir /shared/job/segment-health-check/123
    nvrx-seghealth status --dir /shared/job/segment-health-check/123 --job-id 123 --json
    """
OPTIONS = (
    DIRECTORY,
    option("--job-id", type=slurm_id, metavar="J", help="only this job's files"),
    JSON,
    FS_TIMEOUT_OPTION,
)


def register(subparsers: Any) -> None:
    """Add the ``status`` subcommand."""
    add_command(subparsers, NAME, SUMMARY, DESCRIPTION, EXAMPLES, OPTIONS, status_command)


@dataclass(frozen=True)
class _DecisionRow:
    """One decision file as ``status`` found it; ``outcome`` ``None``: not looked at."""

    entry: DecisionFile
    outcome: Outcome | None
    reason: str
    size: int | None = None
    age_seconds: float | None = None
    diagnostic: str | None = None
    not_regular: str | None = None  # what is there instead of a regular file, unfollowed

    @property
    def blocked(self) -> str | None:
        """Why no producer can write the unit's decision: :data:`BLOCKED_SYMLINK`,
        ``not-a-regular-file``, or ``None`` (it can, or it was not looked at)."""
        if self.not_regular is None:
            return None
        symlink = self.not_regular == "symbolic link"
        return BLOCKED_SYMLINK if symlink else Outcome.NOT_REGULAR.value

    def _blocked_text(self) -> str:
        dangling = "dangling " if self.outcome is Outcome.ABSENT else ""
        return (
            f"a {dangling}{self.not_regular}: no producer can write the unit's decision "
            "here; remove it"
        )

    @property
    def state(self) -> str:
        """The row's state token: :data:`UNREAD`, the outcome's, or :data:`NOT_LOOKED_AT`."""
        if self.entry.unread:
            return UNREAD
        return NOT_LOOKED_AT if self.outcome is None else self.outcome.value

    def to_json(self) -> dict[str, Any]:
        return {
            "job_id": self.entry.job_id,
            "task_id": self.entry.task_id,
            "path": self.entry.path,
            "state": self.state,
            "reason": self.reason,
            "size": self.size,
            "age_seconds": self.age_seconds,
            "diagnostic": self.diagnostic,
            "blocked": self.blocked,
        }

    def cells(self) -> list[str]:
        judged = self.outcome in (Outcome.CLEAR, Outcome.UNHEALTHY)
        if self.not_regular is not None:
            text = self._blocked_text()
        else:
            text = self.diagnostic or ("" if judged else self.reason)
        return [
            self.entry.job_id,
            self.entry.task_id,
            self.state,
            "-" if self.size is None else str(self.size),
            "-" if self.age_seconds is None else format_age(self.age_seconds),
            text,
        ]


def _describe_all(
    entries: list[DecisionFile], now: float, timeout: float
) -> tuple[list[_DecisionRow], str | None]:
    """Each entry's row, in order, until a call into their directory does not answer
    (:func:`~nvrx_seghealth._decision.boundedstat.stuck_for`): the entry that was being looked at
    keeps what was found, every later one is a :data:`NOT_LOOKED_AT` row (nothing was
    sent for it). Also what did not answer, or ``None`` when every entry was looked at."""
    rows: list[_DecisionRow] = []
    problem = None
    for entry in entries:
        if entry.unread:  # not looked at: what it holds does not matter
            reason = f"no launcher reads it (ids with leading zeros): {entry.read_name} is read"
            rows.append(_DecisionRow(entry, None, reason))
            continue
        if problem is None:
            waited = stuck_for(entry.path)
            if waited is None:
                rows.append(_describe(entry, now, timeout))
                if stuck_for(entry.path) is not None:
                    problem = (
                        f"{entry.path} did not answer within {timeout:g} s "
                        "(a slow or hung shared filesystem?)"
                    )
                continue
            problem = (
                f"{os.path.dirname(entry.path)}: an earlier call there is still stuck "
                f"after {waited:.1f} s (a slow or hung shared filesystem?)"
            )
        reason = "not looked at: an earlier call in the directory did not answer"
        rows.append(_DecisionRow(entry, None, reason))
    return rows, problem


def _describe(entry: DecisionFile, now: float, timeout: float) -> _DecisionRow:
    """The entry's row from one stat (its state and age) and one read, which never
    follows a link: an unhealthy file's text, or what is there instead of a file."""
    decision, st = judge_with_stat(entry.path, timeout)
    age = None if st is None else now - st.st_mtime
    diagnostic = not_regular = None
    if decision.outcome is not Outcome.UNREADABLE:  # else the stat failed: so would this
        with contextlib.suppress(OSError):  # HelperTimeout too
            current = boundedfs.read_current(entry.path, timeout)
            not_regular = not_regular_kind(current)
            if decision.outcome is Outcome.UNHEALTHY and current.kind == "content":
                diagnostic = first_line(current.data)
    return _DecisionRow(
        entry,
        decision.outcome,
        decision.reason,
        decision.size,
        None if age is None else round(age, 3),
        diagnostic,
        not_regular,
    )


def _names(directory: str, timeout: float) -> list[str] | None:
    """The names in ``directory``; ``None`` when it cannot be listed (said on stderr)."""
    try:
        return list_directory(directory, timeout)
    except FileNotFoundError:
        print(
            f"nvrx-seghealth {NAME}: the decision directory {directory} does not exist: "
            "fix --dir, or create it where the producer writes",
            file=sys.stderr,
        )
    except OSError as error:  # HelperTimeout too
        print(f"nvrx-seghealth {NAME}: cannot list {directory}: {error}", file=sys.stderr)
    return None


def _warn_not_looked_at(problem: str, rows: list[_DecisionRow]) -> None:
    """Say on stderr what did not answer, and how many files were not looked at."""
    unknown = sum(row.state == NOT_LOOKED_AT for row in rows)
    print(
        f"nvrx-seghealth {NAME}: {problem}; {unknown} more decision file"
        f"{'' if unknown == 1 else 's'} not looked at (state {NOT_LOOKED_AT}): run "
        "status again once the filesystem answers, or give a longer --fs-timeout",
        file=sys.stderr,
    )


def _print_table(rows: list[_DecisionRow], directory: str) -> None:
    """The decision rows as a table for people, and a line that counts them."""
    if not rows:
        print(f"no decision files in {directory}")
        return
    cells = [row.cells() for row in rows]
    colours = [[None, None, _STATE_COLOURS[row.outcome], None, None, None] for row in rows]
    print(render_table(["JOB", "TASK", "STATE", "SIZE", "AGE", "DIAGNOSTIC"], cells, colours))
    unhealthy = sum(row.outcome is Outcome.UNHEALTHY for row in rows)
    unread = sum(row.entry.unread for row in rows)
    blocked = sum(row.blocked is not None for row in rows)
    plural = "" if len(rows) == 1 else "s"
    ignored = f"; {unread} {UNREAD}: no launcher reads it, remove it" if unread else ""
    if blocked:
        ignored += f"; {blocked} blocked: no producer can write there, remove what is there"
    print(f"\n{len(rows)} decision file{plural} in {directory}; {unhealthy} unhealthy{ignored}")


def status_command(args: argparse.Namespace) -> int:
    """List the directory's decisions; see :data:`~.output.EXIT_STATUSES`."""
    directory = directory_of(args)
    names = _names(directory, args.fs_timeout)
    if names is None:
        return EXIT_FAILURE
    warnings = permission_problems(directory, args.fs_timeout)
    for warning in warnings:
        print(f"nvrx-seghealth {NAME}: warning: {warning}", file=sys.stderr)
    now = time.time()
    decisions = list_decisions(names, directory, args.job_id)
    rows, problem = _describe_all(decisions, now, args.fs_timeout)
    if problem is not None:
        _warn_not_looked_at(problem, rows)
    producers = read_producers(names, directory, args.job_id, args.fs_timeout, now)
    if args.json:
        print_json(
            {
                "directory": directory,
                "decisions": [row.to_json() for row in rows],
                "producers": [producer.to_json() for producer in producers],
                "warnings": warnings,
            }
        )
    else:
        _print_table(rows, directory)
        for producer in producers:
            print(producer.line(now))
    unwell = any(producer.health in _UNWELL for producer in producers)
    return EXIT_OK if problem is None and not unwell else EXIT_FAILURE
