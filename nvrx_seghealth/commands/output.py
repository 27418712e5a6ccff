"""How the operator commands talk to people and to scripts.

Exit codes shared by every command except ``run`` (which exits as torchrun does):
``0`` success, ``1`` the thing asked about is not fine (excluded, a problem found, a
failed pass or write), ``2`` a usage or configuration error (nothing was done).

Colours only when the stream is a terminal and ``NO_COLOR`` is unset; tables are
aligned on the uncoloured text. Standard library only.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from typing import Any, TextIO

__all__ = [
    "EXIT_FAILURE",
    "EXIT_OK",
    "EXIT_USAGE",
    "format_age",
    "paint",
    "print_json",
    "render_table",
    "usage_error",
]

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2

_COLOURS = {"red": "31", "green": "32", "yellow": "33", "bold": "1", "dim": "2"}


def _colour_enabled(stream: TextIO) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty()) and "NO_COLOR" not in os.environ and (
        os.environ.get("TERM") != "dumb"
    )


def paint(text: str, colour: str | None, stream: TextIO | None = None) -> str:
    """``text`` in ``colour`` (a key of the palette) when ``stream`` shows colours."""
    if colour is None or not _colour_enabled(stream or sys.stdout):
        return text
    return f"\033[{_COLOURS[colour]}m{text}\033[0m"


def render_table(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    colours: Sequence[Sequence[str | None]] | None = None,
    stream: TextIO | None = None,
) -> str:
    """Left-aligned columns separated by two spaces; ``colours[i][j]`` paints a cell."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows)]

    def line(cells: Sequence[str], styles: Sequence[str | None]) -> str:
        padded = [
            paint(cell.ljust(width), style, stream) if style else cell.ljust(width)
            for cell, width, style in zip(cells, widths, styles)
        ]
        return "  ".join(padded).rstrip()

    out = [line(headers, ["bold"] * len(headers))]
    for index, row in enumerate(rows):
        out.append(line(row, colours[index] if colours else [None] * len(row)))
    return "\n".join(out)


def format_age(seconds: float) -> str:
    """A short human age: ``42s``, ``3m07s``, ``2h05m``, ``4d03h`` (negative: ``-5s``)."""
    if seconds < 0:
        return "-" + format_age(-seconds)
    whole = int(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    if whole < 86400:
        return f"{whole // 3600}h{whole % 3600 // 60:02d}m"
    return f"{whole // 86400}d{whole % 86400 // 3600:02d}h"


def print_json(value: Any) -> None:
    """Print ``value`` as one JSON document on stdout."""
    print(json.dumps(value, indent=2, sort_keys=True))


def usage_error(command: str, message: str) -> int:
    """Print ``nvrx-seghealth COMMAND: error: MESSAGE`` to stderr; return ``EXIT_USAGE``."""
    print(f"nvrx-seghealth {command}: error: {message}", file=sys.stderr)
    return EXIT_USAGE
