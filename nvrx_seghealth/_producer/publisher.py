"""The engine of ``nvrx-seghealth publish-drained``: decisions from Slurm's node states.

The command (:mod:`nvrx_seghealth._commands.publish_drained`) parses the options, runs the
passes and prints them. One pass asks Slurm first, counts node states (:mod:`.debounce`),
then writes. docs/operators.md, "The reference producer", tells the story. The rules:

- A producer clears or rewrites only decisions tagged with its own id; every other
  decision is left alone.
- A decision it cannot read is someone else's: one WARNING, one ``unreadable`` event.
- A write lands only if the file still holds what the pass read (:mod:`.._decision.files`).
- A decision is written only when its content changes: the text holds no timestamp.
- A failed Slurm query writes nothing: a broken Slurm never reads as "all healthy".
- A failed read or write fails the pass too; the other decisions are still written.
- ``--clear-after-failing`` clears this producer's decisions once, only at a pass whose
  Slurm queries fail.
- Every filesystem call is bounded by ``--fs-timeout``; a stop signal ends a pass at once.
- After every pass the state file is written (:mod:`.state`); a bad one is never a reason
  to publish.
- Each pass returns its :class:`~.audit.AuditEvent` s, for ``--audit-log``.

One module, over the package's 400 lines: one class keeps every rule above for a pass,
from Slurm's answer to its last write and its state file.
"""

from __future__ import annotations

import os
import pwd
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict
from typing import Literal

from .._decision import boundedfs
from .._decision.decision_file import unit_decision_file_path
from .._decision.files import Current
from .._decision.helperprocess import HelperTimeout
from .._decision.listing import first_line, list_decisions
from .._decision.problems import hung_problem, write_problem
from .._decision.unit import SlurmId
from .audit import READ, AuditEvent, EventKind, PassResult
from .debounce import DEFAULT_PASSES, Debouncer
from .slurm import NODE_STATES, RunningTask, SlurmClient, SlurmError
from .state import (
    FailureStreak,
    ProducerState,
    StateFileError,
    read_state_file,
    state_file_name,
)

__all__ = [
    "TAG_PREFIX",
    "DrainedPublisher",
    "decision_text",
    "default_producer_id",
    "producer_tag",
    "state_file_name",
]

#: Every decision this producer writes starts with ``TAG_PREFIX[<producer id>]:``.
TAG_PREFIX = "nvrx-seghealth publish-drained"


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


class _Hung(Exception):
    """A call into the decision directory did not answer: the pass stops touching it."""


class DrainedPublisher:
    """Publishes the decisions of one job from Slurm's node states; see the module doc.

    Args:
        directory: the decision directory (absolute, validated by the caller).
        job_id: the array (or regular) job. The ids are ``SlurmId`` s (the tasks' are
            made so where Slurm's answer enters, :mod:`.slurm`), and a pass takes them and
            ``directory`` as they are.
        states: the watched states. passes: consecutive passes per state (defaults
            from :data:`~.debounce.DEFAULT_PASSES`). producer_id: this instance's id.
        slurm: the Slurm client. fs_timeout: bound of each call into the directory.
        clear_after_failing: seconds of failed passes after which the producer's own
            decisions are cleared; ``None``: never.
        interval: seconds between passes (``None``: single passes), recorded in the
            state file so that ``status`` can tell a producer that stopped.
        before_write: called with the decision path between the pass's read of a
            decision and its conditional write (a test can hold the window open).

    Attributes:
        streak: how the passes go (:class:`~.state.FailureStreak`), after the last one.
    """

    def __init__(
        self,
        directory: str,
        job_id: SlurmId,
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
        self.streak = FailureStreak()
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
        except HelperTimeout as error:
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
        self.streak = FailureStreak.of(state)
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
            **asdict(self.streak),
            unreadable=tuple(sorted(self.unreadable)),
            nodes=dict(sorted(self.debouncer.records.items())),
        )
        try:
            boundedfs.replace(self.state_path, state.to_json(), None, self.fs_timeout, lock=False)
        except OSError as error:  # LockBusyError and HelperTimeout too
            problem = write_problem(error, self.directory, self.state_path, self.fs_timeout)
            result.warnings.append(f"state file not saved: {problem}")

    # --- one pass ------------------------------------------------------------------------

    def _event(
        self,
        kind: EventKind,
        task_id: str,
        path: str,
        *,
        text: str | None = None,
        intended: EventKind | Literal["read"] | None = None,
        found: str | None = None,
        error: str | None = None,
    ) -> AuditEvent:
        """An event of ``kind`` about ``task_id``'s decision ``path`` (:mod:`.audit`)."""
        return AuditEvent(
            kind,
            self.job_id,
            self.producer_id,
            task_id=task_id,
            path=path,
            text=text,
            intended=intended,
            found=found,
            error=error,
        )

    def _write_failed(
        self,
        result: PassResult,
        task_id: str,
        path: str,
        intended: EventKind | Literal["read"],
        error: OSError,
        problem: str,
    ) -> None:
        """Record a ``write-failed`` for ``error``; raise :class:`_Hung` when the call
        did not answer, so the pass stops touching the directory."""
        event = self._event(EventKind.WRITE_FAILED, task_id, path, intended=intended, error=problem)
        result.events.append(event)
        if isinstance(error, HelperTimeout):
            raise _Hung from None

    def _write(
        self,
        result: PassResult,
        kind: EventKind,
        task_id: str,
        path: str,
        text: str,
        current: Current,
    ) -> None:
        """Write ``text`` as ``task_id``'s decision if ``path`` still holds ``current``;
        record ``kind``, a ``conflict`` or a ``write-failed``."""
        if self.before_write is not None:
            self.before_write(path)
        try:
            written = boundedfs.replace(path, text.encode(), current, self.fs_timeout)
        except OSError as error:  # LockBusyError and HelperTimeout too
            problem = write_problem(error, self.directory, path, self.fs_timeout)
            self._write_failed(result, task_id, path, kind, error, problem)
            return
        result.warnings.extend(written.warnings)
        if written.status == "unchanged":  # another writer wrote the same: a replica
            result.unchanged += 1
            return
        if written.status == "conflict":
            before = written.before
            found = first_line(before.data) if before.kind == "content" else before.kind
            event = self._event(EventKind.CONFLICT, task_id, path, intended=kind, found=found)
        else:
            event = self._event(kind, task_id, path, text=text.strip())
        result.events.append(event)

    def _apply(self, task_id: SlurmId, desired: str | None, result: PassResult) -> None:
        """Bring ``task_id``'s decision to ``desired`` (:meth:`_desired`) where it may."""
        path = unit_decision_file_path(self.directory, self.job_id, task_id)
        try:
            current = boundedfs.read_current(path, self.fs_timeout)
        except OSError as error:  # HelperTimeout too: the directory hangs
            if isinstance(error, HelperTimeout):
                problem = hung_problem(error, self.directory, self.fs_timeout, wrote=False)
            else:
                problem = write_problem(error, self.directory, path, self.fs_timeout)
            self._write_failed(result, task_id, path, READ, error, problem)
            return
        if current.kind == "unreadable":
            if path not in self.unreadable:
                self.unreadable.add(path)
                result.warnings.append(
                    f"task {task_id}: {path} cannot be read ({current.error}): it is someone "
                    "else's decision and is left alone; make it readable to this producer "
                    "or remove it"
                )
                event = self._event(EventKind.UNREADABLE, task_id, path, error=current.error)
                result.events.append(event)
            result.unchanged += 1
            return
        self.unreadable.discard(path)
        ours = current.kind == "content" and current.data.startswith(self.tag)
        if desired is None or (desired == "" and not ours):
            result.unchanged += 1
        elif desired == "":
            self._write(result, EventKind.CLEARED, task_id, path, "", current)
        elif current.kind == "content" and current.data == desired.encode():
            result.unchanged += 1
        elif ours or current.empty:
            kind = EventKind.UPDATED if ours else EventKind.PUBLISHED
            self._write(result, kind, task_id, path, desired, current)
        else:
            result.unchanged += 1  # someone else's decision stands

    def _desired(self, tasks: list[RunningTask]) -> dict[SlurmId, str | None]:
        """Task id -> the decision it should hold: its text, ``""`` (healthy: this
        producer's own decision is emptied), or ``None``: it keeps the one it has (a node
        whose state has not counted yet)."""
        unavailable = self.debouncer.unavailable()
        pending = self.debouncer.pending()
        desired: dict[SlurmId, str | None] = {}
        for task in tasks:
            bad = [unavailable[host] for host in dict.fromkeys(task.hosts) if host in unavailable]
            if bad:
                desired[task.task_id] = decision_text(self.producer_id, bad)
            else:
                desired[task.task_id] = None if pending.intersection(task.hosts) else ""
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
            self._settle(result, now)
            return result
        self._settle(result, now)
        self._save_state(result, now)
        return result

    def _settle(self, result: PassResult, now: float) -> None:
        """Record how the pass whose Slurm queries succeeded went: ok, or failed when a
        read or write of a decision failed (``status`` then says ``failing``)."""
        failures = [event for event in result.events if event.kind is EventKind.WRITE_FAILED]
        if not failures:
            self.streak = self.streak.ok(now)
            return
        first = failures[0]
        count = f"{len(failures)} decision{'' if len(failures) == 1 else 's'} not written"
        self.streak = self.streak.failed(now, f"{count} (task {first.task_id}: {first.error})")

    def _failed(self, result: PassResult, error: str, now: float) -> None:
        result.error = error
        self.streak = self.streak.failed(now, error)
        result.events.append(
            AuditEvent(
                EventKind.PASS_FAILED,
                self.job_id,
                self.producer_id,
                error=error,
                failing_since=self.streak.failing_since,
            )
        )
        if self.streak.stale_due(self.clear_after_failing):
            self._clear_own(result)

    def _clear_own(self, result: PassResult) -> None:
        """Clear every decision of this producer for the job (after ``clear_after_failing``)."""
        try:
            names = boundedfs.list_names(self.directory, self.fs_timeout)
        except OSError as error:  # HelperTimeout too
            result.warnings.append(
                f"cannot list {self.directory} to clear stale decisions: {error}"
            )
            return
        for decision in list_decisions(names, self.directory, self.job_id):
            try:
                current = boundedfs.read_current(decision.path, self.fs_timeout)
            except OSError:  # HelperTimeout too
                continue
            if current.kind == "content" and current.data.startswith(self.tag):
                try:
                    self._write(
                        result,
                        EventKind.STALE_CLEARED,
                        decision.task_id,
                        decision.path,
                        "",
                        current,
                    )
                except _Hung:
                    result.warnings.append(
                        "the decision directory does not answer: stale "
                        "decisions are cleared at a later pass"
                    )
                    return
        self.streak = self.streak.cleared()
        self.debouncer.records.clear()
