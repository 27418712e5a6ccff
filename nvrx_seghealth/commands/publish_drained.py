"""``nvrx-seghealth publish-drained``: a reference producer that follows Slurm's node states.

One *pass*:

1. ask Slurm for every node's state (``sinfo``), the running tasks of the job
   (``squeue``) and each task's nodes (``scontrol show hostnames``) — all before
   anything is written;
2. a running task with a node in one of ``--states`` gets a decision naming those nodes
   and their reasons; a running task whose decision this producer wrote earlier and
   whose nodes are all fine again gets an empty decision (healthy).

Guarantees:

* A pass in which any Slurm command fails, hangs (each runs under ``--slurm-timeout``)
  or answers something unexpected writes nothing: the last decisions stay, and a
  broken Slurm never reads as "all healthy".
* Only files this producer wrote are cleared: its decisions start with
  :data:`PRODUCER_TAG`. A non-empty decision written by someone else (an operator's
  ``mark``) is left alone. Tasks that are not running are not touched.
* Writes are atomic (:func:`nvrx_seghealth.publish_decision`,
  :func:`nvrx_seghealth.clear_decision`) and happen only when the content changes
  (the text holds no timestamp). One task's failed write does not stop the others.
* ``--audit-log FILE`` gets one JSON line per transition (``published``, ``updated``,
  ``cleared``) and per failure (``write-failed``, ``pass-failed``).

Exit codes: with ``--once`` (the default) 0 when the pass and every write succeeded,
1 otherwise; with ``--interval`` the loop runs until SIGINT/SIGTERM and exits 0; 2 usage
or configuration error. Standard library plus PyYAML.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import signal
import sys
import threading
from dataclasses import dataclass, field
from typing import Any

from ..artifact import artifact_path, clear_decision, publish_decision
from ..config import ConfigurationError
from .arguments import add_command, add_directory_option, directory_of, slurm_id
from .decisions import read_head
from .output import EXIT_FAILURE, EXIT_OK, usage_error
from .slurm import NODE_STATES, NodeState, SlurmClient, SlurmError

__all__ = ["PRODUCER_TAG", "DrainedPublisher", "PassResult", "decision_text",
           "publish_drained_command", "register"]

NAME = "publish-drained"

#: First bytes of every decision this producer writes; it clears only such files.
PRODUCER_TAG = "nvrx-seghealth publish-drained:"

DEFAULT_STATES = ("drain", "down", "fail", "no_respond")


def register(subparsers: Any) -> None:
    """Add the ``publish-drained`` subcommand."""
    parser = add_command(
        subparsers,
        NAME,
        "publish decisions for the running tasks of a job whose nodes Slurm marks unavailable",
        """
        A reference producer. Each pass asks Slurm (sinfo, squeue, scontrol; each under
        --slurm-timeout) which nodes are unavailable and which running task of the job
        uses them, then writes a decision for each affected task (text: the nodes, their
        states and reasons) and empties the decisions it wrote earlier for tasks that
        are healthy again. A pass with any failed, hung or unexpected Slurm answer
        writes nothing. Only changed decisions are written; only its own are cleared.

        exit status (--once): 0 pass and writes succeeded, 1 failed pass or write,
        2 usage error; --interval runs until SIGINT/SIGTERM
        """,
        """
        nvrx-seghealth publish-drained --dir /shared/job/shc --job-id 123 --once
        nvrx-seghealth publish-drained --dir /shared/job/shc --job-id 123 --interval 30 \\
            --states drain,fail --audit-log /shared/job/shc-audit.jsonl
        """,
    )
    add_directory_option(parser)
    parser.add_argument("--job-id", type=slurm_id, required=True, metavar="ARRAY_JOB_ID",
                        help="the array job id (SLURM_ARRAY_JOB_ID), or a regular job's id")
    parser.add_argument("--states", type=_states, default=DEFAULT_STATES, metavar="LIST",
                        help="node states that make a task unhealthy, comma-separated, from "
                             f"{', '.join(NODE_STATES)} (default: all)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--once", action="store_true", help="run one pass and exit (default)")
    mode.add_argument("--interval", type=_seconds, metavar="S",
                      help="run a pass every S seconds until SIGINT or SIGTERM")
    parser.add_argument("--slurm-timeout", type=_seconds, default=30.0, metavar="S",
                        help="seconds one Slurm command may take (default: 30)")
    parser.add_argument("--audit-log", metavar="FILE.jsonl",
                        help="append one JSON line per transition and per failure")
    parser.set_defaults(func=publish_drained_command)


def _states(value: str) -> tuple[str, ...]:
    states = tuple(item.strip() for item in value.split(",") if item.strip())
    unknown = [state for state in states if state not in NODE_STATES]
    if unknown or not states:
        raise argparse.ArgumentTypeError(
            f"unknown state(s) {', '.join(unknown) or '(none given)'}; choose from "
            f"{', '.join(NODE_STATES)}")
    return states


def _seconds(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not (seconds > 0 and math.isfinite(seconds)):
        raise argparse.ArgumentTypeError(f"{value!r} is not a positive number of seconds")
    return seconds


def decision_text(nodes: list[NodeState]) -> str:
    """The decision for a task using ``nodes``: one line, deterministic (no timestamp)."""
    return f"{PRODUCER_TAG} unavailable nodes: {'; '.join(n.describe() for n in nodes)}\n"


@dataclass
class PassResult:
    """What one pass saw and did.

    Attributes:
        error: why the pass wrote nothing (a Slurm failure), else ``None``.
        unavailable: nodes in the watched states.
        running: how many tasks of the job were running.
        events: the audit records of the transitions and failed writes.
        unchanged: running tasks whose decision needed no write.
    """

    error: str | None = None
    unavailable: list[NodeState] = field(default_factory=list)
    running: int = 0
    events: list[dict[str, Any]] = field(default_factory=list)
    unchanged: int = 0

    @property
    def ok(self) -> bool:
        """The pass completed and every write succeeded."""
        return self.error is None and not any(
            event["event"] == "write-failed" for event in self.events)


class DrainedPublisher:
    """Publishes the decisions of one job from Slurm's node states; see the module doc."""

    def __init__(self, directory: str, job_id: str, states: tuple[str, ...],
                 slurm: SlurmClient) -> None:
        self.directory = directory
        self.job_id = job_id
        self.states = states
        self.slurm = slurm

    def _desired(self, result: PassResult) -> dict[str, str | None]:
        """Task id -> decision text (``None``: healthy); only queries, no writes."""
        nodes = self.slurm.nodes()
        unavailable = {node.node: node for node in nodes if node.matches(self.states)}
        result.unavailable = list(unavailable.values())
        tasks = self.slurm.running_tasks(self.job_id)
        result.running = len(tasks)
        expanded: dict[str, list[str]] = {}
        desired: dict[str, str | None] = {}
        for task in tasks:
            if task.hostlist not in expanded:
                expanded[task.hostlist] = self.slurm.hostnames(task.hostlist)
            bad = [unavailable[host] for host in expanded[task.hostlist] if host in unavailable]
            desired[task.task_id] = decision_text(bad) if bad else None
        return desired

    def _apply(self, task_id: str, text: str | None, result: PassResult) -> None:
        path = artifact_path(self.directory, self.job_id, task_id)
        current = read_head(path)
        ours = current is not None and current.startswith(PRODUCER_TAG.encode())
        if text is not None and current != text.encode() and (ours or not current):
            event = "updated" if ours else "published"
        elif text is None and ours:
            event = "cleared"
        else:
            result.unchanged += 1
            return
        record: dict[str, Any] = {"event": event, "job_id": self.job_id, "task_id": task_id,
                                  "path": path, "text": (text or "").strip()}
        try:
            if text is None:
                clear_decision(self.directory, self.job_id, task_id)
            else:
                publish_decision(self.directory, self.job_id, task_id, text)
        except OSError as error:
            record.update(event="write-failed", intended=event, error=str(error))
        result.events.append(record)

    def run_pass(self) -> PassResult:
        """One pass: query everything, then write what changed; never raises for Slurm."""
        result = PassResult()
        try:
            desired = self._desired(result)
        except SlurmError as error:
            result.error = str(error)
            result.events.append({"event": "pass-failed", "job_id": self.job_id,
                                  "error": result.error})
            return result
        for task_id, text in sorted(desired.items(), key=lambda item: int(item[0])):
            self._apply(task_id, text, result)
        return result


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _audit(path: str | None, events: list[dict[str, Any]]) -> None:
    if path is None or not events:
        return
    lines = "".join(json.dumps({"time": _now(), **event}, sort_keys=True) + "\n"
                    for event in events)
    try:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(lines)
    except OSError as error:
        print(f"nvrx-seghealth {NAME}: warning: cannot append to the audit log {path}: "
              f"{error}", file=sys.stderr)


def _report(result: PassResult) -> None:
    stamp = _now()
    if result.error is not None:
        print(f"{stamp} pass failed, nothing written, last decisions kept: {result.error}",
              file=sys.stderr)
        return
    for event in result.events:
        if event["event"] == "write-failed":
            print(f"{stamp} task {event['task_id']}: {event['intended']} failed: "
                  f"{event['error']}", file=sys.stderr)
        else:
            detail = f": {event['text']}" if event["text"] else ""
            print(f"{stamp} task {event['task_id']}: {event['event']} {event['path']}{detail}")
    nodes = ", ".join(f"{n.node} {n.state}{n.flags}" for n in result.unavailable) or "none"
    counts = {name: sum(e["event"] == name for e in result.events)
              for name in ("published", "updated", "cleared", "write-failed")}
    print(f"{stamp} pass done: unavailable nodes: {nodes}; {result.running} running tasks; "
          + ", ".join(f"{count} {name}" for name, count in counts.items())
          + f", {result.unchanged} unchanged")


def publish_drained_command(args: argparse.Namespace) -> int:
    """Run one pass (``--once``) or passes every ``--interval`` seconds; see the module doc."""
    try:
        directory = directory_of(args)
    except ConfigurationError as error:
        return usage_error(NAME, str(error))
    if not os.path.isdir(directory):
        return usage_error(NAME, f"{directory} is not an existing directory: create it first")
    publisher = DrainedPublisher(directory, args.job_id, args.states,
                                 SlurmClient(args.slurm_timeout))
    if args.interval is None:
        result = publisher.run_pass()
        _audit(args.audit_log, result.events)
        _report(result)
        return EXIT_OK if result.ok else EXIT_FAILURE
    stop = threading.Event()
    handlers = {sig: signal.signal(sig, lambda *_: stop.set())
                for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        while not stop.is_set():
            result = publisher.run_pass()
            _audit(args.audit_log, result.events)
            _report(result)
            sys.stdout.flush()
            stop.wait(args.interval)
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    return EXIT_OK
