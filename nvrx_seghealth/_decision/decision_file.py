"""The decision file: where it lives, what one ``stat`` of it means, how to write it.

The contract, consumer side:

- Path: ``<directory>/segment_health_check.<job_id>.<task_id>``. The directory is absolute
  and both ids are decimal digits, so the path never leaves the directory.
- One metadata call, ``os.stat`` following symlinks, bounded in time (:mod:`.boundedstat`).
- The file is never opened: a FIFO would block, and the content is the producer's.
- A regular file of size > 0 is ``UNHEALTHY``: the unit does not proceed.
- A regular file of size 0 is ``CLEAR``, and no file at all is ``ABSENT``: it proceeds.
- Any other error, no answer in time, or a file that is not regular proceeds with a
  WARNING: ``UNREADABLE`` or ``NOT_REGULAR`` (:class:`Outcome`).

The producer side, :func:`publish_decision` and :func:`clear_decision`, replaces the file
atomically under the directory's lock. When asked, it writes only if the file still holds
what the writer read (:mod:`.files`).
"""

from __future__ import annotations

import enum
import errno
import logging
import os
import stat
from dataclasses import dataclass

from .._errors import SegmentHealthError
from .._settings.check_settings import require_absolute_directory
from .._settings.durations import DEFAULT_STAT_TIMEOUT, STAT_TIMEOUT, validate_seconds
from . import files as decisionfs
from .boundedstat import stat_within
from .files import Current, Result
from .helperprocess import HelperStartError, HelperTimeout
from .unit import validate_id

__all__ = [
    "DECISION_FILE_PREFIX",
    "DEFAULT_STAT_TIMEOUT",
    "Decision",
    "DecisionConflict",
    "DirectoryPath",
    "Outcome",
    "clear_decision",
    "decision_file_path",
    "directory_problem",
    "evaluate",
    "judge",
    "judge_with_stat",
    "publish_decision",
    "unit_decision_file_path",
    "unit_id",
]

log = logging.getLogger(__name__)

#: A decision directory as the composition API takes it: a ``str`` or a path object.
DirectoryPath = str | os.PathLike[str]

DECISION_FILE_PREFIX = "segment_health_check"


class Outcome(enum.Enum):
    """What one ``stat`` of the decision file found."""

    UNHEALTHY = "unhealthy"
    CLEAR = "clear"
    ABSENT = "absent"
    UNREADABLE = "unreadable"
    NOT_REGULAR = "not-a-regular-file"


@dataclass(frozen=True)
class Decision:
    """The consumer's reading of one decision file.

    Attributes:
        path: the path of the decision file examined.
        outcome: what the stat found.
        reason: one human-readable line explaining ``outcome``.
        size: the file size for a regular file, else ``None``.
    """

    path: str
    outcome: Outcome
    reason: str
    size: int | None = None

    @property
    def proceed(self) -> bool:
        """True unless the unit is excluded (fail-open outcomes proceed)."""
        return self.outcome is not Outcome.UNHEALTHY

    @property
    def failed_open(self) -> bool:
        """True when the decision file could not be judged and the unit proceeds anyway."""
        return self.outcome in (Outcome.UNREADABLE, Outcome.NOT_REGULAR)


def unit_id(name: str, value: str | int) -> str:
    """``value`` as a decision-file id: a string of decimal digits, or a non-negative int.

    Raises:
        TypeError: ``value`` is neither a ``str`` nor an ``int`` (``bool`` is refused).
        InvalidIdentityError: a string that is not decimal digits, or a negative int.
    """
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise TypeError(
            f"{name} must be a str of decimal digits or an int, got "
            f"{type(value).__name__} {value!r}"
        )
    return validate_id(name, value if isinstance(value, str) else str(value))


def decision_file_path(directory: DirectoryPath, job_id: str | int, task_id: str | int) -> str:
    """Return ``<directory>/segment_health_check.<job_id>.<task_id>``.

    Ids are strings of decimal digits or ints (:func:`unit_id`).

    Raises:
        ValueError: ``directory`` is not absolute, or an id is not decimal digits.
        TypeError: an id is neither a ``str`` nor an ``int``.
    """
    return unit_decision_file_path(
        require_absolute_directory(directory),
        unit_id("job_id", job_id),
        unit_id("task_id", task_id),
    )


def unit_decision_file_path(directory: str, job_id: str, task_id: str) -> str:
    """:func:`decision_file_path` for a directory and ids already validated (a
    :class:`~.._settings.check_settings.CheckSettings` and an :class:`~.unit.AllocationUnit`)."""
    return os.path.join(directory, f"{DECISION_FILE_PREFIX}.{job_id}.{task_id}")


def _file_type(mode: int) -> str:
    for test, name in decisionfs.FILE_TYPES:
        if test(mode):
            return name
    return f"file of mode {stat.S_IFMT(mode):#o}"


def evaluate(path: str, stat_timeout: float = DEFAULT_STAT_TIMEOUT) -> Decision:
    """Judge the decision file at ``path`` with one bounded ``stat``; never open it.

    The stat runs in a helper process (:mod:`.boundedstat`), so a hung filesystem
    holds neither the caller beyond ``stat_timeout`` seconds nor its exit.

    Never raises for anything the filesystem does: every failure is a fail-open
    :class:`Decision` whose ``reason`` names the error.

    Raises:
        ConfigurationError: ``stat_timeout`` is out of range (see :mod:`.._settings.durations`).
    """
    return judge(path, validate_seconds(STAT_TIMEOUT, stat_timeout))


def judge(path: str, seconds: float) -> Decision:
    """:func:`evaluate` for a bound already validated (:data:`~.._settings.durations.STAT_TIMEOUT`).

    For callers that validated the bound once where it entered, so that each round's
    check does not validate it again.
    """
    return judge_with_stat(path, seconds)[0]


def judge_with_stat(path: str, seconds: float) -> tuple[Decision, os.stat_result | None]:
    """:func:`judge`, and the result of the one ``stat`` it judged (``None`` when the
    stat failed): for a caller that shows more of the file than its decision (``status``:
    its age) without a second stat."""
    try:
        st = stat_within(path, seconds)
    except FileNotFoundError:
        return Decision(path, Outcome.ABSENT, "no decision file"), None
    except (HelperTimeout, HelperStartError) as error:  # their own words; before OSError
        return Decision(path, Outcome.UNREADABLE, str(error)), None
    except OSError as error:
        code = errno.errorcode.get(error.errno or 0, "error")
        reason = f"stat failed: {code}: {error.strerror}"
        return Decision(path, Outcome.UNREADABLE, reason), None
    except ValueError as error:  # e.g. an embedded NUL byte
        return Decision(path, Outcome.UNREADABLE, f"stat failed: {error}"), None
    if not stat.S_ISREG(st.st_mode):
        reason = f"not a regular file: {_file_type(st.st_mode)}"
        return Decision(path, Outcome.NOT_REGULAR, reason), st
    if st.st_size > 0:
        reason = f"non-empty decision file ({st.st_size} bytes)"
        return Decision(path, Outcome.UNHEALTHY, reason, st.st_size), st
    return Decision(path, Outcome.CLEAR, "empty decision file", 0), st


def directory_problem(directory: str, seconds: float) -> str | None:
    """Why ``directory`` cannot hold decisions, or ``None`` when it can or cannot be told.

    One ``stat`` bounded by ``seconds`` (already validated, as for :func:`judge`). Only a definite answer is a problem: the directory does not
    exist, or is not a directory. A stat that fails otherwise (or hangs) returns
    ``None``: the decision file's own stat reports that.
    """
    try:
        st = stat_within(directory, seconds)
    except FileNotFoundError:
        return f"decision directory {directory} does not exist"
    except (OSError, ValueError):
        return None
    if not stat.S_ISDIR(st.st_mode):
        return f"decision directory {directory} is a {_file_type(st.st_mode)}, not a directory"
    return None


def _write(path: str, content: bytes | None, expect: Current | None) -> Result:
    result = decisionfs.replace(path, content, expect)
    for warning in result.warnings:
        log.warning("%s", warning)
    return result


def publish_decision(
    directory: DirectoryPath,
    job_id: str | int,
    task_id: str | int,
    text: str,
    *,
    expect: Current | None = None,
) -> str:
    """Mark a unit unhealthy: atomically write ``text`` as its decision; return the path.

    Producer-side. The file is written under a temporary name in ``directory`` and
    renamed over the decision file, so a consumer sees the old decision or the new one,
    never a partial or empty file. ``directory`` must exist. The write holds the
    directory's lock (:data:`~.files.LOCK_NAME`), so writers of this package never
    interleave. With ``expect`` (what :func:`~.files.read_current` returned), the
    write happens only if the file still holds exactly that; else, unless it already
    holds ``text``, :class:`DecisionConflict` is raised and nothing is written.

    A directory sync that fails after the rename is logged as a WARNING: the new
    decision is in place, and the call succeeds.

    Raises:
        ValueError: ``text`` is empty (an empty file means *healthy*), or a bad
            directory or id. ``TypeError``: an id that is neither str nor int.
        DecisionConflict: the file no longer holds ``expect``.
        OSError: the directory cannot be written (:class:`~.files.StepError`
            names the failed step).
    """
    if not text:
        raise ValueError("a decision needs non-empty text; an empty file means healthy")
    path = decision_file_path(directory, job_id, task_id)
    result = _write(path, text.encode(), expect)
    if result.status == "conflict":
        raise DecisionConflict(path, result.before)
    return path


def clear_decision(
    directory: DirectoryPath,
    job_id: str | int,
    task_id: str | int,
    *,
    remove: bool = False,
    expect: Current | None = None,
) -> str:
    """Mark a unit healthy again; return the path. Touches no other file.

    With ``remove=False`` the decision file is atomically replaced by an empty file (the
    producer is visibly alive); with ``remove=True`` it is unlinked (a missing file
    is fine). ``expect``, the lock and a failed directory sync: as
    :func:`publish_decision`.

    Raises:
        DecisionConflict: the file no longer holds ``expect``.
        OSError: the directory cannot be written.
    """
    path = decision_file_path(directory, job_id, task_id)
    result = _write(path, None if remove else b"", expect)
    if result.status == "conflict":
        raise DecisionConflict(path, result.before)
    return path


class DecisionConflict(RuntimeError, SegmentHealthError):
    """A conditional write found another decision than expected; nothing was written.

    Attributes:
        path: the decision file. current: what it holds now.
    """

    def __init__(self, path: str, current: Current) -> None:
        super().__init__(
            f"{path} changed since it was read (now {current.kind}, "
            f"{current.size} bytes); nothing written"
        )
        self.path = path
        self.current = current
