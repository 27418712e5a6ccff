"""``nvrx-seghealth status``: every decision file of a directory, and how its producers are.

Each file is judged as the consumer judges it, by one bounded ``stat`` that also gives
its age (:func:`nvrx_seghealth._decision.artifact.judge_with_stat`), so the state column
says what the unit's process 0 would do; a name with leading zeros, which no launcher
reads, is not looked at (:data:`UNREAD`). For an unhealthy file the table also shows the
first line of the producer's diagnostic text (one bounded read). Below the table, one
line per ``publish-drained`` producer that keeps its state in the directory: when its
last pass ran, and since when its passes fail (its decisions are then kept, stale). Its
last pass is judged by its own stamp and its state file's last change (:func:`quiet_for`),
so a clock that differs from this host's is said, never printed as a negative age.
Each row's state is a token computed once and used by the table and by ``--json`` alike:
a decision row's is its :class:`~.._decision.artifact.Outcome` (or :data:`NOT_LOOKED_AT`,
:data:`UNREAD`), a producer's is its :class:`ProducerHealth` (:func:`producer_health`).

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
import enum
import os
import sys
import time
from dataclasses import dataclass
from typing import Any

from .._decision import boundedfs
from .._decision.artifact import Outcome, judge_with_stat
from .._decision.boundedstat import stat_within, stuck_for
from .._decision.listing import DecisionFile, first_line, list_decisions, list_directory, printable
from .._decision.problems import permission_problems
from .._producer.state import STATE_FILE, ProducerState, StateFileError, read_state_file
from .arguments import (
    add_command,
    add_directory_option,
    add_fs_timeout_option,
    directory_of,
    slurm_id,
)
from .output import EXIT_FAILURE, EXIT_OK, format_age, print_json, render_table

__all__ = ["NOT_LOOKED_AT", "ProducerHealth", "producer_health", "register", "status_command"]

NAME = "status"

#: The state of a decision file that was not looked at, because an earlier call into
#: the directory did not answer: what the launcher would see is not known.
NOT_LOOKED_AT = "unknown"
#: The state of a file named like a decision but with an id with leading zeros
#: (:attr:`~.._decision.listing.DecisionFile.unread`): no launcher reads it.
UNREAD = "unread"

#: Colour of each decision row's state, by outcome (``None``: not looked at).
_STATE_COLOURS: dict[Outcome | None, str | None] = {
    Outcome.UNHEALTHY: "red",
    Outcome.CLEAR: "green",
    Outcome.ABSENT: None,
    Outcome.UNREADABLE: "yellow",
    Outcome.NOT_REGULAR: "yellow",
    None: "yellow",
}


class ProducerHealth(enum.Enum):
    """How a ``publish-drained`` producer is, as its state file tells: the ``state`` token
    of its ``status --json`` row."""

    #: Its last pass succeeded, and it runs on time (or runs single passes).
    OK = "ok"
    #: Its last passes failed (Slurm did not answer, a write failed): its decisions are
    #: kept as they were, stale.
    FAILING = "failing"
    #: It runs a pass every ``interval`` seconds but its last one, and its state file's
    #: last change (:func:`quiet_for`), are older than ``max(3 * interval, interval + 60)``
    #: by this host's clock: it may have stopped. Said whether or not its
    #: last passes failed (``failing_since`` tells): a producer that no longer runs is
    #: what to fix first.
    STOPPED = "stopped"
    #: Its state file cannot be read in time, or is not valid.
    UNREADABLE = "unreadable"


def quiet_for(state: ProducerState, now: float, written: float | None = None) -> float:
    """Seconds since the producer's last pass at ``now`` (this host's clock), never
    negative: the age of its own stamp (``last_pass``, its clock) or, when younger, of
    its state file's last change (``written``, its ``st_mtime``: the file server's clock
    on NFS, the producer's on a local disk or Lustre). The producer rewrites the file
    after every pass, so either tells; a producer whose clock is behind this host's
    then still looks alive where the file server stamps the file."""
    ages = [now - state.last_pass] + ([] if written is None else [now - written])
    return max(0.0, min(ages))


def producer_health(
    state: ProducerState, now: float, written: float | None = None
) -> ProducerHealth:
    """What :class:`ProducerHealth` a producer is in at ``now``, by its state file and
    (``written``) the file's last change (:func:`quiet_for`)."""
    interval = state.interval
    if interval and quiet_for(state, now, written) > max(3 * interval, interval + 60):
        return ProducerHealth.STOPPED
    return ProducerHealth.OK if state.failing_since is None else ProducerHealth.FAILING


def register(subparsers: Any) -> None:
    """Add the ``status`` subcommand."""
    parser = add_command(
        subparsers,
        NAME,
        "list the decision files of a directory",
        f"""
        One row per decision file (segment_health_check.<job_id>.<task_id>; other
        names and temporary files are ignored): job, task, the state the launcher would
        see (unhealthy, clear, not-a-regular-file, unreadable; absent for a dangling
        symlink; {NOT_LOOKED_AT}: not looked at, because a call into the directory did not
        answer within --fs-timeout, which ends the command with exit 1; {UNREAD}: an id
        has leading zeros, which no launcher reads, as mark refuses), size, age, and
        the first line of the producer's diagnostic text (control characters escaped);
        then each publish-drained producer of the directory: its last pass, and since
        when its passes have failed (its decisions are kept meanwhile). Warns when users
        other than the directory's owner can write there without the sticky bit.

        Each producer's state (its "state" in --json): ok; failing (its last passes
        failed, its decisions are kept as they were); stopped (it runs a pass every
        --interval S but none for max(3 x S, S + 60) s: restart it; said even when its
        last passes failed too); unreadable (its state file cannot be read or is not
        valid).
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


@dataclass(frozen=True)
class _DecisionRow:
    """One decision file as ``status`` found it; ``outcome`` ``None``: not looked at."""

    entry: DecisionFile
    outcome: Outcome | None
    reason: str
    size: int | None = None
    age_seconds: float | None = None
    diagnostic: str | None = None

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
        }

    def cells(self) -> list[str]:
        judged = self.outcome in (Outcome.CLEAR, Outcome.UNHEALTHY)
        return [
            self.entry.job_id,
            self.entry.task_id,
            self.state,
            "-" if self.size is None else str(self.size),
            "-" if self.age_seconds is None else format_age(self.age_seconds),
            self.diagnostic or ("" if judged else self.reason),
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
    """The entry's row from one stat (its state and age) and, for an unhealthy file, one
    read of its text."""
    decision, st = judge_with_stat(entry.path, timeout)
    age = None if st is None else now - st.st_mtime
    diagnostic = None
    if decision.outcome is Outcome.UNHEALTHY:
        with contextlib.suppress(OSError):  # HelperTimeout too
            current = boundedfs.read_current(entry.path, timeout)
            if current.kind == "content":
                diagnostic = first_line(current.data)
    return _DecisionRow(
        entry,
        decision.outcome,
        decision.reason,
        decision.size,
        None if age is None else round(age, 3),
        diagnostic,
    )


@dataclass(frozen=True)
class _ProducerRow:
    """One producer's state file: its :class:`ProducerHealth`, and the state read
    (``None`` when unreadable, ``problem`` then says why)."""

    producer_id: str
    job_id: str
    health: ProducerHealth
    state: ProducerState | None = None
    problem: str | None = None
    written: float | None = None

    def to_json(self) -> dict[str, Any]:
        row: dict[str, Any] = {
            "producer_id": self.producer_id,
            "job_id": self.job_id,
            "state": self.health.value,
        }
        if self.state is None:
            row["unreadable"] = self.problem
        else:
            fields = ("last_pass", "last_ok", "failing_since", "failed_passes", "last_error")
            row.update({name: getattr(self.state, name) for name in (*fields, "interval")})
        return row

    def line(self, now: float) -> str:
        who = f"producer {printable(self.producer_id)} (job {self.job_id})"
        state = self.state
        if state is None:
            return f"{who}: state file unreadable ({printable(self.problem or '')})"
        quiet = quiet_for(state, now, self.written)
        ahead = state.last_pass - now  # more than 1 s: the clocks differ, say by how much
        skew = f" (its clock is {format_age(ahead)} ahead of this host's)" if ahead > 1 else ""
        if state.failing_since is None:
            line = f"{who}: last pass {format_age(quiet)} ago{skew}, ok"
        else:
            good = "never" if state.last_ok is None else f"{_age(now, state.last_ok)} ago"
            since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(state.failing_since))
            line = (
                f"{who}: FAILING since {since} ({_age(now, state.failing_since)}, "
                f"{state.failed_passes} passes; last good pass {good}){skew}; its decisions "
                f"are kept as they were: {printable(state.last_error or '')}"
            )
        if self.health is ProducerHealth.STOPPED:
            line += (
                f"; STOPPED? no pass for {format_age(quiet)} by this host's clock though it "
                f"runs one every {state.interval:g} s: its decisions are not kept up to "
                "date, restart it (or, if it runs, set the clocks right)"
            )
        return line


def _age(now: float, then: float) -> str:
    """How long ago ``then`` (a producer's clock) was at ``now`` (this host's): a time
    stamped ahead of this host's clock is ``0s`` old, never a negative age."""
    return format_age(max(0.0, now - then))


def _producers(
    names: list[str], directory: str, job_id: str | None, timeout: float, now: float
) -> list[_ProducerRow]:
    """The state of each ``publish-drained`` producer that keeps it in ``directory``.

    Each state file is checked (:func:`~.._producer.state.read_state_file`) and, for a
    producer that runs every ``interval``, looked at once more for its last change
    (:func:`quiet_for`); one that cannot be read in time or is not valid is an
    :attr:`ProducerHealth.UNREADABLE` row saying why.
    """
    producers = []
    for name in sorted(names):
        match = STATE_FILE.fullmatch(name)
        if match is None or job_id not in (None, match["job"]):
            continue
        path = os.path.join(directory, name)
        try:
            state = read_state_file(path, timeout)
        except (OSError, StateFileError) as error:  # HelperTimeout is an OSError
            problem = str(error) or type(error).__name__
            producers.append(
                _ProducerRow(match["id"], match["job"], ProducerHealth.UNREADABLE, None, problem)
            )
            continue
        if state is not None:  # else removed since the directory was listed
            written = None
            if state.interval:  # the file's last change (quiet_for)
                with contextlib.suppress(OSError, ValueError):  # HelperTimeout too
                    written = stat_within(path, timeout).st_mtime
            health = producer_health(state, now, written)
            row = _ProducerRow(match["id"], match["job"], health, state, written=written)
            producers.append(row)
    return producers


def status_command(args: argparse.Namespace) -> int:
    """List the directory's decisions; see :data:`~.output.EXIT_STATUSES`."""
    directory = directory_of(args)
    try:
        names = list_directory(directory, args.fs_timeout)
    except FileNotFoundError:
        print(
            f"nvrx-seghealth {NAME}: the decision directory {directory} does not exist: "
            "fix --dir, or create it where the producer writes",
            file=sys.stderr,
        )
        return EXIT_FAILURE
    except OSError as error:  # HelperTimeout too
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
        unknown = sum(row.state == NOT_LOOKED_AT for row in rows)
        print(
            f"nvrx-seghealth {NAME}: {problem}; {unknown} more decision file"
            f"{'' if unknown == 1 else 's'} not looked at (state {NOT_LOOKED_AT}): run "
            "status again once the filesystem answers, or give a longer --fs-timeout",
            file=sys.stderr,
        )
    status = EXIT_OK if problem is None else EXIT_FAILURE
    producers = _producers(names, directory, args.job_id, args.fs_timeout, now)
    if args.json:
        print_json(
            {
                "directory": directory,
                "decisions": [row.to_json() for row in rows],
                "producers": [producer.to_json() for producer in producers],
                "warnings": warnings,
            }
        )
        return status
    if not rows:
        print(f"no decision files in {directory}")
    else:
        cells = [row.cells() for row in rows]
        colours = [[None, None, _STATE_COLOURS[row.outcome], None, None, None] for row in rows]
        print(render_table(["JOB", "TASK", "STATE", "SIZE", "AGE", "DIAGNOSTIC"], cells, colours))
        unhealthy = sum(row.outcome is Outcome.UNHEALTHY for row in rows)
        unread = sum(row.entry.unread for row in rows)
        plural = "" if len(rows) == 1 else "s"
        ignored = f"; {unread} {UNREAD}: no launcher reads it, remove it" if unread else ""
        print(f"\n{len(rows)} decision file{plural} in {directory}; {unhealthy} unhealthy{ignored}")
    for producer in producers:
        print(producer.line(now))
    return status
