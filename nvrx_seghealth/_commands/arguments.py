"""How a command declares its options: a table of rows that one helper registers.

A command is its name, its help texts, its option rows and the function it runs
(:func:`add_command`). A row is one :func:`option` (argparse's ``add_argument``) or a
:class:`OneOf` of several, at most one of which may be given. The rows several commands
share live here: the decision directory, the filesystem bound, ``--json``. So do the
argparse types of unit ids and durations.

Standard library plus PyYAML (through :mod:`nvrx_seghealth._settings.launcher_options`).
"""

from __future__ import annotations

import argparse
import re
import textwrap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._decision.unit import InvalidIdentityError, validate_id
from .._errors import ConfigurationError
from .._settings.check_settings import DIRECTORY_ENV
from .._settings.durations import (
    DEFAULT_STAT_TIMEOUT,
    FS_TIMEOUT,
    DurationSetting,
    validate_seconds,
)
from .._settings.launcher_options import resolve_directory
from .output import EXIT_STATUSES, exit_status_text

__all__ = [
    "DIRECTORY",
    "FS_TIMEOUT_OPTION",
    "JSON",
    "OneOf",
    "Option",
    "Row",
    "add_command",
    "add_options",
    "directory_of",
    "fs_seconds",
    "option",
    "seconds_type",
    "slurm_id",
]


@dataclass(frozen=True)
class Option:
    """One option of a command: its flags, and the keywords of argparse's ``add_argument``."""

    flags: tuple[str, ...]
    settings: Mapping[str, Any]


def option(*flags: str, **settings: Any) -> Option:
    """The row of one option, written as its ``add_argument`` call would be."""
    return Option(flags, settings)


@dataclass(frozen=True)
class OneOf:
    """Options of which at most one may be given (argparse's mutually exclusive group)."""

    options: tuple[Option, ...]


#: One row of a command's option table.
Row = Option | OneOf


def add_options(parser: Any, rows: Sequence[Row]) -> None:
    """Add every row to ``parser`` (or to an argument group), in order."""
    for row in rows:
        if isinstance(row, OneOf):
            add_options(parser.add_mutually_exclusive_group(), row.options)
        else:
            parser.add_argument(*row.flags, **row.settings)


def add_command(
    subparsers: Any,
    name: str,
    summary: str,
    description: str,
    examples: str | None,
    options: Sequence[Row] = (),
    func: Callable[[argparse.Namespace], int] | None = None,
) -> argparse.ArgumentParser:
    """Add subcommand ``name``, which runs ``func``, with its ``options`` rows.

    ``summary`` is its line in the command list. ``description`` and the ``examples``
    epilog are dedented and shown as written. The epilog ends with the command's exit
    statuses when :data:`~.output.EXIT_STATUSES` lists ``name``.
    """
    blocks = []
    if examples is not None:
        blocks.append("examples:\n" + textwrap.indent(textwrap.dedent(examples).strip(), "  "))
    if name in EXIT_STATUSES:
        blocks.append(exit_status_text(name))
    parser: argparse.ArgumentParser = subparsers.add_parser(
        name,
        help=summary,
        description=textwrap.dedent(description).strip(),
        epilog="\n\n".join(blocks) or None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_options(parser, options)
    if func is not None:
        parser.set_defaults(func=func)
    return parser


_SQUEUE_FORM = re.compile(r"([0-9]+)_([0-9]+)")


def slurm_id(value: str) -> str:
    """argparse type: a Slurm job or task id (decimal digits only).

    ``123_7``, the form ``squeue`` prints for an array task, is refused with a hint to
    split it.
    """
    try:
        return validate_id("id", value)
    except InvalidIdentityError as error:
        split = _SQUEUE_FORM.fullmatch(value)
        if split:
            raise argparse.ArgumentTypeError(
                f"{value!r} is squeue's <array job id>_<task id>: give --job-id "
                f"{split[1]} --task-id {split[2]}"
            ) from None
        raise argparse.ArgumentTypeError(str(error)) from None


def seconds_type(setting: DurationSetting) -> Callable[[str], float]:
    """The argparse type of ``setting``: its validator
    (:func:`~nvrx_seghealth._settings.durations.validate_seconds`), a refusal a usage error."""

    def seconds(value: str) -> float:
        try:
            return validate_seconds(setting, value)
        except ConfigurationError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    return seconds


#: argparse type: seconds a filesystem call may take, in the range of
#: :data:`~nvrx_seghealth._settings.durations.FS_TIMEOUT`.
fs_seconds = seconds_type(FS_TIMEOUT)


#: ``--fs-timeout S``: the bound of every call into the decision directory.
FS_TIMEOUT_OPTION = option(
    "--fs-timeout",
    type=fs_seconds,
    default=DEFAULT_STAT_TIMEOUT,
    metavar="S",
    help="seconds one read, list or write in the decision directory may take before "
    f"the command gives up (a hung shared filesystem; {FS_TIMEOUT.range_text}, "
    f"default: {DEFAULT_STAT_TIMEOUT:g})",
)

#: ``--dir DIR`` (default: ``$NVRX_SEGMENT_HEALTH_CHECK_DIR``; :func:`directory_of`).
DIRECTORY = option(
    "--dir", metavar="DIR", help=f"absolute decision directory (default: ${DIRECTORY_ENV})"
)

#: ``--json``: one JSON object instead of lines for people.
JSON = option("--json", action="store_true", help="print one JSON object")


def directory_of(args: argparse.Namespace) -> str:
    """The validated ``--dir``, else the environment's directory.

    Raises:
        ConfigurationError: relative or empty, or neither is given.
    """
    setting = resolve_directory(args.dir, flag="--dir")
    if setting is None:
        raise ConfigurationError(f"no decision directory: give --dir DIR or set {DIRECTORY_ENV}")
    return setting.directory
