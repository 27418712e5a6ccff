"""Options shared by the operator commands: the decision directory and unit ids.

Standard library plus PyYAML (through :mod:`nvrx_seghealth._settings.launcher_options`).
"""

from __future__ import annotations

import argparse
import re
import textwrap
from collections.abc import Callable
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
    "add_command",
    "add_directory_option",
    "add_fs_timeout_option",
    "directory_of",
    "fs_seconds",
    "seconds_type",
    "slurm_id",
]


def add_command(
    subparsers: Any, name: str, summary: str, description: str, examples: str
) -> argparse.ArgumentParser:
    """Add subcommand ``name`` with a one-line ``summary`` (shown in the command list),
    a ``description`` and an ``examples`` epilog (both dedented and shown as written),
    followed by its exit statuses when :data:`~.output.EXIT_STATUSES` lists ``name``."""
    epilog = "examples:\n" + textwrap.indent(textwrap.dedent(examples).strip(), "  ")
    if name in EXIT_STATUSES:
        epilog += "\n\n" + exit_status_text(name)
    parser: argparse.ArgumentParser = subparsers.add_parser(
        name,
        help=summary,
        description=textwrap.dedent(description).strip(),
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
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


def add_fs_timeout_option(parser: argparse.ArgumentParser) -> None:
    """Add ``--fs-timeout S``: the bound of every call into the decision directory."""
    parser.add_argument(
        "--fs-timeout",
        type=fs_seconds,
        default=DEFAULT_STAT_TIMEOUT,
        metavar="S",
        help="seconds one read, list or write in the decision directory may take before "
        f"the command gives up (a hung shared filesystem; {FS_TIMEOUT.range_text}, "
        f"default: {DEFAULT_STAT_TIMEOUT:g})",
    )


def add_directory_option(parser: argparse.ArgumentParser) -> None:
    """Add ``--dir DIR`` (default: ``$NVRX_SEGMENT_HEALTH_CHECK_DIR``)."""
    parser.add_argument(
        "--dir",
        metavar="DIR",
        help=f"absolute decision directory (default: ${DIRECTORY_ENV})",
    )


def directory_of(args: argparse.Namespace) -> str:
    """The validated ``--dir``, else the environment's directory.

    Raises:
        ConfigurationError: relative or empty, or neither is given.
    """
    setting = resolve_directory(args.dir, flag="--dir")
    if setting is None:
        raise ConfigurationError(f"no decision directory: give --dir DIR or set {DIRECTORY_ENV}")
    return setting.directory
