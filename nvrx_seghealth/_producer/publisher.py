"""The engine of ``nvrx-seghealth publish-drained``: a reference producer that follows
Slurm's node states (the command, :mod:`nvrx_seghealth._commands.publish_drained`, parses
its options, runs the passes and prints them).

One *pass*:

1. ask Slurm for the job's running tasks and their partitions (``squeue``), then for the
   nodes of those partitions only (``sinfo -p``) — all before anything is written;
2. count the node states (:mod:`.debounce`): a state counts only after it has held for
   its number of consecutive passes (``--passes``), and stops counting only after it has
   been gone for as many;
3. a running task with an unavailable node gets a decision naming the nodes and their
   reasons; a running task whose decision this producer wrote and whose nodes are all
   fine again gets an empty decision (healthy). A task with a node whose state has not
   counted yet keeps the decision it has.

Guarantees:

* **Ownership per producer.** Each instance has an id (``--producer-id``; default
  ``<account>-<states>``, e.g. ``root-drain+down+fail+no_respond``), and its decisions
  start with ``nvrx-seghealth publish-drained[<id>]:``. It clears or rewrites only those;
  every other decision — an operator's ``mark``, another producer's — is left alone.
* **An unreadable decision is someone else's**: never overwritten, never cleared; one
  WARNING and one audit line (``unreadable``) when it is first met.
* **No lost concurrent write.** Each write is conditional on the file still holding what
  the pass read, under the directory's lock (:mod:`nvrx_seghealth._decision.files`): a
  ``mark`` that lands meanwhile stands, and the pass records a ``conflict``.
* **A failed pass writes nothing.** A Slurm command that fails, hangs (``--slurm-timeout``)
  or answers something unexpected keeps the last decisions: a broken Slurm never reads
  as "all healthy". With ``--clear-after-failing S`` (opt-in), a producer whose passes
  have all failed for S seconds clears its own decisions once (fail open).
* **Bounded on a hung mount.** Every read, write and append runs in a helper process
  within ``--fs-timeout`` (:mod:`nvrx_seghealth._decision.boundedfs`); SIGTERM or SIGINT stops
  ``--interval`` at once, also in the middle of a pass.
* Writes are atomic and happen only when the content changes (the text holds no
  timestamp). One task's failed write does not stop the others.

State: after every pass the producer writes ``.publish-drained.<id>.<job_id>.json`` in the
decision directory (the counts, the last good pass, since when passes fail), so the
counts survive a restart (and single ``--once`` passes from cron), and ``status`` can
say how the producer is doing (schema: :mod:`.state`). A state file that is
not this account's own, cannot be read or is not valid is one WARNING and the producer
counts anew: it never publishes because of it. ``--audit-log FILE`` gets one JSON line per
transition (``published``, ``updated``, ``cleared``) and per ``write-failed``, ``conflict``,
``unreadable``, ``pass-failed`` and ``stale-cleared``.
"""

from __future__ import annotations

import datetime
import os
import pwd
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from .._decision import boundedfs
from .._decision.artifact import ARTIFACT_PREFIX, artifact_path
from .._decision.boundedfs import FilesystemTimeout
from .._decision.files import Current, LockBusyError
from .._decision.listing import first_line
from .._decision.problems import hung_problem, write_problem
from .debounce import DEFAULT_PASSES, Debouncer
from .slurm import NODE_STATES, RunningTask, SlurmClient, SlurmError
from .state import (
    ProducerState,
    StateFileError,
    read_state_file,
    state_file_name,
)

__all__ = [
    "TAG_PREFIX",
    "DrainedPublisher",
    "PassResult",
    "decision_text",
    "default_producer_id",
    "iso_time",
    "producer_tag",
    "state_file_name",
]

#: Every decision this producer writes starts with ``TAG_PREFIX[<producer id>]:``.
TAG_PREFIX = "nvrx-seghealth publish-drained"
_KEEP = object()  # a task whose decision stays as it is this pass


def producer_tag(producer_id: str) -> str:
    """The first bytes of every decision written by producer ``producer_id``."""
    return f"{TAG_PREFIX}[{producer_id}]:"


def default_producer_id(states: tuple[str, ...]) -> str:
    """``<account>-<states>``: this account and the watched states, e.g. ``ops-drain+fail``."""
    try:
        account = pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        account = f"uid{os.geteuid()}"
    account = re.sub(r"[^A-Za-z0-9._@-]", "_", account) or "user"
    return f"{account}-{'+'.join(s for s in NODE_STATES if s in states)}"[:64]


def decision_text(producer_id: str, nodes: list[str]) -> str:
    """The decision for a task whose unavailable nodes are ``nodes`` (as seen): one line,
    deterministic (no timestamp)."""
    return f"{producer_tag(producer_id)} unavailable nodes: {'; '.join(nodes)}\n"


def _now() -> float:
    return time.time()


def iso_time(when: float | None) -> str | None:
    """``when`` (seconds since the epoch) as an ISO 8601 UTC time to the second."""
    if when is None:
        return None
    return datetime.datetime.fromtimestamp(when, datetime.timezone.utc).isoformat(
        timespec="seconds"
    )


@dataclass
class PassResult:
    """What one pass saw and did.

    Attributes:
        error: why the pass wrote nothing (a Slurm failure), else ``None``.
        unavailable: nodes of the job that count as unavailable, as seen.
        pending: nodes of the job in a watched state that has not counted yet.
        running: how many tasks of the job were running.
        events: the audit records of the transitions and failures.
        unchanged: running tasks whose decision needed no write.
        warnings: problems that did not fail the pass (a failed directory sync, an
            unreadable decision met for the first time, a state file not saved).
    """

    error: str | None = None
    unavailable: list[str] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)
    running: int = 0
    events: list[dict[str, Any]] = field(default_factory=list)
    unchanged: int = 0
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """The pass completed and every write succeeded."""
        return self.error is None and not any(
            event["event"] == "write-failed" for event in self.events
        )


class _Hung(Exception):
    """A call into the decision directory did not answer: the pass stops touching it."""


class DrainedPublisher:
    """Publishes the decisions of one job from Slurm's node states; see the module doc.

    Args:
        directory: the decision directory. job_id: the array (or regular) job.
        states: the watched states. passes: consecutive passes per state (defaults
            from :data:`~.debounce.DEFAULT_PASSES`). producer_id: this instance's id.
        slurm: the Slurm client. fs_timeout: bound of each call into the directory.
        clear_after_failing: seconds of failed passes after which the producer's own
            decisions are cleared; ``None``: never.
        interval: seconds between passes (``None``: single passes), recorded in the
            state file so that ``status`` can tell a producer that stopped.
        before_write: called with the decision path between the pass's read of a
            decision and its conditional write (a test can hold the window open).
    """

    def __init__(
        self,
        directory: str,
        job_id: str,
        states: tuple[str, ...],
        slurm: SlurmClient,
        *,
        producer_id: str,
        passes: Mapping[str, int] | None = None,
        fs_timeout: float = 10.0,
        clear_after_failing: float | None = None,
        interval: float | None = None,
        before_write: Callable[[str], None] | None = None,
    ) -> None:
        self.directory = directory
        self.job_id = job_id
        self.producer_id = producer_id
        self.tag = producer_tag(producer_id).encode()
        self.slurm = slurm
        self.fs_timeout = fs_timeout
        self.clear_after_failing = clear_after_failing
        self.before_write = before_write
        self.interval = interval
        self.debouncer = Debouncer({s: (passes or {}).get(s, DEFAULT_PASSES[s]) for s in states})
        self.state_path = os.path.join(directory, state_file_name(producer_id, job_id))
        self.last_ok: float | None = None
        self.failing_since: float | None = None
        self.failed_passes = 0
        self.last_error: str | None = None
        self.stale_cleared = False
        self.unreadable: set[str] = set()

    # --- the state file ------------------------------------------------------------------

    def load_state(self) -> str | None:
        """Restore the counts of an earlier run from the state file; a warning when it
        cannot be used, and then nothing of it is: the producer counts anew.

        Only a valid state file (:func:`~.state.read_state_file`) owned by this
        process's effective uid is used: one planted by another account, unreadable or
        malformed counts for nothing, so it can never make the producer publish.
        """
        try:
            state = read_state_file(self.state_path, self.fs_timeout, owner=os.geteuid())
        except FilesystemTimeout as error:
            return (
                f"the state file is not read: "
                f"{hung_problem(error, self.directory, self.fs_timeout, wrote=False)}; "
                "counting anew"
            )
        except StateFileError as error:
            return f"the state file is not used ({error}); counting anew"
        except OSError as error:
            return f"cannot read the state file {self.state_path} ({error}); counting anew"
        if state is None:
            return None
        self.debouncer.load({name: asdict(record) for name, record in state.nodes.items()})
        self.last_ok = state.last_ok
        self.failing_since = state.failing_since
        self.failed_passes = state.failed_passes
        self.last_error = state.last_error
        self.stale_cleared = state.stale_cleared
        self.unreadable = set(state.unreadable)
        return None

    def _save_state(self, result: PassResult, now: float) -> None:
        state = ProducerState(
            producer_id=self.producer_id,
            job_id=self.job_id,
            passes=self.debouncer.passes,
            interval=self.interval,
            clear_after_failing=self.clear_after_failing,
            last_pass=now,
            last_ok=self.last_ok,
            failing_since=self.failing_since,
            failed_passes=self.failed_passes,
            last_error=self.last_error,
            stale_cleared=self.stale_cleared,
            unreadable=tuple(sorted(self.unreadable)),
            nodes=dict(sorted(self.debouncer.records.items())),
        )
        try:
            boundedfs.replace(self.state_path, state.to_json(), None, self.fs_timeout, lock=False)
        except (OSError, LockBusyError, FilesystemTimeout) as error:
            problem = write_problem(error, self.directory, self.state_path, self.fs_timeout)
            result.warnings.append(f"state file not saved: {problem}")

    # --- one pass ------------------------------------------------------------------------

    def _record(
        self, result: PassResult, event: str, task_id: str, path: str, **extra: Any
    ) -> None:
        result.events.append(
            {
                "event": event,
                "job_id": self.job_id,
                "task_id": task_id,
                "path": path,
                "producer_id": self.producer_id,
                **extra,
            }
        )

    def _write(
        self,
        result: PassResult,
        event: str,
        task_id: str,
        path: str,
        content: bytes,
        current: Current,
        text: str,
    ) -> None:
        if self.before_write is not None:
            self.before_write(path)
        try:
            written = boundedfs.replace(path, content, current, self.fs_timeout)
        except (FilesystemTimeout, OSError, LockBusyError) as error:
            self._record(
                result,
                "write-failed",
                task_id,
                path,
                intended=event,
                error=write_problem(error, self.directory, path, self.fs_timeout),
            )
            if isinstance(error, FilesystemTimeout):
                raise _Hung from None
            return
        result.warnings.extend(written.warnings)
        if written.status == "conflict":
            found = (
                first_line(written.before.data)
                if written.before.kind == "content"
                else (written.before.kind)
            )
            self._record(result, "conflict", task_id, path, intended=event, found=found)
        else:
            self._record(result, event, task_id, path, text=text.strip())

    def _apply(self, task_id: str, desired: Any, result: PassResult) -> None:
        path = artifact_path(self.directory, self.job_id, task_id)
        try:
            current = boundedfs.read_current(path, self.fs_timeout)
        except OSError as error:  # FilesystemTimeout too: the directory hangs
            if isinstance(error, FilesystemTimeout):
                problem = hung_problem(error, self.directory, self.fs_timeout, wrote=False)
            else:
                problem = write_problem(error, self.directory, path, self.fs_timeout)
            self._record(result, "write-failed", task_id, path, intended="read", error=problem)
            if isinstance(error, FilesystemTimeout):
                raise _Hung from None
            return
        if current.kind == "unreadable":
            if path not in self.unreadable:
                self.unreadable.add(path)
                result.warnings.append(
                    f"task {task_id}: {path} cannot be read ({current.error}): it is someone "
                    "else's decision and is left alone; make it readable to this producer "
                    "or remove it"
                )
                self._record(result, "unreadable", task_id, path, error=current.error)
            result.unchanged += 1
            return
        self.unreadable.discard(path)
        ours = current.kind == "content" and current.data.startswith(self.tag)
        if desired is _KEEP or (desired is None and not ours):
            result.unchanged += 1
        elif desired is None:
            self._write(result, "cleared", task_id, path, b"", current, "")
        elif current.kind == "content" and current.data == desired.encode():
            result.unchanged += 1
        elif ours or current.empty:
            self._write(
                result,
                "updated" if ours else "published",
                task_id,
                path,
                desired.encode(),
                current,
                desired,
            )
        else:
            result.unchanged += 1  # someone else's decision stands

    def _desired(self, tasks: list[RunningTask]) -> dict[str, Any]:
        unavailable = self.debouncer.unavailable()
        pending = self.debouncer.pending()
        desired: dict[str, Any] = {}
        for task in tasks:
            bad = [unavailable[host] for host in dict.fromkeys(task.hosts) if host in unavailable]
            if bad:
                desired[task.task_id] = decision_text(self.producer_id, bad)
            else:
                desired[task.task_id] = _KEEP if pending.intersection(task.hosts) else None
        return desired

    def run_pass(self) -> PassResult:
        """One pass: query everything, count, then write what changed; never raises for
        Slurm or for the filesystem."""
        result = PassResult()
        now = _now()
        try:
            tasks = self.slurm.running_tasks(self.job_id)
            nodes = self.slurm.nodes({task.partition for task in tasks}) if tasks else []
        except SlurmError as error:
            self._failed(result, str(error), now)
            self._save_state(result, now)
            return result
        hosts = {host for task in tasks for host in task.hosts}
        self.debouncer.observe(node for node in nodes if node.node in hosts)
        self.last_ok, self.failing_since, self.failed_passes = now, None, 0
        self.last_error, self.stale_cleared = None, False
        result.running = len(tasks)
        result.unavailable = sorted(self.debouncer.unavailable().values())
        result.pending = sorted(self.debouncer.pending() & hosts)
        try:
            for task_id, desired in sorted(
                self._desired(tasks).items(), key=lambda item: int(item[0])
            ):
                self._apply(task_id, desired, result)
        except _Hung:
            result.warnings.append(
                "the decision directory does not answer: the rest of this pass was skipped"
            )
            return result
        self._save_state(result, now)
        return result

    def _failed(self, result: PassResult, error: str, now: float) -> None:
        result.error = error
        self.failing_since = self.failing_since or now
        self.failed_passes += 1
        self.last_error = error
        result.events.append(
            {
                "event": "pass-failed",
                "job_id": self.job_id,
                "producer_id": self.producer_id,
                "error": error,
                "failing_since": iso_time(self.failing_since),
            }
        )
        window = self.clear_after_failing
        if window is not None and not self.stale_cleared and now - self.failing_since >= window:
            self._clear_own(result)

    def _clear_own(self, result: PassResult) -> None:
        """Clear every decision of this producer for the job (after ``clear_after_failing``)."""
        prefix = f"{ARTIFACT_PREFIX}.{self.job_id}."
        try:
            names = boundedfs.list_names(self.directory, self.fs_timeout)
        except (OSError, FilesystemTimeout) as error:
            result.warnings.append(
                f"cannot list {self.directory} to clear stale decisions: {error}"
            )
            return
        for name in sorted(names):
            task_id = name[len(prefix) :]
            if not (name.startswith(prefix) and task_id.isdigit()):
                continue
            path = os.path.join(self.directory, name)
            try:
                current = boundedfs.read_current(path, self.fs_timeout)
            except (OSError, FilesystemTimeout):
                continue
            if current.kind == "content" and current.data.startswith(self.tag):
                try:
                    self._write(result, "stale-cleared", task_id, path, b"", current, "")
                except _Hung:
                    result.warnings.append(
                        "the decision directory does not answer: stale "
                        "decisions are cleared at a later pass"
                    )
                    return
        self.stale_cleared = True
        self.debouncer.records.clear()
