"""Decision files as an operator tool sees them: listed by name, within a time bound.

The consumer never reads a decision; the operator commands may, to show the producer's
diagnostic text (:func:`nvrx_seghealth._decision.boundedfs.read_current`: bounded in time and
size, regular files only, non-blocking, so a FIFO cannot block the reader). What that read
finds also says whether a producer can write there (:func:`not_regular_kind`). A listing
also tells a root of per-job folders from one job's folder (:func:`job_folder`).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from . import boundedfs
from .decision_file import DECISION_FILE_PREFIX
from .files import Current

__all__ = [
    "DecisionFile",
    "first_line",
    "job_folder",
    "list_decisions",
    "list_directory",
    "not_regular_kind",
    "printable",
]

_NAME = re.compile(rf"{re.escape(DECISION_FILE_PREFIX)}\.([0-9]+)\.([0-9]+)")
#: The name of a per-job folder: a job id (a decision file's name is never digits alone).
_JOB_FOLDER = re.compile("[0-9]+")
#: How :func:`~.files.read_current` begins the error of an entry it refused unopened.
_NOT_REGULAR = "not a regular file: "


@dataclass(frozen=True)
class DecisionFile:
    """One ``segment_health_check.<job_id>.<task_id>`` entry of the decision directory."""

    job_id: str
    task_id: str
    path: str

    @property
    def unread(self) -> bool:
        """An id has leading zeros (``segment_health_check.01.1``): no launcher reads the
        file, as Slurm writes no such id (and ``mark`` refuses one)."""
        return any(len(id_) > 1 and id_[0] == "0" for id_ in (self.job_id, self.task_id))

    @property
    def read_name(self) -> str:
        """The name a launcher of this unit reads: its ids without leading zeros."""
        return f"{DECISION_FILE_PREFIX}.{int(self.job_id)}.{int(self.task_id)}"


def list_decisions(
    names: list[str], directory: str, job_id: str | None = None
) -> list[DecisionFile]:
    """The entries among ``names`` (of ``directory``) named exactly like decision files,
    sorted by job and task.

    Temporary files of an atomic write (``.segment_health_check.*.tmp``), the lock file
    and every other name are ignored. Names with leading zeros are listed, marked
    :attr:`DecisionFile.unread`. ``job_id`` keeps only that job's decisions.
    """
    found = []
    for name in names:
        match = _NAME.fullmatch(name)
        if match and job_id in (None, match.group(1)):
            path = os.path.join(directory, name)
            found.append(DecisionFile(match.group(1), match.group(2), path))
    return sorted(found, key=lambda entry: (int(entry.job_id), int(entry.task_id)))


def job_folder(directory: str, job_id: str, timeout: float) -> str | None:
    """The folder that job ``job_id``'s launchers read, when ``directory`` is the root
    above per-job folders instead of one of them; else ``None``.

    The documented job script's launchers read ``<root>/<array job id>``. ``directory``
    is such a root when its last part is not ``job_id`` and it holds an entry named by a
    job id. One listing within ``timeout`` seconds; ``None`` when it fails, as the
    caller has written or judged the decision already.
    """
    if os.path.basename(os.path.normpath(directory)) == job_id:
        return None
    try:
        names = list_directory(directory, timeout)
    except OSError:  # HelperTimeout too
        return None
    if any(_JOB_FOLDER.fullmatch(name) for name in names):
        return os.path.join(directory, job_id)
    return None


def list_directory(directory: str, timeout: float) -> list[str]:
    """The names in ``directory`` within ``timeout`` seconds.

    Raises:
        OSError: as :func:`nvrx_seghealth._decision.boundedfs.list_names` (a
            :class:`~.helperprocess.HelperTimeout` too).
    """
    return boundedfs.list_names(directory, timeout)


def not_regular_kind(current: Current) -> str | None:
    """What a decision path holds when it is no regular file, as ``current`` (from
    :func:`~.boundedfs.read_current`, which never follows a link) found it: ``symbolic
    link``, ``FIFO``, ``directory``... ``None`` for a regular file, for nothing, and for
    an entry that could not be looked at.

    No producer writes a decision over such an entry: it writes through no link and
    replaces nothing it cannot read. ``mark`` replaces any but a directory.
    """
    if current.kind == "unreadable" and current.error.startswith(_NOT_REGULAR):
        return current.error[len(_NOT_REGULAR) :]
    return None


def printable(text: str) -> str:
    """``text`` with every character a terminal would act on, or hide, made visible.

    Each character that :meth:`str.isprintable` rejects (the C0 and C1 controls and DEL,
    format characters such as the bidirectional overrides U+202A-U+202E and isolates
    U+2066-U+2069, the line and paragraph separators U+2028/U+2029, unassigned and
    surrogate code points, every space other than U+0020) is replaced by its escape:
    ``\\xHH`` below U+0100, ``\\uHHHH`` below U+10000, ``\\UHHHHHHHH`` above. Every other
    character, the backslash included, is kept, so the result is for reading, not for
    decoding back. Use it on every producer-written text an operator tool prints.
    """
    return "".join(char if char.isprintable() else _escape(char) for char in text)


def _escape(char: str) -> str:
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def first_line(data: bytes, width: int = 200) -> str:
    """The first line of ``data`` as :func:`printable` text (undecodable bytes replaced),
    at most ``width`` characters."""
    line = printable(data.split(b"\n", 1)[0].decode("utf-8", "replace").strip())
    return line if len(line) <= width else line[: width - 1] + "…"
