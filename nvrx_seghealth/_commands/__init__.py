"""The ``nvrx-seghealth`` command: a thin dispatcher to one module per subcommand.

A subcommand module provides ``register(subparsers)``, which adds its subparser (help
text, examples) and sets ``func``; ``func(args)`` returns the exit code. To add a
subcommand, list its module in ``_SUBCOMMANDS``: ``--help`` lists the subcommands in
that order.

Usage errors have one place: a ``func`` that finds its arguments or settings unusable
raises :class:`~nvrx_seghealth.ConfigurationError` (naming the setting and the fix), and
:func:`main` prints it as ``nvrx-seghealth COMMAND: error: MESSAGE`` on stderr and
returns ``2`` (:data:`~.output.EXIT_USAGE`), as argparse does for a malformed option.

Importing this package does not import torch: ``run`` imports it when it runs.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from .._errors import ConfigurationError
from . import check, demo, doctor, mark, publish_drained, run, status, store_host
from .output import usage_error

__all__ = ["build_parser", "main"]

_SUBCOMMANDS = (demo, run, check, mark, status, doctor, publish_drained, store_host)


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser with every subcommand."""
    parser = argparse.ArgumentParser(
        prog="nvrx-seghealth",
        description="Keep an unhealthy Slurm allocation unit out of PyTorch elastic rendezvous.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in _SUBCOMMANDS:
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` (default: ``sys.argv[1:]``), run the chosen subcommand and return
    its exit code; ``2`` when it raises :class:`~nvrx_seghealth.ConfigurationError`."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except ConfigurationError as error:
        return usage_error(args.command, str(error))
