"""The package's exceptions: one public base, an exclusion, a setting that cannot be used.

Every exception class of the package derives from :class:`SegmentHealthError` (so
``except nvrx_seghealth.SegmentHealthError`` catches what the package raised on purpose),
and keeps the builtin base a caller may already catch. The hierarchy, with where each
class lives (one raised by a single module lives beside its code; ``*``: exported by
``nvrx_seghealth``)::

    SegmentHealthError *                   here
    ├── ConfigurationError(ValueError) *   here: a setting cannot be used
    ├── UnhealthyNodeException *           here: the unit is excluded (the spec's name)
    ├── InvalidIdentityError(ValueError) * _decision/unit.py: a Slurm id is unusable
    ├── DecisionConflict(RuntimeError) *   _decision/artifact.py: a conditional write
    │                                      found another decision; nothing written
    ├── HelperStartError(OSError)          _decision/helperprocess.py: no helper process
    ├── HelperTimeout(TimeoutError)        _decision/helperprocess.py: a bounded call into
    │                                      a hung filesystem did not answer, or was not sent
    ├── Unreachable(ConnectionError)       _launcher/retry.py: a replicated service did not
    │                                      answer a call within the retry timeout
    ├── EtcdError                          _launcher/etcd_v3/client.py: etcd v3, the base of
    │   ├── EtcdUnavailable(ConnectionError)   a member did not answer (transient)
    │   └── EtcdRefused(RuntimeError)      etcd answered no: a cause token and the fix
    ├── SlurmError(RuntimeError)           _producer/slurm.py: a Slurm command failed
    ├── StateFileError(ValueError)         _producer/state.py: a producer's state file
    └── HostlistError(ValueError)          _producer/hostlist.py: a Slurm host list

Outside the tree, on purpose:

* ``StepError(OSError)``, ``NotRegularError(OSError)`` and ``LockBusyError(TimeoutError)``
  of ``_decision/files.py``, raised by a decision write (and by the operators' filesystem
  helper, which raises them again in the caller): the helper runs that file by path under
  ``python -I -S``, so it imports nothing from the package and cannot derive from the base.
  All three are ``OSError`` s.
* ``CallsClosed`` (``_decision/helperprocess.py``) and ``Stopped`` (``_producer/schedule.py``)
  are ``BaseException`` s, as ``SystemExit`` is: the interpreter exits, or the producer (or
  the demo) was told to stop; the fail-open catch-alls let them pass. The producer engine's private
  ``_Hung`` (``_producer/publisher.py``) never leaves it.
* Python's own exceptions, for a call that the calling code gets wrong (a ``TypeError``
  for an id that is neither ``str`` nor ``int``, a ``ValueError`` for an empty decision
  text), and inside the launcher for a failure that the fail-open funnel
  (``_launcher/failopen.py``) turns into one WARNING.

Standard library only.
"""

from __future__ import annotations

import enum
import functools
from typing import Any

from ._logfmt import FieldValue

__all__ = ["ConfigurationError", "ExclusionReason", "SegmentHealthError", "UnhealthyNodeException"]


class SegmentHealthError(Exception):
    """The base of every exception this package raises on purpose (the tree is in the
    module documentation); each keeps its builtin base too, e.g. a
    :class:`ConfigurationError` is a ``ValueError``."""


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
        path: str | None = None,
        size: int | None = None,
        marker: str | None = None,
    ) -> None:
        super().__init__(message)
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
            for name in ("job_id", "task_id", "reason", "after_joining", "path", "size", "marker")
        }
        return functools.partial(type(self), **keywords), self.args, self.__dict__

    def fields(self) -> dict[str, FieldValue]:
        """The exclusion's stable tokens, as the launcher's ERROR line ends with them in
        logfmt (:func:`~._logfmt.format_fields`): ``reason``, ``after_joining``,
        ``job_id``, ``task_id``."""
        return {
            "reason": self.reason.value,
            "after_joining": self.after_joining,
            "job_id": self.job_id,
            "task_id": self.task_id,
        }
