"""Options shared by the operator commands: the decision directory and unit ids.

Standard library plus PyYAML (through :mod:`nvrx_seghealth.ft_settings`).
"""

from __future__ import annotations

import argparse
import textwrap
from typing import Any

from ..allocation import InvalidIdentityError, validate_id
from ..config import DIRECTORY_ENV, ConfigurationError
from ..ft_settings import resolve_directory

__all__ = ["add_command", "add_directory_option", "directory_of", "slurm_id"]


def add_command(
    subparsers: Any, name: str, summary: str, description: str, examples: str
) -> argparse.ArgumentParser:
    """Add subcommand ``name`` with a one-line ``summary`` (shown in the command list),
    a ``description`` and an ``examples`` epilog (both dedented and shown as written)."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        name,
        help=summary,
        description=textwrap.dedent(description).strip(),
        epilog="examples:\n" + textwrap.indent(textwrap.dedent(examples).strip(), "  "),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    return parser


def slurm_id(value: str) -> str:
    """argparse type: a Slurm job or task id (decimal digits only)."""
    try:
        return validate_id("id", value)
    except InvalidIdentityError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


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
