"""``nvrx-seghealth publish-drained``: the producer's options, passes, audit log and report.

One pass runs with ``--once``; else one every ``--interval`` seconds until SIGTERM or
SIGINT. With ``--interval``, SIGUSR1 runs a pass now (:mod:`~.._producer.schedule`).
``--pid-file`` says whom to signal (:mod:`~.._producer.pidfile`). It is claimed once the
signal handlers are in place and released before they are restored. A pid file removed
or replaced meanwhile is reported once. With ``--once``, SIGUSR1 is ignored: a signal
meant for a long-running producer does not kill the one pass halfway.

The producer refuses to start on a directory it cannot use, on a state file that is not
its own unless it is root (:func:`_state_file_problem`), and on an ``--audit-log`` that
is not its own (:func:`_audit_log_problem`). What a pass does and guarantees:
:mod:`nvrx_seghealth._producer.publisher`.

Exit codes: :data:`~.output.EXIT_STATUSES` (``publish-drained``). Standard library plus
PyYAML.

One module, over the package's 400 lines: most of the excess is its option table and help
texts, read beside the command they describe.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import signal
import stat
import sys
import time
from typing import Any

from .._decision import boundedfs
from .._decision.boundedstat import stat_within
from .._decision.files import not_own_file
from .._producer.audit import TRANSITIONS, AuditEvent, EventKind, PassResult, iso_time
from .._producer.debounce import DEFAULT_PASSES
from .._producer.pidfile import PidFile
from .._producer.publisher import DrainedPublisher, default_producer_id
from .._producer.schedule import WAKE_SIGNAL, PassSchedule, Stopped, Wake, stop_signals
from .._producer.slurm import NODE_STATES, SlurmClient
from .._producer.state import PRODUCER_ID
from .._settings.durations import DurationSetting
from .arguments import (
    DIRECTORY,
    FS_TIMEOUT_OPTION,
    OneOf,
    add_command,
    directory_of,
    option,
    seconds_type,
    slurm_id,
)
from .output import EXIT_FAILURE, EXIT_OK, usage_error

__all__ = [
    "CLEAR_AFTER_FAILING",
    "INTERVAL",
    "SLURM_TIMEOUT",
    "publish_drained_command",
    "register",
]

NAME = "publish-drained"

#: The producer's durations (:func:`~.._settings.durations.validate_seconds`). Their
#: smallest value is the least any use of them has needed; the largest keeps every wait
#: within what ``threading`` and ``subprocess`` accept.
INTERVAL = DurationSetting("--interval", "the time between two passes", 0.001, 86400.0, 30.0)
SLURM_TIMEOUT = DurationSetting(
    "--slurm-timeout", "how long one Slurm command may take", 0.001, 3600.0, 30.0
)
CLEAR_AFTER_FAILING = DurationSetting(
    "--clear-after-failing",
    "how long passes must fail before this producer clears its own decisions",
    0.001,
    604800.0,
    1800.0,
)


def _job_id(value: str) -> str:
    """:func:`~.arguments.slurm_id`, but ``123_7`` gets this command's hint: the
    producer takes the array job id, never one task."""
    split = re.fullmatch(r"([0-9]+)_([0-9]+)", value)
    if split:
        raise argparse.ArgumentTypeError(
            f"{value!r} is one task of array job {split[1]}: give the array job id "
            f"(--job-id {split[1]}); the producer handles all its tasks"
        )
    return slurm_id(value)


def _states(value: str) -> tuple[str, ...]:
    states = tuple(item.strip() for item in value.split(",") if item.strip())
    unknown = [state for state in states if state not in NODE_STATES]
    if unknown or not states:
        raise argparse.ArgumentTypeError(
            f"unknown state(s) {', '.join(unknown) or '(none given)'}; choose from "
            f"{', '.join(NODE_STATES)}"
        )
    return states


def _passes(value: str) -> dict[str, int]:
    passes = {}
    for item in filter(None, (part.strip() for part in value.split(","))):
        state, _, count = item.partition("=")
        if state not in NODE_STATES or not re.fullmatch(r"[1-9][0-9]{0,3}", count):
            raise argparse.ArgumentTypeError(
                f"{item!r} is not STATE=N with STATE one of {', '.join(NODE_STATES)} and N a "
                "whole number of passes from 1 to 9999 (e.g. no_respond=5)"
            )
        passes[state] = int(count)
    return passes


def _producer_id(value: str) -> str:
    if not PRODUCER_ID.fullmatch(value):
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a producer id: 1-64 letters, digits and . _ + @ -, starting "
            "with a letter or digit"
        )
    return value


_DEFAULT_PASSES = ",".join(f"{state}={count}" for state, count in DEFAULT_PASSES.items())
SUMMARY = "publish decisions for the running tasks of a job whose nodes Slurm marks unavailable"
DESCRIPTION = f"""
    A reference producer. Each pass asks Slurm (squeue, then sinfo for the job's
    partitions only; each under --slurm-timeout) which running task of the job uses
    an unavailable node, then writes a decision for each affected task (text: the
    nodes, their states and reasons) and empties the decisions it wrote earlier for
    tasks that are healthy again. A node state counts only after it has held for
    --passes consecutive passes, and clears only after it has been gone as long
    (default counts: {_DEFAULT_PASSES}).
    A pass with any failed, hung or unexpected Slurm answer writes nothing. Only
    changed decisions are written; only its own are cleared (its decisions carry
    its --producer-id); a decision it cannot read is left alone.
    With --interval, SIGUSR1 runs a pass at once (several during a pass: one more
    after it); --pid-file says where to send it. With --once, SIGUSR1 is ignored.
    """
EXAMPLES = """
    nvrx-seghealth publish-drained --dir /shared/job/segment-health-check/123 --job-id 123 --once
    nvrx-seghealth publish-drained --dir /shared/job/segment-health-check/123 --job-id 123 \\
        --interval 30 --states drain,fail \\
        --audit-log /shared/job/segment-health-check/123-audit.jsonl
    nvrx-seghealth publish-drained --dir /shared/job/segment-health-check/123 --job-id 123 \\
        --interval 60 --passes no_respond=5 --clear-after-failing 1800 --producer-id ops-a
    nvrx-seghealth publish-drained --dir /shared/job/segment-health-check/123 --job-id 123 \\
        --interval 300 --pid-file /run/nvrx-seghealth/123.pid &
    scontrol update nodename=gpu017 state=drain reason="bad dimm"
    examples/publish-drained-now.sh /run/nvrx-seghealth/123.pid   # a pass now, not in 300 s
    """
OPTIONS = (
    DIRECTORY,
    option(
        "--job-id",
        type=_job_id,
        required=True,
        metavar="ARRAY_JOB_ID",
        help="the array job id (SLURM_ARRAY_JOB_ID), or a regular job's id",
    ),
    option(
        "--states",
        type=_states,
        default=tuple(NODE_STATES),
        metavar="LIST",
        help="node states that make a task unhealthy, comma-separated, from "
        f"{', '.join(NODE_STATES)} (default: all)",
    ),
    option(
        "--passes",
        type=_passes,
        default={},
        metavar="STATE=N,...",
        help="consecutive passes a state must hold to count, and be gone to "
        f"clear (default: {_DEFAULT_PASSES})",
    ),
    option(
        "--producer-id",
        type=_producer_id,
        metavar="ID",
        help="this producer's name in its decisions: it clears only decisions "
        "with its own id (default: <account>-<states>)",
    ),
    OneOf(
        (
            option("--once", action="store_true", help="run one pass and exit (default)"),
            option(
                "--interval",
                type=seconds_type(INTERVAL),
                metavar="S",
                help="run a pass every S seconds, and at once on SIGUSR1, until SIGINT or "
                f"SIGTERM ({INTERVAL.range_text})",
            ),
        )
    ),
    option(
        "--pid-file",
        metavar="PATH",
        help="with --interval: keep this producer's pid in PATH, locked while it runs, for "
        "a wake-up by SIGUSR1 (examples/publish-drained-now.sh signals only a live "
        "producer); a local file in a folder only this account can write; refused while "
        "another producer holds it",
    ),
    option(
        "--slurm-timeout",
        type=seconds_type(SLURM_TIMEOUT),
        default=30.0,
        metavar="S",
        help=f"seconds one Slurm command may take ({SLURM_TIMEOUT.range_text}, default: 30)",
    ),
    option(
        "--clear-after-failing",
        type=seconds_type(CLEAR_AFTER_FAILING),
        metavar="S",
        help="once every pass has failed for S seconds, clear this producer's "
        f"own decisions (fail open; {CLEAR_AFTER_FAILING.range_text}; NVRx's producer: "
        "1800). Default: keep them until a pass succeeds",
    ),
    FS_TIMEOUT_OPTION,
    option(
        "--audit-log",
        metavar="FILE.jsonl",
        help="append one JSON line per transition and per failure; a file of another "
        "account, or with several names (hard links), is refused",
    ),
)


def register(subparsers: Any) -> None:
    """Add the ``publish-drained`` subcommand."""
    add_command(subparsers, NAME, SUMMARY, DESCRIPTION, EXAMPLES, OPTIONS, publish_drained_command)


def _audit(path: str | None, events: list[AuditEvent], timeout: float) -> None:
    if path is None or not events:
        return
    stamp = iso_time(time.time())
    lines = "".join(event.to_json(stamp) for event in events)
    try:
        boundedfs.append_text(path, lines, timeout)
    except OSError as error:  # HelperTimeout too
        print(
            f"nvrx-seghealth {NAME}: warning: cannot append to the audit log {path}: {error}",
            file=sys.stderr,
        )


#: The events a pass's summary line counts, in its order.
_COUNTED = (
    EventKind.PUBLISHED,
    EventKind.UPDATED,
    EventKind.CLEARED,
    EventKind.CONFLICT,
    EventKind.WRITE_FAILED,
)


def _report(result: PassResult, publisher: DrainedPublisher) -> None:
    """Print what a pass did: its warnings, its failure, its events and its summary."""
    stamp = iso_time(time.time())
    for warning in result.warnings:
        print(f"{stamp} warning: {warning}", file=sys.stderr)
    streak = publisher.streak
    if result.error is not None:
        print(
            f"{stamp} pass failed, nothing written, last decisions kept (passes failing "
            f"since {iso_time(streak.failing_since)}, {streak.failed_passes} in a row): "
            f"{result.error}",
            file=sys.stderr,
        )
    for event in result.events:
        _report_event(stamp, event)
    if result.error is None:
        print(f"{stamp} pass done: {_summary(result)}")


def _report_event(stamp: str, event: AuditEvent) -> None:
    """One event's line: a failure or a conflict on stderr, a transition on stdout."""
    record = event.as_record()
    if event.kind is EventKind.WRITE_FAILED:
        print(
            f"{stamp} task {event.task_id}: {record['intended']} failed: {event.error}",
            file=sys.stderr,
        )
    elif event.kind is EventKind.CONFLICT:
        print(
            f"{stamp} task {event.task_id}: not {record['intended']}: {event.path} "
            f"changed since it was read and now holds another decision ({event.found}"
            "); that decision stands",
            file=sys.stderr,
        )
    elif event.kind in TRANSITIONS:
        detail = f": {event.text}" if event.text else ""
        print(f"{stamp} task {event.task_id}: {event.kind.value} {event.path}{detail}")


def _summary(result: PassResult) -> str:
    """A good pass in one line: the unavailable nodes, the running tasks, the counts."""
    nodes = ", ".join(result.unavailable) or "none"
    seen = collections.Counter(event.kind for event in result.events)
    counts = {kind.value: seen[kind] for kind in _COUNTED}
    pending = f"; not counted yet: {', '.join(result.pending)}" if result.pending else ""
    return (
        f"unavailable nodes: {nodes}{pending}; {result.running} running tasks; "
        + ", ".join(f"{count} {name}" for name, count in counts.items())
        + f", {result.unchanged} unchanged"
    )


def _warn_state(publisher: DrainedPublisher) -> None:
    warning = publisher.load_state()
    if warning:
        print(f"{iso_time(time.time())} warning: {warning}", file=sys.stderr)


def _warn_pid_file(pid_file: PidFile | None, warned: str | None) -> str | None:
    """Warn when the pid file no longer finds this producer (:meth:`PidFile.problem`),
    unless ``warned`` already said so; return what is wrong now (``None``: nothing)."""
    problem = pid_file.problem() if pid_file is not None else None
    if problem is not None and problem != warned:
        print(f"{iso_time(time.time())} warning: {problem}", file=sys.stderr)
    return problem


def _directory_problem(directory: str, timeout: float) -> str | None:
    """Why the producer must not start on ``directory``: it does not exist, is not a
    directory, or cannot be examined within ``timeout`` (a pass there could only fail).

    Stricter than :func:`~.._decision.decision_file.directory_problem`, which lets a
    directory that cannot be examined pass (a consumer fails open and reports it)."""
    try:
        mode = stat_within(directory, timeout).st_mode
    except FileNotFoundError:
        return f"{directory} does not exist: create it first (mkdir -p {directory})"
    except (OSError, ValueError) as error:
        return f"{directory} cannot be examined ({error}): fix --dir or the filesystem"
    if not stat.S_ISDIR(mode):
        return f"{directory} is not a directory: point --dir at the decision directory"
    return None


def _not_own(path: str, timeout: float) -> str | None:
    """What makes ``path`` not this account's own regular file
    (:func:`~.._decision.files.not_own_file`: another's, or several names; or not a
    regular file). ``None`` when it is, when it does not exist, and when the
    filesystem does not answer within ``timeout`` (the first use says so)."""
    try:
        current = boundedfs.read_current(path, timeout)
    except OSError:  # HelperTimeout, or the helper failed
        return None
    if current.kind == "absent":
        return None
    if current.kind != "content":
        return current.error
    return not_own_file(current.uid, current.nlink)


def _state_file_problem(path: str, timeout: float) -> str | None:
    """Why this producer, unless it is root, must not start with its state file ``path``:
    the name holds anything but this account's own regular file (:func:`_not_own`;
    planted by another: the default producer id is predictable). It could not replace
    that in a sticky directory, so every pass would count anew, and a state that must
    hold for several passes would never count. ``None`` for root, who replaces what is
    there at its first save (:func:`~.._producer.state.read_state_file` trusts none of
    it)."""
    what = None if os.geteuid() == 0 else _not_own(path, timeout)
    if what is None:
        return None
    return (
        f"the state file {path} is not this account's ({what}): this producer could not "
        "keep its counts there. Remove it (as its owner or root); a decision directory "
        "writable only by the producer's account, or by a group, keeps others from planting it"
    )


def _audit_log_problem(path: str | None, timeout: float) -> str | None:
    """Why this producer must not start with ``--audit-log`` ``path``: it is not this
    account's own regular file (:func:`_not_own`). Every append refuses such a file too
    (:func:`~.._decision.files.append_text`), should it be swapped in later."""
    what = None if path is None else _not_own(os.path.abspath(path), timeout)
    if what is None:
        return None
    return (
        f"--audit-log {path} is not this account's own file ({what}): its owner could "
        "rewrite the trail, or a link make this producer append to a file it never named. "
        "Remove it (as its owner or root), or give a path in a folder only this account "
        "can write"
    )


def publish_drained_command(args: argparse.Namespace) -> int:
    """Run one pass (``--once``) or passes every ``--interval`` seconds; see the module doc."""
    directory = directory_of(args)
    problem = _directory_problem(directory, args.fs_timeout)
    if problem is not None:
        return usage_error(NAME, problem)
    publisher = DrainedPublisher(
        directory,
        args.job_id,
        args.states,
        SlurmClient(args.slurm_timeout),
        producer_id=args.producer_id or default_producer_id(args.states),
        passes=args.passes,
        fs_timeout=args.fs_timeout,
        clear_after_failing=args.clear_after_failing,
        interval=args.interval,
    )
    problem = _state_file_problem(publisher.state_path, args.fs_timeout) or _audit_log_problem(
        args.audit_log, args.fs_timeout
    )
    if problem is not None:
        return usage_error(NAME, problem)
    # Ignored outside the schedule: with --once the pass runs anyway; with --interval a
    # wake-up that lands after the schedule restored its handlers, at exit, kills nothing.
    signal.signal(WAKE_SIGNAL, signal.SIG_IGN)
    if args.interval is None:
        return _once(args, publisher)
    return _every_interval(args, publisher)


def _once(args: argparse.Namespace, publisher: DrainedPublisher) -> int:
    """``--once``: one pass; 0 when it and all its writes succeeded."""
    if args.pid_file is not None:
        return usage_error(NAME, "--pid-file needs --interval: one pass has no one to signal")
    try:
        with stop_signals():
            _warn_state(publisher)
            result = publisher.run_pass()
    except Stopped as stopped:
        _report_stop(stopped, "a pass")
        return EXIT_FAILURE
    _audit(args.audit_log, result.events, args.fs_timeout)
    _report(result, publisher)
    return EXIT_OK if result.ok else EXIT_FAILURE


def _every_interval(args: argparse.Namespace, publisher: DrainedPublisher) -> int:
    """``--interval``: a pass every interval and on SIGUSR1, until a stop signal; 0."""
    pid_file = PidFile(args.pid_file) if args.pid_file is not None else None
    during = "start-up"  # the stable token of the stop line until a pass starts
    pid_file_problem = None
    try:
        with PassSchedule(args.interval) as schedule:
            try:
                if pid_file is not None:
                    pid_file.claim()  # after the handlers: a SIGUSR1 from now on runs a pass
                _warn_state(publisher)
                for wake in schedule.passes():
                    during = "a pass"
                    _scheduled_pass(args, publisher, wake)
                    pid_file_problem = _warn_pid_file(pid_file, pid_file_problem)
                    sys.stdout.flush()
            finally:
                if pid_file is not None:
                    pid_file.release()  # before the handlers go: a late SIGUSR1 kills nothing
    except Stopped as stopped:
        _report_stop(stopped, during)
    return EXIT_OK


def _scheduled_pass(args: argparse.Namespace, publisher: DrainedPublisher, wake: Wake) -> None:
    """One pass of ``--interval``, its audit lines and its report."""
    if wake is Wake.SIGNAL:
        print(f"{iso_time(time.time())} pass asked for by {WAKE_SIGNAL.name}")
    result = publisher.run_pass()
    _audit(args.audit_log, result.events, args.fs_timeout)
    _report(result, publisher)


def _report_stop(stopped: Stopped, during: str) -> None:
    """The stop line on stderr: its signal and ``during`` (``a pass`` or ``start-up``)."""
    print(
        f"{iso_time(time.time())} stopped by {stopped.signal.name} during {during}; "
        + (
            "the decisions written before it stand"
            if during == "a pass"
            else "no pass ran, nothing was written"
        ),
        file=sys.stderr,
    )
