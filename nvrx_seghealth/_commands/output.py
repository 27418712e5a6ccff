"""How the operator commands talk to people and to scripts.

Exit codes: :data:`EXIT_STATUSES` is the one definition of every operator command's exit
statuses; each command's ``--help`` shows its own (built from it by
:func:`~.arguments.add_command`), and docs/reference/exit-codes.md's table states the same. The codes
follow one rule: ``0`` success, ``1`` the thing asked about is not fine (excluded, a
problem found, a failed pass or write), ``2`` a usage or configuration error (nothing
was done). ``run`` exits as torchrun does and is not listed.

Colours only when the stream is a terminal and ``NO_COLOR`` is unset; tables are
aligned on the uncoloured text. Standard library only.
"""

from __future__ import annotations

import json
import os
import select
import signal
import sys
from collections.abc import Sequence
from typing import Any, TextIO

__all__ = [
    "EXIT_BROKEN_PIPE",
    "EXIT_FAILURE",
    "EXIT_OK",
    "EXIT_STATUSES",
    "EXIT_USAGE",
    "ExitStatus",
    "exit_status_text",
    "format_age",
    "paint",
    "print_json",
    "quiet_gone_readers",
    "render_table",
    "usage_error",
]

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
#: Every command's exit when its output's reader went away (``... | head -1``): 128 + SIGPIPE,
#: the status a shell gives a command killed by SIGPIPE there.
EXIT_BROKEN_PIPE = 128 + signal.SIGPIPE

#: One exit status of a command: (code, what it means).
ExitStatus = tuple[int, str]

_USAGE: ExitStatus = (EXIT_USAGE, "usage or configuration error; nothing was done")
_NOT_WRITTEN = (
    "the directory is missing or not writable, another writer held the lock, "
    "or the filesystem did not answer within --fs-timeout"
)

#: Every operator command's exit statuses, by command name: the single source of the
#: ``--help`` texts and of docs/reference/exit-codes.md's table.
EXIT_STATUSES: dict[str, tuple[ExitStatus, ...]] = {
    "check": (
        (EXIT_OK, "the unit proceeds: healthy, or the decision cannot be judged (fail open)"),
        (EXIT_FAILURE, "the unit is excluded"),
        _USAGE,
    ),
    "mark": (
        (EXIT_OK, "the decision is written"),
        (EXIT_FAILURE, f"not written: {_NOT_WRITTEN}"),
        _USAGE,
    ),
    "clear": (
        (EXIT_OK, "the decision is cleared (or there was nothing to clear)"),
        (EXIT_FAILURE, f"not cleared: {_NOT_WRITTEN}"),
        _USAGE,
    ),
    "status": (
        (EXIT_OK, "listed (also when there is no decision file)"),
        (
            EXIT_FAILURE,
            (
                "a producer is failing or stopped, the directory cannot be listed, or a "
                "call in it did not answer within --fs-timeout (the files not looked at "
                "are unknown)"
            ),
        ),
        _USAGE,
    ),
    "doctor": (
        (EXIT_OK, "no problem found"),
        (EXIT_FAILURE, "at least one FAIL line (each says the fix; a bad --dir is one)"),
        (EXIT_USAGE, "usage error (an unknown or malformed option); nothing was done"),
    ),
    "publish-drained": (
        (
            EXIT_OK,
            (
                "--once: the pass and all its writes succeeded; --interval: stopped by "
                "SIGINT or SIGTERM"
            ),
        ),
        (
            EXIT_FAILURE,
            (
                "--once: a Slurm query failed (nothing written, the last decisions "
                "kept), a write failed or did not answer, or SIGINT or SIGTERM stopped the "
                "pass (the decisions written before it stand)"
            ),
        ),
        _USAGE,
    ),
    "store-host": (
        (EXIT_OK, "stopped by SIGINT or SIGTERM, or by the end of stdin (--stop-on-stdin-eof)"),
        (
            EXIT_USAGE,
            (
                "usage error, the port cannot be bound (in use, not permitted), or the port"
                " file is refused or cannot be written; nothing was served"
            ),
        ),
    ),
}


def exit_status_text(command: str) -> str:
    """The ``exit status:`` block of ``command``'s help, from :data:`EXIT_STATUSES`."""
    return "exit status:\n" + "\n".join(
        f"  {code}  {meaning}" for code, meaning in EXIT_STATUSES[command]
    )


_COLOURS = {"red": "31", "green": "32", "yellow": "33", "bold": "1", "dim": "2"}


def _colour_enabled(stream: TextIO) -> bool:
    isatty = getattr(stream, "isatty", None)
    return (
        bool(isatty and isatty())
        and "NO_COLOR" not in os.environ
        and (os.environ.get("TERM") != "dumb")
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
    print(json.dumps(value, indent=2, sort_keys=True, allow_nan=False))


def usage_error(command: str, message: str) -> int:
    """Print ``nvrx-seghealth COMMAND: error: MESSAGE`` to stderr; return ``EXIT_USAGE``."""
    print(f"nvrx-seghealth {command}: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def _reader_gone(fd: int) -> bool:
    """Whether ``fd`` writes to a pipe or socket whose reader went away (POLLERR/POLLHUP)."""
    poller = select.poll()
    poller.register(fd, 0)  # errors and hang-ups are always reported
    return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))


def quiet_gone_readers() -> bool:
    """Point stdout and stderr, each whose reader went away, at ``/dev/null``; return
    whether any had (a ``BrokenPipeError`` was theirs).

    What is still buffered for them is then dropped at the interpreter's exit, instead
    of failing again there with an "Exception ignored" message.
    """
    gone = False
    for stream in (sys.stdout, sys.stderr):
        try:
            fd = stream.fileno()
        except (AttributeError, OSError, ValueError):  # replaced by one without a file
            continue
        if _reader_gone(fd):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, fd)
            os.close(devnull)
            gone = True
    return gone
