"""``key=value`` fields in one line (logfmt), as the events' ``message`` carries them.

A value is written bare unless it is empty or holds a space, ``"`` or ``=``; then it is
a JSON string. Booleans are ``true``/``false``; ``None`` values are left out. Any
logfmt reader, or :func:`parse_fields`, reads the fields back.

Standard library only (the simulation reads recorded events without torch).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

__all__ = ["FieldValue", "format_fields", "parse_fields"]

FieldValue = str | int | float | bool | None

_BARE = re.compile(r'[^\s="]+')
_PAIR = re.compile(r'([^\s=]+)=("(?:[^"\\]|\\.)*"|[^\s"]*)')


def format_fields(fields: Mapping[str, FieldValue]) -> str:
    """One line of ``key=value`` pairs of ``fields`` (see the module doc)."""
    pairs = []
    for key, value in fields.items():
        if value is None:
            continue
        text = ("true" if value else "false") if isinstance(value, bool) else str(value)
        pairs.append(f"{key}={text if _BARE.fullmatch(text) else json.dumps(text)}")
    return " ".join(pairs)


def parse_fields(message: str) -> dict[str, str]:
    """The fields of an event's ``message``, as strings (inverse of :func:`format_fields`)."""
    return {
        key: json.loads(value) if value.startswith('"') else value
        for key, value in _PAIR.findall(message)
    }
