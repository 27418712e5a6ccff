"""The ``nvrx-seghealth`` command: a thin dispatcher to one module per subcommand.

A subcommand module provides ``register(subparsers)``, which adds its subparser (help
text, examples) and sets ``func``; ``func(args)`` returns the exit code. To add a
subcommand, list its module in ``_SUBCOMMANDS``: ``--help`` lists the subcommands in
that order.

Importing this package does not import torch: ``run`` imports it when it runs.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from . import check, demo, doctor, mark, publish_drained, run, status, store_host

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
    """Parse ``argv`` (default: ``sys.argv[1:]``) and run the chosen subcommand."""
    args = build_parser().parse_args(argv)
    return int(args.func(args))
