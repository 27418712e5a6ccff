"""Decision files as an operator tool sees them: listed by name, read with care.

The consumer never reads a decision; the operator commands may, to show the producer's
diagnostic text. Reading is bounded in size and refuses anything that is not a regular
file at the moment it is opened (the file is opened non-blocking, so a FIFO swapped in
after a ``stat`` cannot block the reader).

Standard library only.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass

from ..artifact import ARTIFACT_PREFIX

__all__ = ["DecisionFile", "first_line", "list_decisions", "read_head"]

_NAME = re.compile(rf"{re.escape(ARTIFACT_PREFIX)}\.([0-9]+)\.([0-9]+)")

#: Bytes read at most from one decision file.
READ_LIMIT = 64 * 1024


@dataclass(frozen=True)
class DecisionFile:
    """One ``segment_health_check.<job_id>.<task_id>`` entry of the decision directory."""

    job_id: str
    task_id: str
    path: str


def list_decisions(directory: str, job_id: str | None = None) -> list[DecisionFile]:
    """Entries of ``directory`` named exactly like decision files, sorted by job and task.

    Temporary files of an atomic write (``.segment_health_check.*.tmp``) and every other
    name are ignored. ``job_id`` keeps only that job's decisions.

    Raises:
        OSError: the directory cannot be listed.
    """
    found = []
    for name in os.listdir(directory):
        match = _NAME.fullmatch(name)
        if match and job_id in (None, match.group(1)):
            path = os.path.join(directory, name)
            found.append(DecisionFile(match.group(1), match.group(2), path))
    return sorted(found, key=lambda entry: (int(entry.job_id), int(entry.task_id)))


def read_head(path: str, limit: int = READ_LIMIT) -> bytes | None:
    """Up to ``limit`` bytes of the regular file at ``path``; ``None`` for anything else.

    Follows symlinks (as the consumer's ``stat`` does). Returns ``None`` when the path
    is missing, unreadable, or not a regular file when opened.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except (OSError, ValueError):
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        chunks, left = [], limit
        while left > 0:
            chunk = os.read(fd, left)
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def first_line(data: bytes, width: int = 200) -> str:
    """The first line of ``data`` as text (undecodable bytes replaced), at most ``width``."""
    line = data.split(b"\n", 1)[0].decode("utf-8", "replace").strip()
    return line if len(line) <= width else line[: width - 1] + "…"
