"""The package's exceptions, and the tokens of an exclusion.

Every exception class of the package derives from :class:`SegmentHealthError`, whose
documentation draws the tree. Each keeps the builtin base a caller may already catch. A
class raised by a single module lives beside its code; those several layers raise live
here, with an exclusion's tokens: :class:`ExclusionReason`, :class:`When`, and
:class:`Exclusion`, the value a launcher's coordinator decides.

Outside the tree, on purpose:

* ``StepError``, ``NotRegularError`` and ``LockBusyError``, the ``OSError`` s of
  ``_decision/files.py``: a helper runs that file by path, so it imports nothing.
* ``CallsClosed`` and ``Stopped``, ``BaseException`` s as ``SystemExit`` is: the
  fail-open catch-alls let them pass. The producer's private ``_Hung`` never leaves it.
* Python's own exceptions, for a call the calling code gets wrong, and inside the
  launcher for a failure the fail-open funnel turns into one WARNING.

Standard library only.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
from typing import Any

from ._logfmt import FieldValue

__all__ = [
    "ConfigurationError",
    "Exclusion",
    "ExclusionReason",
    "SegmentHealthError",
    "UnhealthyNodeException",
    "When",
]


class SegmentHealthError(Exception):
    """The base of every exception this package raises on purpose.

    Each keeps its builtin base too, e.g. a :class:`ConfigurationError` is a
    ``ValueError``. The tree, with where each class lives (``*``: exported by
    ``nvrx_seghealth``)::

        SegmentHealthError *                   here
        ├── ConfigurationError(ValueError) *   here: a setting cannot be used
        ├── UnhealthyNodeException *           here: the unit is excluded (the spec's name)
        ├── InvalidIdentityError(ValueError) * _decision/unit.py: a Slurm id is unusable
        ├── DecisionConflict(RuntimeError) *   _decision/decision_file.py: a conditional
        │                                      write found another decision; nothing written
        ├── HelperStartError(OSError)          _decision/helperprocess.py: no helper process
        ├── HelperTimeout(TimeoutError)        _decision/helperprocess.py: a bounded call into
        │                                      a hung filesystem did not answer, or was not sent
        ├── Unreachable(ConnectionError)       _rendezvous/retry.py: a replicated service did not
        │                                      answer a call within the retry timeout
        ├── AddUnsettled(RuntimeError)         _rendezvous/etcd_v2.py: an add whose answer was lost
        │                                      cannot tell if it landed (etcd's v2 history passed)
        ├── EtcdError                          _rendezvous/etcd_v3/errors.py: etcd v3, the base of
        │   ├── EtcdUnavailable(ConnectionError)   a member did not answer (transient)
        │   └── EtcdRefused(RuntimeError)      etcd answered no: a cause token and the fix
        ├── SlurmError(RuntimeError)           _producer/slurm.py: a Slurm command failed
        ├── StateFileError(ValueError)         _producer/state.py: a producer's state file
        └── HostlistError(ValueError)          _producer/hostlist.py: a Slurm host list
    """


class ConfigurationError(ValueError, SegmentHealthError):
    """A segment-health setting is invalid; the message names the setting and the fix.

    Attributes:
        setting: the setting, as the user wrote it (``rdzv-conf
            segment_health_check_stat_timeout``, ``--ft-segment-health-check-dir``,
            ``environment variable NVRX_SEGMENT_HEALTH_CHECK_DIR``, ...), when one
            setting is at fault; else ``None``.
    """

    def __init__(self, message: str, *, setting: str | None = None) -> None:
        super().__init__(message)
        self.setting = setting


class ExclusionReason(str, enum.Enum):
    """What excluded a launcher: the stable token of :attr:`UnhealthyNodeException.reason`.

    The same token is the ``by`` field of the ``nvrx_seghealth.excluded`` event and the
    ``reason`` field of the launcher's ERROR line.
    """

    #: Process 0 found a non-empty decision file.
    DECISION_FILE = "decision-file"
    #: The replacement group's marker in the rendezvous store.
    MARKER = "marker"
    #: Process 0's ``excluded`` verdict, through the hand-off.
    VERDICT = "verdict"


class When(str, enum.Enum):
    """When a launcher is excluded: the ``when`` token of the ``nvrx_seghealth.excluded``
    event and of the round's signal (:attr:`token`), and the words of the log (:attr:`phrase`).
    """

    phrase: str

    def __new__(cls, token: str, phrase: str) -> When:  # noqa: PYI034 (no subclass: members)
        member = str.__new__(cls, token)
        member._value_ = token
        member.phrase = phrase
        return member

    #: Before the launcher joins a round.
    BEFORE_JOINING = ("before-joining", "before joining")
    #: Once the inner rendezvous returned, before the workers start.
    AFTER_JOINING = ("after-joining", "right after joining")
    #: While the workers train: process 0's watch, or its stat for a sibling's request.
    DURING_TRAINING = ("during-training", "during training")

    @property
    def token(self) -> str:
        """The stable token: ``before-joining``, ``after-joining``, ``during-training``."""
        return str(self._value_)

    @classmethod
    def parse(cls, token: str | None) -> When | None:
        """The member whose token is ``token``; ``None`` for an unknown one (another release)."""
        return next((when for when in cls if when.token == token), None)

    @property
    def joined(self) -> bool:
        """Whether the launcher is a member of the round it leaves."""
        return self is not When.BEFORE_JOINING


@dataclasses.dataclass(frozen=True)
class Exclusion:
    """One exclusion, as the launcher's coordinator decides it.

    Attributes:
        reason: what excluded the launcher.
        when: when it was excluded.
        cause: what excluded it, in words, for the exception's message.
        path: the decision file that excluded the unit (process 0), else ``None``.
        size: that file's size in bytes, else ``None``.
        marker: the text of the marker that excluded the launcher, else ``None``.
    """

    reason: ExclusionReason
    when: When
    cause: str
    path: str | None = None
    size: int | None = None
    marker: str | None = None

    def error(self, job_id: str, task_id: str) -> UnhealthyNodeException:
        """The exception that excludes the unit ``job_id``, ``task_id``."""
        return UnhealthyNodeException(
            f"allocation unit job_id={job_id} task_id={task_id} is excluded "
            f"{self.when.phrase}: {self.cause}",
            job_id=job_id,
            task_id=task_id,
            reason=self.reason,
            after_joining=self.when.joined,
            when=self.when,
            path=self.path,
            size=self.size,
            marker=self.marker,
        )


class UnhealthyNodeException(SegmentHealthError):
    """This launcher's allocation unit is excluded and must not join the rendezvous.

    Raised from ``next_rendezvous()``. It is deliberately *not* a
    ``RendezvousGracefulExitError`` (torchrun would exit 0) nor any other
    ``RendezvousError`` a launcher might retry: the launcher must exit non-zero so that
    ``srun --kill-on-bad-exit=1`` ends the unit's other tasks.

    Attributes:
        job_id: the unit's job id.
        task_id: the unit's task id.
        reason: what excluded it (a stable token; the message is for people).
        after_joining: whether the launcher had already joined the round it leaves
            (a marker seen only once the inner rendezvous returned).
        when: the moment of the exclusion, where known: ``after_joining`` is true both
            right after joining and during training.
        path: the decision file that excluded the unit (process 0), else ``None``.
        size: that file's size in bytes, else ``None``.
        marker: the text of the marker that excluded the launcher, else ``None``.
    """

    def __init__(
        self,
        message: str,
        *,
        job_id: str,
        task_id: str,
        reason: ExclusionReason,
        after_joining: bool = False,
        when: When | None = None,
        path: str | None = None,
        size: int | None = None,
        marker: str | None = None,
    ) -> None:
        super().__init__(message)
        self.when = when
        self.job_id = job_id
        self.task_id = task_id
        self.reason = reason
        self.after_joining = after_joining
        self.path = path
        self.size = size
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        """Rebuild with the same keyword arguments: the exclusion survives ``pickle``
        (a launcher whose agent runs in another process) and ``copy``."""
        keywords = {
            name: getattr(self, name)
            for name in (
                "job_id",
                "task_id",
                "reason",
                "after_joining",
                "when",
                "path",
                "size",
                "marker",
            )
        }
        return functools.partial(type(self), **keywords), self.args, self.__dict__

    def fields(self) -> dict[str, FieldValue]:
        """The exclusion's stable tokens, as the launcher's ERROR line ends with them in
        logfmt (:func:`~._logfmt.format_fields`): ``reason``, ``after_joining``, ``when``
        where known (``before-joining``, ``after-joining``, ``during-training``),
        ``job_id``, ``task_id``."""
        fields: dict[str, FieldValue] = {
            "reason": self.reason.value,
            "after_joining": self.after_joining,
        }
        if self.when is not None:
            fields["when"] = self.when.token
        return fields | {"job_id": self.job_id, "task_id": self.task_id}
